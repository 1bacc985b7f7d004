"""What the local Schema Registry tooling records and returns: a local registry and its status."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

CCOMPAT_PATH = "/apis/ccompat/v7"


class LocalRegistry(BaseModel):
    """One local Apicurio Registry, as recorded in its ``registry.json``.

    Example:
        >>> from devtools.local_registry import start_registries
        >>> start_registries([("east", 18081)])["east"].url  # doctest: +SKIP
        'http://127.0.0.1:18081/apis/ccompat/v7'
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="Logical name of the registry.")
    port: int = Field(description="HTTP port on 127.0.0.1.")
    url: str = Field(description="The Confluent-compatible API's base URL, what clients pass as `url`.")
    basic_auth_user: str | None = Field(default=None, description="User every API call must log in as, if any.")
    ca_file: Path | None = Field(
        default=None, description="With TLS: the PEM file of the CA that signed the registry's certificate."
    )
    pid: int | None = Field(default=None, description="Registry process id at the last start.")
    registry_version: str = Field(description="Apicurio Registry release the process runs.")
    registry_dir: Path = Field(description="The registry's folder (state, pid, log, data).")
    log_file: Path = Field(description="The registry's log file.")


class RegistryStatus(BaseModel):
    """A local registry and whether its process is running now."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    registry: LocalRegistry = Field(description="The recorded registry.")
    running: bool = Field(description="True if the recorded registry process is alive.")
