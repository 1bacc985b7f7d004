"""Where a Schema Registry is and how to log in: a pure model (no HTTP client), so the metadata models and the
project config can hold it without importing the registry client.
"""

from __future__ import annotations

from pydantic import Field

from dynamic_kafka.frozen import FrozenModel


class RegistryConfig(FrozenModel):
    """Where a cluster's Schema Registry is and how to log in (a metadata file's ``schema_registry`` block).

    Example:
        >>> RegistryConfig(url="https://127.0.0.1:18081/apis/ccompat/v7", username="${env:SR_USER}",
        ...                password="${env:SR_PASSWORD}", ca_location="/etc/registry/ca.pem").password
        '${env:SR_PASSWORD}'
    """

    url: str = Field(description="Base URL of the Confluent-compatible API, e.g. http://host:8081.")
    username: str | None = Field(default=None, description="Basic-auth user (literal or ${env:...} reference).")
    password: str | None = Field(
        default=None, repr=False, description="Basic-auth password: a ${env:...} or ${file:...} reference."
    )
    ca_location: str | None = Field(
        default=None,
        description="For an https URL: PEM file of the CA that signed the registry's certificate (default: the "
        "system's trust store).",
    )
    timeout_s: float = Field(default=10.0, gt=0, description="HTTP timeout of one registry call.")
