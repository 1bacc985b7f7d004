"""A typed Schema Registry client for the driver: writer schemas fetched by id once, then served from a cache.

Records only carry a schema id, so a run needs the writer schema of each id its planned ranges contain: a handful
of calls per run, never one per record. The URL and the basic-auth credentials stay ``${env:...}`` /
``${file:...}`` references in :class:`RegistryConfig` (its repr shows the references, never values); they are
resolved only when the HTTP client is built, and every error message is scrubbed of the resolved secrets.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Literal

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError as ConfluentRegistryError
from pydantic import Field

from dynamic_kafka.errors import SchemaRegistryError, UnknownSchemaError
from dynamic_kafka.frozen import FrozenModel
from dynamic_kafka.secrets import mask_secrets, resolve_value

if TYPE_CHECKING:
    from dynamic_kafka.registry.config import RegistryConfig

logger = logging.getLogger(__name__)

SchemaType = Literal["AVRO", "PROTOBUF", "JSON"]
_SCHEMA_NOT_FOUND = 40403
_SUBJECT_NOT_FOUND = 40401


class WriterSchema(FrozenModel):
    """The schema a record was written with, as the registry returns it for the record's id."""

    schema_id: int = Field(description="The id in the record's wire-format header.")
    schema_type: SchemaType = Field(description="AVRO, PROTOBUF or JSON.")
    schema_str: str = Field(
        description="Avro JSON, JSON Schema, or Protobuf (.proto text or a base64 FileDescriptorProto)."
    )
    references: tuple[str, ...] = Field(default=(), description="Subjects of referenced schemas, if any.")


class RegistryClient:
    """Fetches writer schemas by id, each at most once per client.

    Args:
        config: the registry's URL and credentials (references are resolved here).
        owner: who the registry belongs to (a cluster id), for error messages.

    Raises:
        ConfigError: a credential reference names an unset variable or an unreadable file.
    """

    def __init__(self, config: RegistryConfig, *, owner: str) -> None:
        self._url = config.url.rstrip("/")
        self._owner = owner
        self._secrets: list[str] = []
        self._ca_location = config.ca_location
        conf: dict[str, Any] = {"url": self._url, "timeout": config.timeout_s}
        if config.ca_location is not None:
            conf["ssl.ca.location"] = config.ca_location
        if config.username is not None or config.password is not None:
            user = resolve_value(config.username or "", key="schema_registry.username", cluster_id=owner)
            password = resolve_value(config.password or "", key="schema_registry.password", cluster_id=owner)
            self._secrets = [s for s in (password,) if s]
            conf["basic.auth.user.info"] = f"{user}:{password}"
        self._client = SchemaRegistryClient(conf)
        self._by_id: dict[int, WriterSchema] = {}

    def __repr__(self) -> str:
        return f"RegistryClient(url={self._url!r}, cached={len(self._by_id)})"

    @property
    def url(self) -> str:
        """The registry's base URL."""
        return self._url

    def writer_schema(self, schema_id: int) -> WriterSchema:
        """Return the schema with ``schema_id``, from the cache after the first call.

        Raises:
            UnknownSchemaError: the registry has no schema with that id.
            SchemaRegistryError: the registry is unreachable or answered another error (retriable unless 4xx).
        """
        cached = self._by_id.get(schema_id)
        if cached is not None:
            return cached
        try:
            schema = self._client.get_schema(schema_id)
        except ConfluentRegistryError as e:
            if e.error_code == _SCHEMA_NOT_FOUND or e.http_status_code == 404:
                raise UnknownSchemaError(schema_id, url=self._url) from e
            raise self._answered(e, f"fetching schema id {schema_id}") from e
        except Exception as e:  # the HTTP client's transport errors (refused, timeout, DNS) have no common base here
            raise self._unreachable(e, f"fetching schema id {schema_id}") from e
        fetched = WriterSchema(
            schema_id=schema_id,
            schema_type=_schema_type(schema.schema_type),
            schema_str=schema.schema_str or "",
            references=tuple(r.subject for r in schema.references or () if r.subject),
        )
        self._by_id[schema_id] = fetched
        logger.debug("schema registry %s: fetched schema id %d (%s)", self._url, schema_id, fetched.schema_type)
        return fetched

    def subject_schemas(self, subject: str) -> list[tuple[int, WriterSchema]]:
        """Return ``(version, schema)`` for every version registered under ``subject``, oldest first; empty when
        the registry does not know the subject. Each schema also lands in the by-id cache.

        Raises:
            SchemaRegistryError: the registry is unreachable or answered another error.
        """
        try:
            versions = self._client.get_versions(subject)
        except ConfluentRegistryError as e:
            if e.error_code == _SUBJECT_NOT_FOUND:
                return []
            raise self._answered(e, f"listing versions of subject {subject!r}") from e
        except Exception as e:
            raise self._unreachable(e, f"listing versions of subject {subject!r}") from e
        found: list[tuple[int, WriterSchema]] = []
        for version in sorted(versions):
            try:
                registered = self._client.get_version(subject, version)
            except ConfluentRegistryError as e:
                raise self._answered(e, f"fetching version {version} of subject {subject!r}") from e
            except Exception as e:
                raise self._unreachable(e, f"fetching version {version} of subject {subject!r}") from e
            schema = registered.schema
            assert registered.schema_id is not None
            assert schema is not None
            writer = WriterSchema(
                schema_id=registered.schema_id,
                schema_type=_schema_type(schema.schema_type),
                schema_str=schema.schema_str or "",
                references=tuple(r.subject for r in schema.references or () if r.subject),
            )
            self._by_id.setdefault(writer.schema_id, writer)
            found.append((version, writer))
        return found

    def _answered(self, error: ConfluentRegistryError, doing: str) -> SchemaRegistryError:
        status = error.http_status_code if isinstance(error.http_status_code, int) else None
        auth = status in (401, 403)
        return SchemaRegistryError(
            f"{doing} for cluster {self._owner!r} failed: HTTP {status}: "
            f"{mask_secrets(str(error.error_message), self._secrets)}",
            url=self._url,
            status=status,
            retriable=status is None or status >= 500 or status == 429,
            hint=f"Check schema_registry.username and the secret schema_registry.password refers to, of cluster "
            f"{self._owner!r} (the registry refused them)."
            if auth
            else None,
        )

    def _unreachable(self, error: Exception, doing: str) -> SchemaRegistryError:
        text = mask_secrets(str(error), self._secrets)
        untrusted = "certificate verify failed" in text.lower()
        hint = "Check that the registry runs and the URL is right; nothing was written."
        if untrusted:
            hint = (
                f"Set schema_registry.ca_location of cluster {self._owner!r} to the PEM file of the CA that signed "
                f"the registry's certificate (now: {self._ca_location or 'the system trust store'}); nothing was "
                "written."
            )
        return SchemaRegistryError(
            f"{doing} for cluster {self._owner!r} failed: the registry is unreachable ({type(error).__name__}: "
            f"{text}).",
            url=self._url,
            retriable=not untrusted,  # retrying cannot make the client trust the server's certificate
            hint=hint,
        )


def _schema_type(raw: str | None) -> SchemaType:
    # The Confluent API leaves schemaType out for Avro, its original and default format.
    normalized = (raw or "AVRO").upper()
    if normalized == "AVRO":
        return "AVRO"
    if normalized == "PROTOBUF":
        return "PROTOBUF"
    if normalized == "JSON":
        return "JSON"
    raise SchemaRegistryError(f"unsupported schema type {raw!r}.", url="?", retriable=False)
