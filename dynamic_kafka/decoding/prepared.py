"""The one door to decoding: :func:`prepare_decoding` once on the driver, then the methods of the
:class:`PreparedDecoding` it returns wherever records are decoded (the sink's writers, the schema check, the replay
of dead letters).

Behind the door, :mod:`dynamic_kafka.decoding.formats` makes the key and the ``value`` column of the bytes, string and
json formats, and :mod:`dynamic_kafka.decoding.registry_formats` fetches the registry and schema-file streams' writer
schemas and decodes them into fields; :meth:`PreparedDecoding.decode` composes both into one frame, so a caller
never needs to know which format a stream uses.

Example:
    >>> decoding = prepare_decoding(pipeline, plan.read_splits, connections)  # doctest: +SKIP
    >>> decoded = decoding.decode(read_splits(...))  # doctest: +SKIP
    >>> good = decoded.where("_decode_error IS NULL")  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dynamic_kafka.config.models import VALUE_COLUMN_FORMATS
from dynamic_kafka.decoding.formats import KEY_NOT_UTF8, can_fail, utf8_text, value_column, with_expression_value
from dynamic_kafka.decoding.registry_formats import (
    SCHEMA_ID,
    SchemaVersion,
    SourceDecoding,
    check_table_schema,
    incompatible_error_from,
    prepare_key_sources,
    prepare_sources,
    registry_frame,
    registry_key,
    schema_digest,
)
from dynamic_kafka.model.summary import DecodedSchema
from dynamic_kafka.spark.schema import DECODE_ERROR, RAW_KEY, RAW_VALUE

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

    from dynamic_kafka.config.models import PipelineConfig, ValueFormatConfig
    from dynamic_kafka.errors import SchemaIncompatibleError
    from dynamic_kafka.metadata.models import ClusterMetadata
    from dynamic_kafka.model.plan import DecodePin, Split
    from dynamic_kafka.registry.client import RegistryClient
    from dynamic_kafka.registry.config import RegistryConfig


@dataclass(frozen=True)
class PreparedDecoding:
    """Everything the executors need to decode one run's keys and values, fetched once on the driver.

    Attributes:
        pipeline: the formats and policies (``key.format``, ``json_strict``, ``value.format`` per stream).
        sources: the registry / fixed-schema sources of the planned ranges.
        legacy: the value format of the other streams (bytes, string or json), if any stream uses one.
        key_sources: the planned topics' key subjects under a registry ``key.format``.
    """

    pipeline: PipelineConfig
    sources: tuple[SourceDecoding, ...] = ()
    legacy: ValueFormatConfig | None = field(default=None)
    key_sources: tuple[SourceDecoding, ...] = ()

    @property
    def can_fail(self) -> bool:
        """Whether any record can be undecodable under the pipeline's formats (``bytes`` never fails)."""
        return can_fail(self.pipeline)

    def decode(self, frame: DataFrame) -> DataFrame:
        """Decodes ``key`` and ``value`` of the reader's output ``frame`` per the pipeline's formats.

        Adds ``_raw_key`` and ``_raw_value`` (the original bytes) and ``_decode_error`` (string; null when the
        record decoded). Other columns are kept as they are. The registry and schema-file streams' fields and
        ``_schema_id`` are added as columns, and ``value`` only stays when a stream of another format needs it;
        :func:`dynamic_kafka.sink.tables.sink_rows` picks the table's columns.

        Raises:
            ConfigError: ``value.schema`` is invalid (json).
            SchemaIncompatibleError: two sources give one field two types.
        """
        from pyspark.sql import functions as sf

        raw_key, raw_value = sf.col(RAW_KEY), sf.col(RAW_VALUE)
        if self.legacy is not None:
            frame = with_expression_value(frame, self.legacy)
        staged = frame.withColumnsRenamed({"key": RAW_KEY, "value": RAW_VALUE})
        key_reason = sf.lit(KEY_NOT_UTF8)
        if self.key_sources:
            staged, key, key_reason = registry_key(staged, self.key_sources, RAW_KEY)
            key_bad = key_reason.isNotNull()
        elif self.pipeline.key.format == "string":
            key, key_bad = utf8_text(raw_key)
        else:
            key, key_bad = raw_key, sf.lit(False)

        columns: dict[str, Column] = {"key": key}
        value_bad: list[tuple[Column, str]] = []
        if self.legacy is not None:
            value, value_bad = value_column(raw_value, self.legacy, strict=self.pipeline.json_strict)
            columns["value"] = value
        if not self.sources:
            error = sf.when(key_bad, key_reason)
            for bad, reason in value_bad:
                error = error.when(bad, sf.lit(reason))
            return staged.withColumns({**columns, DECODE_ERROR: error.otherwise(sf.lit(None).cast("string"))})

        in_registry = sf.lit(False)
        for source in self.sources:
            in_registry = in_registry | (
                (sf.col("cluster") == sf.lit(source.cluster_id)) & (sf.col("topic") == sf.lit(source.topic))
            )
        decoded, registry_error = registry_frame(staged, self.sources, RAW_VALUE)
        error = sf.when(key_bad, key_reason).when(in_registry, registry_error)
        for bad, reason in value_bad:
            error = error.when(bad, sf.lit(reason))
        if "value" in columns:
            columns["value"] = sf.when(~in_registry, columns["value"])
        return decoded.withColumns({**columns, DECODE_ERROR: error.otherwise(sf.lit(None).cast("string"))})

    def check_table(self, rows_schema: StructType, table_schema: StructType | None, table: str) -> None:
        """Refuses rows whose columns give an existing table column another type
        (:func:`~dynamic_kafka.decoding.registry_formats.check_table_schema`).

        Raises:
            SchemaIncompatibleError: a column changes its type; names the stream and subject that brought it.
        """
        check_table_schema(rows_schema, table_schema, table, self.sources)

    def incompatible_error(self, error: BaseException) -> SchemaIncompatibleError | None:
        """The :class:`~dynamic_kafka.errors.SchemaIncompatibleError` a task of :meth:`decode`'s frame raised for
        a record of a version the reader cannot read, or None when ``error`` is another failure.
        """
        return incompatible_error_from(error)

    def count_columns(self) -> list[tuple[str, Column]]:
        """Per registry version, an aggregate counting the records it decoded (named ``schema_<i>``), for the run
        summary; a dead letter whose header names the version is not counted.
        """
        from pyspark.sql import functions as sf

        columns = []
        for i, (source, version) in enumerate(self._registry_versions()):
            match = (
                (sf.col("cluster") == sf.lit(source.cluster_id))
                & (sf.col("topic") == sf.lit(source.topic))
                & (sf.col(SCHEMA_ID) == sf.lit(version.schema_id))
                & sf.col(DECODE_ERROR).isNull()
            )
            columns.append((f"schema_{i}", sf.sum(sf.when(match, 1).otherwise(0))))
        return columns

    def uses(self, counts: Mapping[str, int]) -> tuple[DecodedSchema, ...]:
        """The versions that decoded at least one record, from :meth:`count_columns`' results."""
        found = []
        for i, (source, version) in enumerate(self._registry_versions()):
            records = int(counts.get(f"schema_{i}") or 0)
            if records and source.subject is not None:
                found.append(
                    DecodedSchema(
                        stream_id=source.stream_id,
                        cluster_id=source.cluster_id,
                        subject=source.subject,
                        version=version.version,
                        schema_id=version.schema_id,
                        records=records,
                    )
                )
        return tuple(found)

    def pins(self) -> tuple[DecodePin, ...]:
        """The schema inputs of every source, for the plan (:attr:`~dynamic_kafka.model.plan.Plan.decoding`)."""
        from dynamic_kafka.model.plan import DecodePin, PinnedVersion

        return tuple(
            DecodePin(
                cluster_id=s.cluster_id,
                topic=s.topic,
                stream_id=s.stream_id,
                value_format=s.value_format,
                subject=s.subject,
                role=s.role,
                versions=tuple(PinnedVersion(version=v.version, schema_id=v.schema_id) for v in s.versions)
                if s.subject is not None
                else (),
                schema_file_sha256=schema_digest(s.versions[0].schema_str) if s.subject is None else None,
            )
            for s in (*self.sources, *self.key_sources)
        )

    def _registry_versions(self) -> list[tuple[SourceDecoding, SchemaVersion]]:
        return [(s, v) for s in self.sources if s.subject is not None for v in s.versions]


def prepare_decoding(
    pipeline: PipelineConfig,
    splits: Sequence[Split],
    clusters: Mapping[str, ClusterMetadata],
    *,
    clients: dict[RegistryConfig, RegistryClient] | None = None,
    pins: Sequence[DecodePin] = (),
) -> PreparedDecoding:
    """Fetches and checks the writer schemas of the planned ranges' registry streams
    (:func:`~dynamic_kafka.decoding.registry_formats.prepare_sources`, where the arguments are described) and, under a
    registry ``key.format``, of their key subjects
    (:func:`~dynamic_kafka.decoding.registry_formats.prepare_key_sources`). JVM-free.

    Raises:
        ConfigError: a registry stream's cluster has no registry, a schema file cannot be read (or differs from
            its pin), a pinned schema id is gone from the registry, a decoded field collides with a Kafka column,
            or a schema is not a record/object.
        SchemaRegistryError: a registry is unreachable (retriable) or refused the call.
    """
    clients = {} if clients is None else clients
    sources, legacy = prepare_sources(pipeline, splits, clusters, clients=clients, pins=pins)
    keys = prepare_key_sources(pipeline, splits, clusters, clients=clients, pins=pins)
    return PreparedDecoding(pipeline=pipeline, sources=sources, legacy=legacy, key_sources=keys)


def value_column_decoding(pipeline: PipelineConfig) -> PreparedDecoding:
    """The decoding of a pipeline whose every stream lands in the ``value`` column (bytes, string or json), which
    needs nothing fetched.

    Raises:
        ValueError: a stream uses a registry format or a schema file, or the keys a registry format: use
            :func:`prepare_decoding`.
    """
    if pipeline.key.uses_registry or any(
        f.format not in VALUE_COLUMN_FORMATS for f in (pipeline.value, *pipeline.formats.values())
    ):
        raise ValueError("this pipeline reads registry/Avro keys or values: use prepare_decoding()")
    return PreparedDecoding(pipeline=pipeline, legacy=pipeline.value)
