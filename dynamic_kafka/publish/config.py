"""The config of a publication: which Delta table goes to which stream, and how a row becomes a record.

Lives in the project config under ``publications:``; ``dynamic-kafka check`` validates it with the rest.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from dynamic_kafka.errors import PublicationError
from dynamic_kafka.frozen import FrozenModel
from dynamic_kafka.registry.config import (
    RecordName,
    RegistryConfig,
    SubjectNameStrategy,
    require_subject_naming,
    subject_name,
)
from dynamic_kafka.storage import StorageConfig, TableLocation, TableRef, parsed_location

ChangeType = Literal["insert", "update_preimage", "update_postimage", "delete"]

# Kafka's default ``transaction.max.timeout.ms``: a broker refuses a producer asking for more.
BROKER_DEFAULT_MAX_TRANSACTION_TIMEOUT_MS = 900_000
# Runs of up to this many rows go faster from one process than through Spark's start (docs/decisions/0097).
DEFAULT_EXECUTOR_ROWS = 2_000_000


class JsonEncoding(FrozenModel):
    """A JSON object of the row's columns (timestamps and dates as ISO-8601 text, bytes as base64)."""

    format: Literal["json"] = Field("json", description="json: the columns as one JSON object.")
    columns: tuple[str, ...] | None = Field(None, description="The columns, in this order; default: every column.")


class ColumnEncoding(FrozenModel):
    """One column's content as it is: ``string`` (UTF-8 encoded) or ``bytes`` (binary column)."""

    format: Literal["string", "bytes"] = Field(description="string: a text column, UTF-8; bytes: a binary column.")
    column: str = Field(min_length=1, description="The column.")


_STRATEGY = (
    "The subject the schema is under: topic (<topic>-value / <topic>-key), record (record_name) or topic_record "
    "(<topic>-<record_name>), as the readers' subject_name_strategy."
)


class RegistryEncoding(FrozenModel):
    """Confluent's wire format with the latest schema version of the subject on the write cluster's Schema
    Registry: the schema's fields are filled from the columns of the same name.
    """

    format: Literal["avro", "protobuf", "json_schema"] = Field(
        description="avro, protobuf (descriptor form, first message or record_name) or json_schema."
    )
    subject_name_strategy: SubjectNameStrategy = Field("topic", description=_STRATEGY)
    record_name: RecordName = None

    @model_validator(mode="after")
    def _subject_naming(self) -> RegistryEncoding:
        require_subject_naming("subject_name_strategy", self.subject_name_strategy, self.record_name, True)
        return self

    def subject(self, topic: str, role: Literal["value", "key"]) -> str:
        """The registry subject of ``topic``'s values or keys."""
        return subject_name(self.subject_name_strategy, topic, role, self.record_name)


Encoding = Annotated[JsonEncoding | ColumnEncoding | RegistryEncoding, Field(discriminator="format")]


class PublicationConfig(FrozenModel):
    """One publication: the rows a Delta table gains, published to a stream of the metadata service.

    Example:
        >>> PublicationConfig(id="out", table="data/orders", stream="orders-out").progress_group_id
        'dynamic-kafka-publication-out'
    """

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]*$", description="Unique publication id.")
    table: TableLocation = Field(description="The Delta table published (a local path or an s3:// URI).")
    storage: StorageConfig | None = Field(None, description="How to reach the table's object store.")
    stream: str = Field(min_length=1, description="The stream id written to: one cluster, one topic.")
    key: Encoding | None = Field(None, description="The record key; none by default.")
    value: Encoding = Field(default_factory=JsonEncoding, description="The record value; all columns as JSON.")
    schema_registry: RegistryConfig | None = Field(
        None, description="The Schema Registry of a write cluster whose metadata names none (registry formats only)."
    )
    timestamp_column: str | None = Field(
        None, description="A timestamp (or integer epoch milliseconds) column: the records' timestamps."
    )
    change_types: tuple[ChangeType, ...] = Field(
        ("insert", "update_postimage", "delete"),
        min_length=1,
        description="Tables with Change Data Feed: the change types published (insert, update_preimage, "
        "update_postimage, delete), each record with its type in the header dynamic-kafka.change.",
    )
    starting_version: int | None = Field(
        None, ge=0, description="The first table version published; default 0 (or starting_timestamp)."
    )
    starting_timestamp: datetime | None = Field(
        None, description="Publish from the first table version committed at or after this time."
    )
    progress_group: str | None = Field(
        None,
        min_length=1,
        description="The consumer group holding the progress; default dynamic-kafka-publication-<id>.",
    )
    state_path: TableLocation | None = Field(
        None, description="The small Delta table of write-cluster moves; default '<table>_publication_<id>'."
    )
    transaction_timeout_ms: int = Field(
        60_000,
        ge=1_000,
        le=BROKER_DEFAULT_MAX_TRANSACTION_TIMEOUT_MS,
        description="The producer's transaction.timeout.ms; at most the brokers' transaction.max.timeout.ms.",
    )
    max_rows_per_transaction: int = Field(
        100_000,
        ge=1,
        description="Whole versions go in one transaction up to this many rows (a version is never split).",
    )
    kafka_timeout_seconds: float = Field(30.0, gt=0, description="Deadline of each Kafka call.")
    executor_rows: int | None = Field(
        DEFAULT_EXECUTOR_ROWS,
        ge=0,
        description="A run of more rows is published from Spark's executors, a transaction per slice of "
        "max_rows_per_transaction rows; null: always from this process.",
    )

    _parse = field_validator("table", "state_path", mode="before")(classmethod(lambda cls, v: parsed_location(v)))

    @model_validator(mode="after")
    def _one_start(self) -> PublicationConfig:
        if self.starting_version is not None and self.starting_timestamp is not None:
            raise ValueError("set starting_version or starting_timestamp, not both")
        return self

    @property
    def registry_encodings(self) -> dict[Literal["key", "value"], RegistryEncoding]:
        """The key and value encodings that use the write cluster's Schema Registry, by role."""
        roles: dict[Literal["key", "value"], Encoding | None] = {"key": self.key, "value": self.value}
        return {role: e for role, e in roles.items() if isinstance(e, RegistryEncoding)}

    def error(
        self, message: str, *, hint: str, cluster_id: str | None = None, version: int | None = None
    ) -> PublicationError:
        """A :class:`~dynamic_kafka.errors.PublicationError` of this publication, naming its table and stream."""
        return PublicationError(
            message,
            publication_id=self.id,
            table=self.table.uri,
            stream_id=self.stream,
            cluster_id=cluster_id,
            version=version,
            hint=hint,
        )

    @property
    def progress_group_id(self) -> str:
        """The consumer group whose offset on the stream's topic holds the next version to publish."""
        return self.progress_group or f"dynamic-kafka-publication-{self.id}"

    def transactional_id(self, cluster_id: str) -> str:
        """The producer's transactional id on ``cluster_id``: one per publication and cluster (zombie fencing)."""
        return f"dynamic-kafka-publication-{self.id}-{cluster_id}"

    @property
    def table_ref(self) -> TableRef:
        """The published table with its storage block."""
        return TableRef(self.table, self.storage, owner=f"publication {self.id!r}")

    @property
    def state_table(self) -> TableRef:
        """The table of write-cluster moves."""
        location = self.state_path or self.table.sibling(f"_publication_{self.id}")
        return TableRef(location, self.storage, owner=f"publication {self.id!r}")
