"""Where a Schema Registry is and how to log in: a pure model (no HTTP client), so the metadata models and the
project config can hold it without importing the registry client.
"""

from __future__ import annotations

from typing import Annotated, Literal

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


SubjectNameStrategy = Literal["topic", "record", "topic_record"]
"""Confluent's subject name strategies: ``topic`` (TopicNameStrategy, ``<topic>-value`` / ``<topic>-key``),
``record`` (RecordNameStrategy, the record's fully-qualified name) and ``topic_record`` (TopicRecordNameStrategy,
``<topic>-<record name>``)."""
RecordName = Annotated[
    str | None, Field(min_length=1, description="The fully-qualified record name, for the record strategies.")
]


def subject_name(strategy: SubjectNameStrategy, topic: str, role: Literal["value", "key"], record: str | None) -> str:
    """The registry subject of ``topic``'s values or keys under ``strategy`` (``record``: the record's full name).

    Example:
        >>> subject_name("topic_record", "orders", "value", "com.acme.Order")
        'orders-com.acme.Order'
    """
    if strategy == "topic":
        return f"{topic}-{role}"
    assert record is not None  # the config's validators require it for the record strategies
    return record if strategy == "record" else f"{topic}-{record}"


def subject_naming_problem(
    setting: str, strategy: SubjectNameStrategy, record: str | None, registry_format: bool
) -> str | None:
    """Why a ``<setting>``/record name pair does not hold together (None when it does)."""
    if strategy != "topic" and record is None:
        return (
            f"{setting}: {strategy} names the subject after the record, so give its fully-qualified name in "
            f"{setting.replace('subject_name_strategy', 'record_name')} (a batch read picks the subject before it "
            "reads a record)"
        )
    if strategy == "topic" and record is not None:
        return (
            f"{setting.replace('subject_name_strategy', 'record_name')} is for the record and topic_record strategies"
        )
    if strategy != "topic" and not registry_format:
        return f"{setting} is for formats read with a Schema Registry (avro, protobuf, json_schema)"
    return None


def require_subject_naming(
    setting: str, strategy: SubjectNameStrategy, record: str | None, registry_format: bool
) -> None:
    """Raise the :func:`subject_naming_problem` of the pair, if any, as a ValueError (for model validators)."""
    problem = subject_naming_problem(setting, strategy, record, registry_format)
    if problem is not None:
        raise ValueError(problem)
