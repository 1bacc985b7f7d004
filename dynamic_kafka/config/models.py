"""Project configuration: the metadata service, Spark, and the pipelines (``dynamic_kafka.yaml``).

Every model is frozen and rejects unknown keys. The loader (:mod:`dynamic_kafka.config.loader`) reads the file
and validates it against them, turning any problem into one :class:`~dynamic_kafka.errors.ConfigError` naming the
file, the key path and the fix, before any work starts.

Why one module of this size: it is the whole shape of the file a user writes, one model per block, read top to
bottom like the file itself.
"""

from __future__ import annotations

import difflib
import logging
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Protocol, TypeVar
from urllib.parse import urlsplit

from pydantic import BeforeValidator, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from dynamic_kafka.errors import ConfigError
from dynamic_kafka.frozen import FrozenModel, replaced
from dynamic_kafka.initializers import (
    EarliestOffsets,
    Isolation,
    LatestOffsets,
    PipelineStartingOffsets,
    PipelineStoppingOffsets,
)
from dynamic_kafka.publish.config import PublicationConfig
from dynamic_kafka.registry.config import (
    RecordName,
    RegistryConfig,
    SubjectNameStrategy,
    require_subject_naming,
    subject_name,
)
from dynamic_kafka.secrets import SecretReferencePolicy, is_sensitive_key, masked_repr_args

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence


from dynamic_kafka.config.moved_keys import lift_moved_keys
from dynamic_kafka.config.table_template import check_stream_id, default_state, fill, is_template, placeholders
from dynamic_kafka.spark.schema import OUTPUT_COLUMNS
from dynamic_kafka.storage import StorageConfig, TableLocation, TableRef, uncreatable
from dynamic_kafka.storage import parsed_location as _location

logger = logging.getLogger("dynamic_kafka.config")

MOVED_KEYS_CONTEXT = "moved_keys"
"""The validation context's key for a list that collects what to write instead of each moved key
(:mod:`dynamic_kafka.config.moved_keys`); without it, each is logged as a warning."""


class _HasId(Protocol):
    @property
    def id(self) -> str: ...


_Named = TypeVar("_Named", bound=_HasId)


class _Config(FrozenModel):
    def __repr_args__(self) -> Iterable[tuple[str | None, Any]]:
        # Every config model masks sensitive keys at any depth (client properties, Spark conf, factory args).
        return masked_repr_args(super().__repr_args__())


def require_string_values(value: object) -> object:
    """A before-validator for client properties and Spark settings: every value must be a string.

    YAML turns unquoted ``0123`` into 83, ``yes`` into true and ``1e3`` into 1000.0, so accepting and converting
    non-strings would silently change a password or a setting. The error names the key and says to quote it; the
    value is never shown for a sensitive key.
    """
    if not isinstance(value, dict):
        return value
    for key, item in value.items():
        if not isinstance(item, str):
            kind = {bool: "a boolean", int: "a number", float: "a number"}.get(type(item), type(item).__name__)
            shown = "" if is_sensitive_key(str(key)) else f" ({item!r})"
            raise ValueError(
                f"the value of {str(key)!r} is {kind}{shown}, not a string; quote it in the YAML "
                f'(e.g. {key}: "..."): unquoted values such as 0123 or yes are changed by YAML'
            )
    return value


StringProperties = Annotated[dict[str, str], BeforeValidator(require_string_values)]
"""Client properties or settings: string keys and string values (see :func:`require_string_values`)."""


class FileMetadataServiceConfig(_Config):
    """Streams and clusters from a YAML metadata file, re-read on every call."""

    type: Literal["file"] = "file"
    path: Path = Field(description="The metadata file (see README, 'Metadata file').")


class SingleClusterMetadataServiceConfig(_Config):
    """Every topic of one cluster is a stream named after the topic (internal topics excluded)."""

    type: Literal["single_cluster"] = "single_cluster"
    cluster_id: str = Field(min_length=1)
    bootstrap_servers: str = Field(min_length=1)
    properties: StringProperties = Field(default_factory=dict)


class PythonMetadataServiceConfig(_Config):
    """A user's own ``KafkaMetadataService``, built by calling ``module:attribute`` with ``args``."""

    type: Literal["python"] = "python"
    import_path: str = Field(pattern=r"^[\w.]+:[\w.]+$", description="'package.module:factory_or_class'.")
    args: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments for the factory.")


MetadataServiceConfig = Annotated[
    FileMetadataServiceConfig | SingleClusterMetadataServiceConfig | PythonMetadataServiceConfig,
    Field(discriminator="type"),
]


class SparkConfig(_Config):
    """How the Spark session is built: the project file's ``spark`` section, and what
    :func:`dynamic_kafka.spark.session.build_spark_session` takes.

    Example:
        >>> SparkConfig(master="local[2]", conf={"spark.driver.memory": "2g"}).master
        'local[2]'
    """

    remote: str | None = Field(
        None,
        description="A Spark Connect server, sc://HOST:PORT: runs send their Spark work to it and start no JVM. "
        "Then master, ui_enabled and class_data_sharing are the server's business (its start), and conf holds "
        "only session (runtime SQL) settings. Unset: an in-process Spark driver (the default).",
    )
    token: str | None = Field(
        None,
        description="Spark Connect: the server's pre-shared token (its spark.connect.authenticate.token), sent as "
        "a bearer token. Write a ${file:PATH} or ${env:NAME} reference, never the token itself. Unset: the "
        "token in the URL, else $SPARK_CONNECT_AUTHENTICATE_TOKEN, else none.",
    )
    remote_retries: int = Field(
        4, ge=0, description="Spark Connect: retries of a call the server did not answer (about 3 s in all)."
    )
    remote_max_backoff_ms: int = Field(2000, ge=10, description="Spark Connect: longest wait between two retries.")
    session_per_pipeline: bool = Field(
        True,
        description="Spark Connect: a pipeline's incremental runs share one server session, so the code Spark "
        "generated for the last run's write is compiled and warm for the next. The server ends a session left "
        "idle for its spark.connect.session.manager.defaultSessionTimeout. False: a new session per run.",
    )
    local_server: bool = Field(
        False,
        description="Without remote: run the Spark work in a Spark Connect server on this machine that "
        "dynamic-kafka starts on first use (from the installed pyspark, with master, conf and the same jars as an "
        "in-process driver, on 127.0.0.1, behind a random token) and later runs reuse, so a run starts no JVM of "
        "its own. It stops after local_server_idle_minutes without a run; `dynamic-kafka spark-server status` "
        "and `stop`. Pipelines with tables on object storage keep an in-process driver.",
    )
    local_server_idle_minutes: float = Field(
        30, gt=0, description="spark.local_server: the server stops after this many minutes without a run."
    )
    master: str = Field("local[*]", description="Spark master URL, e.g. local[*] or spark://host:7077.")
    app_name: str = Field("dynamic-kafka", description="Spark application name.")
    conf: StringProperties = Field(
        default_factory=dict,
        description="Extra Spark settings; they win over dynamic-kafka's defaults. Packages listed in "
        "spark.jars.packages are added to Delta's and the Kafka connector's.",
    )
    ui_enabled: bool = Field(False, description="Serve the Spark UI (port 4040 and up; off by default for batch runs).")
    class_data_sharing: bool = Field(
        True,
        description="Start the driver's JVM from a class data sharing archive, recorded once per set of jars "
        "in the background (see dynamic_kafka.spark.class_archive).",
    )

    @field_validator("remote")
    @classmethod
    def _sc_url(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"sc://[^/:;]+(:\d+)?(/;.*)?", value):
            raise ValueError(f"{_shown_remote(value)!r} is not a Spark Connect URL; write it like 'sc://HOST:PORT'")
        return value

    @property
    def shown_remote(self) -> str | None:
        """``remote`` without its parameters (after ``/;``, which may hold a token), for logs and errors."""
        return None if self.remote is None else _shown_remote(self.remote)

    def without_class_data_sharing(self) -> SparkConfig:
        """These settings with the driver's JVM started without a class data sharing archive."""
        return replaced(self, class_data_sharing=False)

    def attached(self, remote: str, token: str) -> SparkConfig:
        """These settings as a client of the Spark Connect server at ``remote`` (``token``: its reference): no
        settings of its own (they went to the server's start), no local server to start.
        """
        return replaced(self, remote=remote, token=token, conf={}, local_server=False)


def _shown_remote(url: str) -> str:
    return url.split("/;", 1)[0] + ("/;..." if "/;" in url else "")


class SinkConfig(_Config):
    """The Delta table the pipeline lands rows in, and its dead-letter table.

    Example:
        >>> SinkConfig(path="s3://lake/orders").resolved_dead_letter_path.uri
        's3://lake/orders_dead_letter'
    """

    path: TableLocation = Field(
        description="Delta table location: a local path, or a URI such as s3://bucket/t. With {stream} in it (e.g. "
        "data/{stream}) a template: each stream gets its own table, the stream id in place of {stream} "
        "(docs/table-per-stream.md)."
    )
    dead_letter_path: TableLocation | None = Field(
        None,
        description="Default: '<path>_dead_letter' (per stream for a template path; an explicit one then needs "
        "{stream} too).",
    )
    partition_by: tuple[str, ...] = Field(
        (),
        description="Columns a new sink is partitioned by, e.g. [cluster, topic] (columns of the rows). Applies when "
        "the sink is created; an existing sink keeps its partitioning. A partitioned sink is appended by "
        "delta-spark (no staged appends).",
    )

    _parse = field_validator("path", "dead_letter_path", mode="before")(_location)

    @field_validator("path", "dead_letter_path", mode="after")
    @classmethod
    def _known_placeholders(cls, value: TableLocation | None) -> TableLocation | None:
        if value is not None:
            placeholders(value.uri)
        return value

    @model_validator(mode="after")
    def _one_table_kind(self) -> SinkConfig:
        if self.dead_letter_path is None or is_template(self.dead_letter_path) == self.per_stream:
            return self
        if self.per_stream:
            raise ValueError(
                f"path {self.path.uri!r} gives each stream its own table, so dead_letter_path must too: write "
                "{stream} in it (e.g. dead_letters/{stream}), or leave it out for '<table>_dead_letter'"
            )
        raise ValueError(
            f"dead_letter_path {self.dead_letter_path.uri!r} has {{stream}} but path {self.path.uri!r} has not: "
            "write {stream} in path too for a table per stream (e.g. data/{stream}), or leave it out of "
            "dead_letter_path"
        )

    @property
    def per_stream(self) -> bool:
        """Whether each stream lands in its own table (``path`` holds ``{stream}``)."""
        return is_template(self.path)

    @field_validator("partition_by")
    @classmethod
    def _distinct_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if any(not name.strip() for name in value) or len(set(value)) != len(value):
            raise ValueError(f"write distinct, non-empty column names, e.g. [cluster, topic] (got {list(value)})")
        return value

    @property
    def resolved_dead_letter_path(self) -> TableLocation:
        """Return the dead-letter table's location: ``dead_letter_path``, else ``<path>_dead_letter``."""
        return self.dead_letter_path or self.path.sibling("_dead_letter")

    def for_stream(self, stream_id: str) -> SinkConfig:
        """This sink's table and dead-letter table for one stream: ``{stream}`` filled in with ``stream_id``.

        Raises:
            ConfigError: the stream id cannot name a table
                (:func:`~dynamic_kafka.config.table_template.check_stream_id`).
        """
        return replaced(
            self, path=fill(self.path, stream_id), dead_letter_path=fill(self.resolved_dead_letter_path, stream_id)
        )


class SensorConfig(_Config):
    """The metadata-change sensor."""

    interval_seconds: int = Field(30, ge=1, description="How often the sensor polls the metadata service.")
    failure_threshold: int = Field(
        1,
        ge=0,
        description="Consecutive metadata-service failures tolerated before the sensor fails, once a poll has "
        "succeeded (a failure on the first poll always fails, as Flink's first discovery does); 0 tolerates none.",
    )


class BackfillConfig(_Config):
    """Time-window partitions for backfills."""

    start: datetime = Field(
        description="First partition's start, ISO-8601, e.g. '2026-01-01T00:00:00Z'; without an offset it is UTC."
    )
    granularity: Literal["hourly", "daily"] = "hourly"

    _iso_8601 = field_validator("start", mode="before")(classmethod(lambda cls, v: _iso_8601_text(v)))
    _utc = field_validator("start", mode="after")(classmethod(lambda cls, v: _as_utc(v)))


def _iso_8601_text(value: object) -> object:
    # Only ISO-8601 text (or a datetime from a program): pydantic alone would also take a number as epoch
    # seconds, which nobody writing `start: 2026` means.
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not an ISO-8601 timestamp; write it like '2026-01-01T00:00:00Z'")
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{value!r} is not an ISO-8601 timestamp; write it like '2026-01-01T00:00:00Z'") from None


def _as_utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class BootstrapConfig(_Config):
    """An archive of the stream's history (Parquet or JSON files, or a Delta table) that the pipeline's first run
    lands before Kafka takes over: the archive's rows with a timestamp before ``until``, and every Kafka partition
    from the first offset at or after ``until``.
    """

    path: TableLocation = Field(description="The archive: a folder of files or a Delta table (path or s3:// URI).")
    format: Literal["parquet", "json", "delta"] = Field(description="How the archive is stored.")
    until: datetime = Field(
        description="The switch point, ISO-8601: archive rows before it land, Kafka is read from it (inclusive)."
    )
    columns: dict[str, str] = Field(
        default_factory=dict,
        description="Sink column -> archive column, for archive columns named differently from the sink's (key, "
        "value, topic, partition, offset, timestamp, timestampType, headers, cluster, stream). Columns of the "
        "same name map by themselves. `timestamp` and `value` must be mapped.",
    )
    ignore: tuple[str, ...] = Field(
        (),
        description="Archive columns that are not landed (else an unmapped column "
        "is refused: nothing is dropped silently).",
    )
    cluster: str = Field("archive", min_length=1, description="The `cluster` of archive rows without their own.")
    stream: str | None = Field(
        None, description="The `stream` of archive rows without their own; default the pipeline's only stream."
    )
    max_files_per_run: int | None = Field(
        None,
        ge=1,
        description="Parquet and JSON: land the archive over several runs, this many files each (the first run "
        "also starts Kafka at `until`). Default: the whole archive in the first run.",
    )

    _parse = field_validator("path", mode="before")(_location)
    _iso_8601 = field_validator("until", mode="before")(classmethod(lambda cls, v: _iso_8601_text(v)))
    _utc = field_validator("until", mode="after")(classmethod(lambda cls, v: _as_utc(v)))

    @model_validator(mode="after")
    def _files_to_split(self) -> BootstrapConfig:
        if self.format == "delta" and self.max_files_per_run is not None:
            raise ValueError("max_files_per_run splits Parquet and JSON archives by file; a Delta archive lands whole")
        return self

    @field_validator("columns")
    @classmethod
    def _known_sink_columns(cls, value: dict[str, str]) -> dict[str, str]:
        unknown = sorted(set(value) - set(OUTPUT_COLUMNS))
        if unknown:
            raise ValueError(
                f"{', '.join(unknown)} is not a sink column; map archive columns to: {', '.join(OUTPUT_COLUMNS)}"
            )
        return value


class MaintenanceConfig(_Config):
    """Sink maintenance (``dynamic-kafka maintain`` and the Dagster maintenance job): compaction and vacuum of the
    sink and dead-letter table, never beside a run or backfill of the pipeline.
    """

    schedule: str | None = Field(
        None, description="Cron expression (UTC) of the Dagster schedule of the maintenance job; none: no schedule."
    )
    vacuum_retention_hours: int | None = Field(
        None,
        ge=0,
        description="How long files that older versions of the tables need are kept; versions older than this can "
        "no longer be read. Default: each table's own retention (7 days).",
    )


class HealthConfig(_Config):
    """The checks between runs (``dynamic-kafka health``, the Dagster health job and schedule): thresholds and the
    schedule. See docs/health.md.
    """

    schedule: str | None = Field(
        "*/15 * * * *",
        description="Cron expression (UTC) of the Dagster health schedule, which evaluates the sink's checks against "
        "the brokers between runs; null: no schedule (the health job can still be launched).",
    )
    idle_after_seconds: int = Field(
        3600,
        ge=1,
        description="A partition is idle when its newest record (by Kafka timestamp) is older than this. Idleness is "
        "reported; it fails the check only with `fail_on_idle`.",
    )
    fail_on_idle: bool = Field(
        False, description="Whether an idle partition fails the `idle_partitions` check (WARN) or is only reported."
    )
    stuck_transaction_seconds: int = Field(
        900,
        ge=1,
        description="A partition's open transaction is stuck when its first record (the one at the last stable "
        "offset) is older than this while the last stable offset is below the high watermark: read_committed "
        "readers, this pipeline included, read nothing past it. Default 15 minutes, Kafka's longest transaction "
        "timeout by default (transaction.max.timeout.ms).",
    )
    max_event_time_lag_seconds: int | None = Field(
        None,
        ge=1,
        description="The `event_time_lag` check fails (WARN) when the newest landed event time is older than this; "
        "null: reported only.",
    )
    timeout_seconds: float = Field(
        10, gt=0, description="Deadline of each broker call of a health check (per cluster)."
    )
    first_run_grace_minutes: int | None = Field(
        None,
        ge=1,
        description="How long a pipeline may go without its first committed run, counted from its first planned "
        "run (or, before any, its config file's last change), before the `freshness` check fails (WARN); null: "
        "`freshness_minutes`, else 1440 (a day).",
    )


class RetryConfig(_Config):
    """Retries of transient metadata-service errors before a run fails, and the deadline of each call."""

    attempts: int = Field(3, ge=1)
    backoff_seconds: float = Field(0.5, ge=0)
    timeout_seconds: float = Field(
        60,
        gt=0,
        description="Deadline of each metadata-service call; a call that has not answered by then counts as a "
        "failed (retriable) attempt, so a hung service cannot hold the run forever.",
    )


ValueFormat = Literal["bytes", "string", "json", "avro", "protobuf", "json_schema", "expression"]
# Formats whose values become a ``value`` column (bytes, text, a JSON struct, or what an expression gives); the
# others land their decoded fields as top-level columns.
VALUE_COLUMN_FORMATS = frozenset({"bytes", "string", "json", "expression"})
ValueExpression = Annotated[
    str | None,
    Field(
        min_length=1,
        description="format expression: a Spark SQL expression over the record's columns (key, value, "
        "headers, topic, partition, offset, timestamp) giving the value column; a non-null value it turns into "
        "null is a dead letter. Use try_ functions (try_cast, try_to_number, ...) where it could fail.",
    ),
]
KeyFormat = Literal["bytes", "string", "avro", "protobuf", "json_schema"]
# Key formats decoded with the writer schemas of the ``<topic>-key`` subject into a ``key`` struct column.
REGISTRY_KEY_FORMATS = frozenset({"avro", "protobuf", "json_schema"})


_STRATEGY = (
    "Registry formats: the subject the writer schemas are under: topic (<topic>-value, or <topic>-key for keys), "
    "record (record_name) or topic_record (<topic>-<record_name>), as Confluent's serializers name it."
)


class ValueFormatConfig(_Config):
    """How values are encoded: a pipeline's ``value`` (every stream without an entry of its own), or a ``formats``
    entry for one stream.

    - ``bytes`` / ``string`` / ``json`` (with ``schema``, Spark DDL): one ``value`` column.
    - ``avro``: Confluent wire format (magic byte, schema id), writer schemas from the cluster's Schema Registry;
      with ``schema_file`` instead: plain Avro binary (no header) written with that one schema, no registry.
    - ``protobuf`` / ``json_schema``: Confluent wire format, schemas from the registry.
    - ``expression``: what ``expression`` computes from the record's columns.

    Registry formats land the decoded fields as top-level columns beside ``cluster``, ``stream``, ``topic``, ...

    Example:
        >>> ValueFormatConfig(format="json", schema="id INT, name STRING").schema_ddl
        'id INT, name STRING'
    """

    # Dumped as the file writes it (`schema`), so a dumped pipeline validates again.
    model_config = ConfigDict(serialize_by_alias=True)

    format: ValueFormat = Field(
        "bytes",
        description="How values are decoded: bytes (default), string, json (with schema), avro (from the registry, "
        "or plain Avro with schema_file), protobuf, json_schema, or expression (with expression).",
    )
    # `schema` in the file: the attribute has another name, since pydantic's BaseModel already has a `schema`.
    schema_ddl: str | None = Field(
        None, alias="schema", description="format json: the values' Spark DDL schema, e.g. 'id INT, name STRING'."
    )
    schema_file: Path | None = Field(
        None, description="format avro: an Avro schema file (.avsc); values are plain Avro binary, no registry."
    )
    expression: ValueExpression = None
    subject_name_strategy: SubjectNameStrategy = Field("topic", description=_STRATEGY)
    record_name: RecordName = None

    @model_validator(mode="after")
    def _subject_naming(self) -> ValueFormatConfig:
        require_subject_naming(
            "subject_name_strategy", self.subject_name_strategy, self.record_name, self.uses_registry
        )
        return self

    @model_validator(mode="after")
    def _schema_fits_format(self) -> ValueFormatConfig:
        if self.format == "json" and not self.schema_ddl:
            raise ValueError("format json needs `schema` (a Spark DDL string, e.g. 'id INT, name STRING')")
        if self.schema_ddl is not None and self.format != "json":
            raise ValueError(f"`schema` is for format json, not {self.format}")
        if self.schema_file is not None and self.format != "avro":
            raise ValueError(f"`schema_file` is for format avro, not {self.format}")
        if (self.expression is None) == (self.format == "expression"):
            raise ValueError("`expression` (a Spark SQL expression) goes with format expression, and only")
        return self

    @property
    def uses_registry(self) -> bool:
        """Whether the values are decoded with writer schemas from a Schema Registry."""
        return self.format not in VALUE_COLUMN_FORMATS and self.schema_file is None

    def subject(self, topic: str) -> str:
        """The registry subject of ``topic``'s values."""
        return subject_name(self.subject_name_strategy, topic, "value", self.record_name)


class KeyFormatConfig(_Config):
    """How keys are encoded: ``bytes`` (as they are), ``string`` (UTF-8), or a registry format decoded with the
    writer schemas of the key subject (by default ``<topic>-key``) into a ``key`` struct.
    """

    format: KeyFormat = Field(
        "bytes",
        description="How keys land: bytes (default), string (UTF-8), or avro, protobuf or json_schema (decoded "
        "with the key subject, by default `<topic>-key`, into a `key` struct).",
    )
    subject_name_strategy: SubjectNameStrategy = Field("topic", description=_STRATEGY)
    record_name: RecordName = None

    @model_validator(mode="after")
    def _subject_naming(self) -> KeyFormatConfig:
        require_subject_naming(
            "subject_name_strategy", self.subject_name_strategy, self.record_name, self.uses_registry
        )
        return self

    @property
    def uses_registry(self) -> bool:
        """Whether the keys are decoded with writer schemas from a Schema Registry."""
        return self.format in REGISTRY_KEY_FORMATS

    def subject(self, topic: str) -> str:
        """The registry subject of ``topic``'s keys."""
        return subject_name(self.subject_name_strategy, topic, "key", self.record_name)


class OrchestrationConfig(_Config):
    """What Dagster and Airflow deploy for the pipeline: the run schedule, the metadata-change sensor, whether both
    start running, and the backfill partitions. The ``dynamic-kafka`` commands do not read it.
    """

    schedule: str | None = Field(None, description="Cron expression (UTC) of the incremental runs' schedule.")
    sensor: SensorConfig = Field(
        default_factory=SensorConfig,
        description="The sensor (Dagster) or deferrable trigger (Airflow) that requests a run when the metadata "
        "changes.",
    )
    automation_default_status: Literal["running", "stopped"] = Field(
        "stopped",
        description="Whether the pipeline's schedule and metadata-change sensor start running or stopped when "
        "Dagster first loads them (a toggle in the UI overrides it afterwards); in Airflow, whether the DAGs are "
        "created paused. Default stopped: a new deployment runs nothing until someone turns it on. The catch-up "
        "sensor always starts running.",
    )
    backfill: BackfillConfig | None = Field(
        None, description="Time-window partitions for backfills (hourly or daily); unset: no backfill asset or DAG."
    )


DEFAULT_GROUP_PREFIX = "dynamic-kafka."


def checked_regex(value: str | None) -> str | None:
    """``value`` when it is None or a valid regular expression; else a ValueError naming it (for validators)."""
    if value is not None:
        try:
            re.compile(value)
        except re.error as e:
            raise ValueError(f"invalid regular expression {value!r}: {e}") from e
    return value


class PipelineConfig(_Config):
    """One pipeline: which streams, from where, into which table, with which policies."""

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]*$", description="Unique pipeline id.")
    streams: tuple[str, ...] | None = Field(None, description="Stream ids to read (or use stream_pattern).")
    stream_pattern: str | None = Field(None, description="Regex over stream ids, full match (re.fullmatch).")
    starting_offsets: PipelineStartingOffsets = Field(default_factory=EarliestOffsets)
    stopping_offsets: PipelineStoppingOffsets = Field(default_factory=LatestOffsets)
    max_records_per_partition: int | None = Field(None, ge=1, description="Cap per partition per run.")
    max_records_per_run: int | None = Field(None, ge=1, description="Cap for the whole run.")
    sink: SinkConfig
    state_path: TableLocation | None = Field(
        None,
        description="Delta state location (path or URI). Default: '<sink.path>_state' (a table per stream: beside "
        "the stream tables, docs/table-per-stream.md).",
    )
    storage: StorageConfig | None = Field(
        None, description="How the tables on object storage are reached (endpoint, region, credentials)."
    )
    value: ValueFormatConfig = Field(
        default_factory=ValueFormatConfig,
        description="How values are decoded (every stream without a `formats` entry): format, and the schema, "
        "schema_file, expression or subject naming it takes.",
    )
    formats: dict[str, ValueFormatConfig] = Field(
        default_factory=dict,
        description="Value formats of single streams, by stream id, each written like `value`; other streams use "
        "`value`.",
    )
    key: KeyFormatConfig = Field(
        default_factory=KeyFormatConfig, description="How keys land: format, and the subject naming it takes."
    )
    schema_registry: RegistryConfig | None = Field(
        None,
        description="The Schema Registry of clusters whose metadata names none (registry formats only).",
    )
    on_decode_error: Literal["dead_letter", "fail"] = "dead_letter"
    json_strict: bool = Field(
        False,
        description="value.format json: also treat as undecodable (dead letter, or fail) a value with top-level "
        "fields not in value.schema or with data after the JSON object. Default false: such fields and data are "
        "ignored, as Spark's from_json does.",
    )
    on_data_loss: Literal["fail", "skip"] = "fail"
    on_topic_recreated: Literal["fail", "reset"] = "fail"
    on_topic_missing: Literal["fail", "warn"] = Field(
        "fail",
        description="A topic the metadata lists that does not exist on its cluster: fail the run (default, so a "
        "schedule does not stay green while landing nothing), or warn, land the other topics, and read the topic "
        "once it exists.",
    )
    drain_removed: bool = Field(False, description="Read removed clusters/topics to their end once more.")
    skip_unreachable_clusters: bool = Field(False, description="Skip (and record) unreachable active clusters.")
    kafka_timeout_seconds: float = Field(
        10,
        gt=0,
        description="Deadline of each call a run, backfill, status or offset reset makes to a Kafka cluster (its "
        "offsets and topics); a cluster that has not answered by then is unreachable (the run fails retriably, or "
        "skips it under `skip_unreachable_clusters`).",
    )
    isolation_level: Isolation = "read_committed"
    properties: StringProperties = Field(
        default_factory=dict,
        description="Kafka client properties for every cluster of this pipeline, under each cluster's own "
        "`properties` from the metadata (a cluster's value wins). Every client also gets `client.id` "
        "'dynamic-kafka-<id>-<cluster>' unless these or the cluster's properties set one.",
    )
    consumer_group: str | None = Field(
        None,
        description="Also commit offsets to this consumer group (monitoring only: `kafka-consumer-groups --describe` "
        "shows the lag). Default 'dynamic-kafka.<id>'; null turns it off.",
    )
    min_partitions: int | None = Field(None, ge=1, description="Spark Kafka source minPartitions.")
    orchestration: OrchestrationConfig = Field(
        default_factory=OrchestrationConfig,
        description="What Dagster and Airflow deploy: the run schedule, the metadata-change sensor, their default "
        "status and the backfill partitions.",
    )
    bootstrap: BootstrapConfig | None = Field(
        None, description="An archive the first run lands before reading Kafka from its `until` (docs/bootstrap.md)."
    )
    maintenance: MaintenanceConfig = Field(
        default_factory=MaintenanceConfig,
        description="Compaction and vacuum of the sink and dead-letter table: retention and an optional schedule.",
    )
    max_lag_records: int | None = Field(None, ge=0, description="Asset check fails above this lag.")
    health: HealthConfig = Field(
        default_factory=HealthConfig,
        description="The checks between runs against the brokers: idleness, stuck transactions, event-time lag, and "
        "the health schedule (docs/health.md).",
    )
    event_time: str | None = Field(
        None,
        description="A Spark SQL expression over the sink's columns giving a record's event time, e.g. "
        "'value.placed_at' or 'timestamp_millis(value.ts_ms)'; it must evaluate to a TIMESTAMP (or DATE). Used "
        "for the min/max event time of a run's summary, the event-time lag and backfill windows. Default: the "
        "Kafka timestamp.",
    )
    event_time_slack_seconds: int = Field(
        3600,
        ge=0,
        description="With `event_time`: a backfill of [start, end) reads the offsets of Kafka timestamps "
        "[start - slack, end + slack) and keeps the records whose event time is in the window; a record whose "
        "Kafka timestamp is further away than this from its event time is not read by the backfill.",
    )
    max_dead_letters: int = Field(
        0, ge=0, description="The dead-letter check warns when the last run sent more records than this there."
    )
    freshness_minutes: int | None = Field(
        None, ge=1, description="Dagster's freshness policy: the sink is stale when no run landed for this long."
    )
    metadata_retries: RetryConfig = Field(default_factory=RetryConfig)
    max_run_seconds: int = Field(
        4 * 3600,
        ge=1,
        description="A run (recovery included) that takes longer fails retriably: its Spark job is cancelled and "
        "nothing is committed to the state (the next run recovers it).",
    )
    run_lease_seconds: int = Field(
        600,
        ge=3,
        description="How long a running run holds its planned run against runs on other hosts without renewing; it "
        "renews every third of this. A run whose owner stopped renewing is recovered after it expires.",
    )

    _parse_state = field_validator("state_path", mode="before")(_location)

    @model_validator(mode="before")
    @classmethod
    def _lift_moved_keys(cls, data: Any, info: ValidationInfo) -> Any:
        # The old flat shape loads into the same model; each moved key is reported (the loader logs the reports,
        # `check` lists them), and one given both ways is refused.
        if not isinstance(data, dict):
            return data
        lifted, messages = lift_moved_keys(data)
        found = info.context.get(MOVED_KEYS_CONTEXT) if isinstance(info.context, dict) else None
        if isinstance(found, list):
            found += messages
        else:
            for message in messages:
                logger.warning("%s", message)
        return lifted

    @model_validator(mode="before")
    @classmethod
    def _default_consumer_group(cls, data: Any) -> Any:
        # Absent means the default group; an explicit null means no group (the opt-out).
        if isinstance(data, dict) and "consumer_group" not in data and isinstance(data.get("id"), str):
            return {**data, "consumer_group": f"{DEFAULT_GROUP_PREFIX}{data['id']}"}
        return data

    @field_validator("stream_pattern")
    @classmethod
    def _valid_regex(cls, value: str | None) -> str | None:
        return checked_regex(value)

    @model_validator(mode="after")
    def _bootstrap_stream(self) -> PipelineConfig:
        if self.bootstrap is not None and self.bootstrap.stream is None and len(self.streams or ()) != 1:
            raise ValueError(
                "bootstrap.stream is required unless the pipeline reads exactly one stream (`streams: [one]`): "
                "it names the `stream` of archive rows that have none"
            )
        return self

    @model_validator(mode="after")
    def _vacuum_retention_floor(self) -> PipelineConfig:
        problem = self.vacuum_retention_problem(self.maintenance.vacuum_retention_hours)
        if problem is not None:
            raise ValueError(
                f"maintenance.vacuum_retention_hours: {problem}; give {self.vacuum_retention_floor_hours} or more"
            )
        return self

    @property
    def vacuum_retention_floor_hours(self) -> int:
        """The shortest vacuum retention maintenance takes without ``unsafe_vacuum_retention``: ``max_run_seconds``
        in whole hours, rounded up, plus an hour, since a write's files stay uncommitted while it runs (and a Spark
        Connect server finishes a killed client's write after its deadline).
        """
        return -(-self.max_run_seconds // 3600) + 1

    def vacuum_retention_problem(self, retention_hours: int | None) -> str | None:
        """Why ``retention_hours`` is below :attr:`vacuum_retention_floor_hours`; None when it is not (or None)."""
        floor = self.vacuum_retention_floor_hours
        if retention_hours is None or retention_hours >= floor:
            return None
        return (
            f"a vacuum retention of {retention_hours} hours is below the floor of {floor} hours for pipeline "
            f"{self.id!r} (max_run_seconds, {self.max_run_seconds}s, rounded up to hours, plus one hour): a shorter "
            "retention lets VACUUM delete the files of a write that has not committed yet (a Spark Connect server "
            "finishing a killed run's write, a paused process, another pipeline writing the same folder), and that "
            "write then commits files that are gone"
        )

    @model_validator(mode="after")
    def _table_per_stream(self) -> PipelineConfig:
        if self.state_path is not None and placeholders(self.state_path.uri):
            raise ValueError(
                f"state_path {self.state_path.uri!r} has {{stream}}: a pipeline keeps one state for all its streams; "
                "give a plain location"
                + ("" if self.sink.per_stream else ", or write {stream} in sink.path for a table per stream")
            )
        if not self.sink.per_stream:
            return self
        for stream_id in self.streams or ():
            try:
                check_stream_id(stream_id, template=self.sink.path.uri)
            except ConfigError as e:
                raise ValueError(str(e)) from None
        if self.bootstrap is not None:
            raise ValueError(
                "bootstrap lands an archive into one table; a sink.path with {stream} (a table per stream) does "
                "not take it (its recovery would not know which tables hold the archive's rows, "
                "docs/table-per-stream.md): bootstrap a pipeline with a plain sink.path"
            )
        return self

    def for_stream(self, stream_id: str) -> PipelineConfig:
        """The pipeline as seen by one stream's table: its ``sink.path`` and dead-letter path filled in, the state
        the pipeline's own. A pipeline without a table per stream is returned as it is.

        Raises:
            ConfigError: the stream id cannot name a table
                (:func:`~dynamic_kafka.config.table_template.check_stream_id`).
        """
        if not self.sink.per_stream:
            return self
        return replaced(self, sink=self.sink.for_stream(stream_id), state_path=self.resolved_state_path)

    def starting_at(self, starting: PipelineStartingOffsets) -> PipelineConfig:
        """The pipeline with ``starting`` where a partition without state starts."""
        return replaced(self, starting_offsets=starting)

    def for_window(self, starting: PipelineStartingOffsets, stopping: PipelineStoppingOffsets) -> PipelineConfig:
        """The pipeline as a backfill plans its window: every partition from ``starting`` to ``stopping``, no
        record cap, and no last read of removed topics (a backfill reads the subscribed ones only).
        """
        return replaced(
            self,
            starting_offsets=starting,
            stopping_offsets=stopping,
            max_records_per_partition=None,
            max_records_per_run=None,
            drain_removed=False,
        )

    @property
    def bootstrap_stream(self) -> str:
        """The ``stream`` of archive rows without their own (the bootstrap's, else the pipeline's only stream)."""
        assert self.bootstrap is not None
        return self.bootstrap.stream or (self.streams or ("",))[0]

    @model_validator(mode="after")
    def _one_subscription(self) -> PipelineConfig:
        if (self.streams is None) == (self.stream_pattern is None):
            raise ValueError("set exactly one of `streams` (a list of stream ids) or `stream_pattern` (a regex)")
        if self.streams is not None and not self.streams:
            raise ValueError("`streams` is empty; list at least one stream id")
        return self

    def value_format_of(self, stream_id: str) -> ValueFormatConfig:
        """The value format of ``stream_id``: its ``formats`` entry, else the pipeline's ``value``."""
        return self.formats.get(stream_id) or self.value

    @property
    def resolved_state_path(self) -> TableLocation:
        """Return the state table's location: ``state_path``, else ``<sink.path>_state`` (for a table per stream,
        ``_<id>_state`` in the folder of the stream tables).
        """
        if self.state_path is not None:
            return self.state_path
        return default_state(self.sink.path, self.id) if self.sink.per_stream else self.sink.path.sibling("_state")

    @property
    def sink_table(self) -> TableRef:
        """The sink as both engines reach it (location + storage block).

        Raises:
            ConfigError: the pipeline lands a table per stream (:meth:`for_stream` names each one); an operation
                that reaches this works on one table and does not take a table per stream.
        """
        return TableRef(self._one_table(self.sink.path), self.storage, owner=f"pipeline {self.id!r}")

    @property
    def dead_letter_table(self) -> TableRef:
        """The dead-letter table as both engines reach it (one per stream: see :attr:`sink_table`)."""
        location = self._one_table(self.sink.resolved_dead_letter_path)
        return TableRef(location, self.storage, owner=f"pipeline {self.id!r}")

    def _one_table(self, location: TableLocation) -> TableLocation:
        if is_template(location):
            raise ConfigError(
                f"pipeline {self.id!r} lands a table per stream (sink.path {self.sink.path.uri!r}); this operation "
                "works on one table and does not take a table per stream yet; nothing was done.",
                hint="Run, backfill, dead-letter replay, realign, status, offsets and maintain handle every "
                "stream's table; for anything else use a pipeline with a plain sink.path (docs/table-per-stream.md).",
            )
        return location

    @property
    def state_table(self) -> TableRef:
        """The state table as delta-rs reaches it."""
        return TableRef(self.resolved_state_path, self.storage, owner=f"pipeline {self.id!r}")

    def uncreatable_tables(self) -> dict[str, str]:
        """By role, why a local table of the pipeline cannot be created (see
        :func:`~dynamic_kafka.storage.uncreatable`), once per blocking folder: a sink under a file has its dead
        letters and state there too.
        """
        found: dict[str, str] = {}
        for role, table in self.tables().items():
            problem = uncreatable(table.location, f"the {role.replace('_', '-')} table")
            if problem is not None and not any(p.split(":")[0] == problem.split(":")[0] for p in found.values()):
                found[role] = problem
        return found

    def refuse_uncreatable_tables(self) -> None:
        """Refuses a pipeline whose local tables cannot be created, before anything is read or written.

        Raises:
            ConfigError: names each such table, the folder in the way and the fix.
        """
        problems = self.uncreatable_tables()
        if problems:
            raise ConfigError(
                f"pipeline {self.id!r}: {'; '.join(problems.values())}.",
                hint="Choose a folder this user may write (sink.path, or state_path and sink.dead_letter_path).",
            )

    def tables(self) -> dict[str, TableRef]:
        """Every table of the pipeline by role: ``sink``, ``dead_letter``, ``state`` (for a table per stream, the
        templates: where the tables are, not tables to open).
        """
        owner = f"pipeline {self.id!r}"
        return {
            "sink": TableRef(self.sink.path, self.storage, owner=owner),
            "dead_letter": TableRef(self.sink.resolved_dead_letter_path, self.storage, owner=owner),
            "state": self.state_table,
        }


# The labels the pushed metrics carry themselves: a grouping label of the same name would be ambiguous.
RESERVED_METRIC_LABELS = frozenset({"job", "pipeline", "operation", "cluster_id", "topic", "partition", "check"})


_OTLP_METRICS_PATH = "/v1/metrics"


class OtlpMetricsConfig(_Config):
    """An OTLP receiver (an OpenTelemetry Collector, a vendor's endpoint) every run and ``health`` export their
    metrics to, over OTLP/HTTP with protobuf bodies (docs/metrics.md).
    """

    endpoint: str = Field(
        pattern=r"^https?://[^\s/@]+(/\S*)?$",
        description="The receiver's URL, e.g. http://otel-collector:4318 (a URL without a path gets /v1/metrics, as "
        "OTEL_EXPORTER_OTLP_ENDPOINT does); no credentials in it: put them in headers.",
    )
    protocol: Literal["http/protobuf"] = Field(
        "http/protobuf", description="The OTLP transport; OTLP/HTTP with protobuf bodies is the one supported."
    )
    headers: dict[str, str] = Field(
        default_factory=dict,
        repr=False,
        description="HTTP headers of the export, e.g. {authorization: 'Bearer ${env:OTLP_TOKEN}'}: a secret is a "
        "${env:...} or ${file:...} reference, resolved only when the metrics are sent.",
    )
    timeout_seconds: float = Field(
        5, gt=0, description="Deadline of one export, its retries included; past it the export is given up."
    )

    @property
    def url(self) -> str:
        """Where the metrics are posted: the endpoint, with /v1/metrics when it has no path."""
        parts = urlsplit(self.endpoint)
        return self.endpoint if parts.path.strip("/") else self.endpoint.rstrip("/") + _OTLP_METRICS_PATH


class MetricsConfig(_Config):
    """Where every run and every ``health`` send the pipeline's metrics (docs/metrics.md): a Prometheus
    Pushgateway, an OTLP receiver, or both. A receiver that does not answer is a warning naming it, never a failed
    run.
    """

    pushgateway: str | None = Field(
        None,
        pattern=r"^https?://[^\s/]+",
        description="The Pushgateway's base URL, e.g. http://pushgateway:9091 (credentials go in username/password).",
    )
    otlp: OtlpMetricsConfig | None = Field(
        None, description="Also (or instead) export the metrics over OTLP/HTTP to this receiver."
    )
    job: str = Field(
        "dynamic_kafka",
        pattern=r"^[A-Za-z_][A-Za-z0-9_.-]*$",
        description="The `job` label of every pushed group (each pipeline pushes the groups "
        "{job, pipeline, operation: run | health}) and the OTLP resource's service.name.",
    )
    labels: dict[str, str] = Field(
        default_factory=dict,
        description="More labels on every metric (e.g. {env: prod}): Pushgateway grouping labels, OTLP attributes.",
    )
    username: str | None = Field(None, description="Pushgateway basic-auth user (literal or ${env:...} reference).")
    password: str | None = Field(
        None, repr=False, description="Pushgateway basic-auth password: a ${env:...} or ${file:...} reference."
    )
    timeout_seconds: float = Field(5, gt=0, description="Deadline of one push; past it the push is given up.")

    @field_validator("labels")
    @classmethod
    def _label_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or name.startswith("__"):
                raise ValueError(f"{name!r} is not a Prometheus label name (letters, digits and _, not leading __)")
            if name in RESERVED_METRIC_LABELS:
                raise ValueError(f"{name!r} is a label the metrics carry already; choose another name")
        return value

    @model_validator(mode="after")
    def _a_receiver(self) -> MetricsConfig:
        if self.pushgateway is None and self.otlp is None:
            raise ValueError("metrics names no receiver: set pushgateway, otlp or both (or remove the section)")
        return self

    @property
    def shown_endpoint(self) -> str:
        """The Pushgateway as log lines name it: scheme, host, port and path, never credentials in the URL."""
        parts = urlsplit(self.pushgateway or "")
        host = parts.hostname or ""
        return f"{parts.scheme}://{host}{f':{parts.port}' if parts.port else ''}{parts.path}"


class ProjectConfig(_Config):
    """The whole project: one metadata service, one Spark setup, any number of pipelines."""

    metadata_service: MetadataServiceConfig
    spark: SparkConfig = Field(default_factory=SparkConfig)
    pipelines: tuple[PipelineConfig, ...] = ()
    publications: tuple[PublicationConfig, ...] = Field(
        (), description="Delta tables published to streams, exactly once (docs/publish.md)."
    )
    secret_references: SecretReferencePolicy = Field(
        default_factory=SecretReferencePolicy,
        description="References a metadata service other than the project's own files may use (see secrets.py).",
    )
    allow_literal_secrets: bool = Field(
        False,
        description="Let `dynamic-kafka check` accept secrets written as literals in the config and metadata files "
        "(a local demo's password); by default each one is a problem: write ${env:NAME} or ${file:PATH} instead.",
    )
    metrics: MetricsConfig | None = Field(
        None,
        description="Send each run's and each health check's metrics to a Prometheus Pushgateway and/or an OTLP "
        "receiver (off: null).",
    )
    source: Path | None = Field(None, description="The file this config was loaded from.")

    @model_validator(mode="after")
    def _unique_ids(self) -> ProjectConfig:
        for kind, entries in (("pipeline", self.pipelines), ("publication", self.publications)):
            ids = [e.id for e in entries]
            duplicates = sorted({i for i in ids if ids.count(i) > 1})
            if duplicates:
                raise ValueError(f"{kind} ids must be unique; repeated: {', '.join(duplicates)}")
        _check_object_store_tables(self.pipelines)
        return self

    def object_store_buckets(self) -> dict[str, StorageConfig | None]:
        """Every S3 bucket a pipeline of the project uses, with the storage block that reaches it (Spark gets one
        set of per-bucket S3A settings per bucket, so a session serves every pipeline).
        """
        buckets: dict[str, StorageConfig | None] = {}
        for p in self.pipelines:
            locations = [table.location for table in p.tables().values()]
            locations += [p.bootstrap.path] if p.bootstrap else []
            for location in locations:
                if location.is_s3 and location.bucket is not None:
                    buckets[location.bucket] = p.storage
        return buckets

    def publication(self, publication_id: str) -> PublicationConfig:
        """The publication named ``publication_id``.

        Raises:
            ConfigError: no such publication; the message lists the configured ones.
        """
        return self._named(self.publications, publication_id, "publication")

    def pipeline(self, pipeline_id: str) -> PipelineConfig:
        """The pipeline named ``pipeline_id``.

        Raises:
            ConfigError: no such pipeline; the message lists the configured ones.
        """
        return self._named(self.pipelines, pipeline_id, "pipeline")

    def _named(self, entries: tuple[_Named, ...], wanted: str, kind: str) -> _Named:
        for entry in entries:
            if entry.id == wanted:
                return entry
        raise ConfigError(
            unknown_id(kind, wanted, [e.id for e in entries]),
            source=str(self.source) if self.source else None,
            hint=f"Pass one of them with --{kind}.",
        )


def unknown_id(kind: str, wanted: str, ids: Sequence[str]) -> str:
    """What to say of a ``kind`` id (pipeline, publication) that is not among ``ids``: the closest one, then all.

    Example:
        >>> unknown_id("pipeline", "ordrs", ["orders", "payments"])
        "no pipeline 'ordrs'; did you mean 'orders'? Configured pipelines: orders, payments."
    """
    near = difflib.get_close_matches(wanted, ids, n=1, cutoff=0.75)
    guess = f"did you mean {near[0]!r}? Configured" if near else "configured"
    return f"no {kind} {wanted!r}; {guess} {kind}s: {', '.join(ids) or '(none)'}."


def _check_object_store_tables(pipelines: tuple[PipelineConfig, ...]) -> None:
    """Refuses what would break the commit guard on S3 (docs/decisions/0042-object-storage-commit-safety.md).

    Spark's Delta log store on S3 (S3SingleDriverLogStore) is safe with one writer per table only: the state table
    lets one run of a pipeline write its sink, so a table on S3 must belong to one pipeline and one role. The same
    table spelled ``s3://`` and ``s3a://`` counts as one. Two pipelines on one bucket must reach it the same way:
    Spark's S3A settings are per bucket.
    """
    owners: dict[str, str] = {}
    reached: dict[str, tuple[str, StorageConfig | None]] = {}
    for p in pipelines:
        for role, table in p.tables().items():
            location = table.location
            if not location.is_s3:
                continue
            key = location.delta_rs_uri
            owner = f"the {role.replace('_', '-')} table of pipeline {p.id!r}"
            if key in owners:
                raise ValueError(
                    f"{location.uri} is {owner} and also {owners[key]}; on S3 Spark's Delta log store "
                    "(S3SingleDriverLogStore) is safe only with one writer per table. Give each pipeline its own "
                    "sink, dead-letter and state locations"
                )
            owners[key] = owner
            bucket = location.bucket or ""
            if bucket in reached and reached[bucket][1] != p.storage:
                raise ValueError(
                    f"bucket {bucket!r} is used by pipelines {reached[bucket][0]!r} and {p.id!r} with different "
                    "storage blocks; Spark reaches a bucket with one set of settings. Give them the same storage"
                )
            reached.setdefault(bucket, (p.id, p.storage))
