"""Registry-encoded and fixed-schema Avro values: writer schemas prepared once on the driver, decoded as Spark
column expressions in the run's one pass.

Driver (:func:`prepare_sources`, before the plan is written and before Spark starts): for every planned
``(cluster, topic)`` of a stream whose ``value.format`` uses a registry, every version of its subject (by default
``<topic>-value``, Confluent's TopicNameStrategy; ``subject_name_strategy`` picks the record strategies,
:func:`~dynamic_kafka.config.models.subject_name`) is fetched from that cluster's registry (the metadata's
``schema_registry``, else the pipeline's): a handful of HTTP calls per run, none per record, and no scan of the
data to find which ids occur. The latest version is the *reader* schema; every older version is checked against it
with Avro's schema-resolution rules (``avro.compatibility``) or, for JSON Schema, field by field. The decoded
fields' names must not collide with the Kafka columns.

Executor (:func:`registry_frame`): per source one ``CASE WHEN schema_id = <id> THEN from_avro(payload, <writer>,
{avroSchema: <reader>})`` over the compatible versions, so Avro's resolution fills added fields from their
defaults and every version decodes to the reader's one struct type. The reader carries a sentinel field
``__dk_ok`` (boolean, default true) that no writer has: valid records get true, and ``from_avro``'s PERMISSIVE mode
returns it null exactly when the bytes did not decode. A record is routed, never dropped:

- null value (tombstone): decodable, all fields null;
- fewer than 5 bytes, a magic byte other than 0, an id that is no version of the subject, bytes that do not decode:
  ``_decode_error`` says which (dead-letter table, or the run fails under ``on_decode_error: fail``);
- an id of a version that is *incompatible* with the reader: the task fails with a marker that
  :func:`incompatible_error_from` turns into :class:`~dynamic_kafka.errors.SchemaIncompatibleError` naming the
  stream, subject and versions. Nothing is written, because the marker is raised inside the error column that
  every row's routing evaluates before any table is committed.

Decoded fields land as top-level columns (beside ``cluster``, ``stream``, ``topic``...) plus ``_schema_id``.

Keys under a registry ``key.format`` are sources too (role ``key``, by default subject ``<topic>-key``): the same
checks and error chain, decoded by :func:`registry_key` into one ``key`` struct column instead of top-level fields.

Why one module of this size: the driver half and the executor half share one contract, the sources
(:class:`SourceDecoding`: schema ids, the reader schema, the column names and types), and each half checks what the
other relies on. Callers reach it through :class:`dynamic_kafka.decoding.prepared.PreparedDecoding`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from dynamic_kafka.config.models import VALUE_COLUMN_FORMATS, PipelineConfig, ValueFormatConfig
from dynamic_kafka.errors import ConfigError, SchemaIncompatibleError
from dynamic_kafka.registry.protobuf_codec import OK_FIELD, WHY_FIELD
from dynamic_kafka.spark.schema import DECODE_ERROR, OUTPUT_COLUMNS, RAW_KEY, RAW_VALUE, RUN_SEQ

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import DataType, StructType

    from dynamic_kafka.metadata.models import ClusterMetadata
    from dynamic_kafka.model.plan import DecodePin, Split
    from dynamic_kafka.registry.client import RegistryClient, WriterSchema
    from dynamic_kafka.registry.config import RegistryConfig
    from dynamic_kafka.registry.protobuf_codec import WriterFile

logger = logging.getLogger(__name__)

SCHEMA_ID = "_schema_id"
_REGISTRY_TYPE = {"avro": "AVRO", "json_schema": "JSON", "protobuf": "PROTOBUF"}
_MARKER = "dynamic-kafka-incompatible"
_MARKER_RE = re.compile(_MARKER + r"\[(?P<json>\{.*?\})\]" + _MARKER)
# Internal columns of the decoded frame; decoded fields must not use these names either.
_INTERNAL = (RAW_KEY, RAW_VALUE, DECODE_ERROR)

# Reasons of a record whose key or value (the source's role) has no wire-format header.
TOO_SHORT = "{role} is shorter than the 5-byte Schema Registry header"
UNKNOWN_MAGIC = "{role} does not start with the Schema Registry magic byte 0"


@dataclass(frozen=True)
class SchemaVersion:
    """One registered version of a subject and whether it can be read with the subject's reader schema."""

    version: int
    schema_id: int
    schema_str: str
    problem: str | None = None  # why it cannot be read with the reader (None: compatible)


@dataclass(frozen=True)
class SourceDecoding:
    """How one planned ``(cluster, topic)`` of a registry or fixed-schema stream is decoded."""

    stream_id: str
    cluster_id: str
    topic: str
    value_format: str  # avro | json_schema | protobuf | avro_file
    subject: str | None  # None for a fixed schema file
    versions: tuple[SchemaVersion, ...]  # oldest first; for a fixed schema file one version with id -1
    reader: str | None  # Avro reader schema JSON (with the sentinel) or a Spark struct's JSON; None: no versions
    role: Literal["value", "key"] = "value"  # which of the record's bytes the subject decodes

    @property
    def latest(self) -> SchemaVersion | None:
        """The newest registered version; None without versions."""
        return self.versions[-1] if self.versions else None


# --- driver: fetch and check ----------------------------------------------------------------------------------


def prepare_sources(
    pipeline: PipelineConfig,
    splits: Sequence[Split],
    clusters: Mapping[str, ClusterMetadata],
    *,
    clients: dict[RegistryConfig, RegistryClient] | None = None,
    pins: Sequence[DecodePin] = (),
) -> tuple[tuple[SourceDecoding, ...], ValueFormatConfig | None]:
    """Fetches and checks the writer schemas of the planned ranges' registry streams. JVM-free.

    Returns the registry / fixed-schema sources and the value format of the other streams (bytes, string or json;
    None when no planned stream uses one); :func:`dynamic_kafka.decoding.prepared.prepare_decoding` wraps them.

    Args:
        pipeline: the formats (per stream) and the default registry.
        splits: the ranges to read.
        clusters: connection metadata by cluster id (their ``schema_registry``).
        clients: registry clients to reuse (keyed by their registry settings, references unresolved); filled as needed.
        pins: the schema inputs a crashed run's plan was prepared with (:attr:`Plan.decoding`). A pinned registry
            source is decoded with exactly its pinned versions, fetched by id (a version registered or
            soft-deleted since changes nothing); a pinned schema file must still have the same contents. Sources
            without a pin (plans written before pins existed, or a first preparation) use the subject's versions
            as registered now.

    Raises:
        ConfigError: a registry stream's cluster has no registry, a schema file cannot be read (or differs from
            its pin), a pinned schema id is gone from the registry, a decoded field collides with a Kafka column,
            or a schema is not a record/object.
        SchemaRegistryError: a registry is unreachable (retriable) or refused the call.
    """
    clients = {} if clients is None else clients
    pinned = {(pin.cluster_id, pin.topic): pin for pin in pins if pin.role == "value"}
    sources: list[SourceDecoding] = []
    legacy: ValueFormatConfig | None = None
    for (cluster_id, topic), stream_id in _planned_topics(splits):
        fmt = pipeline.value_format_of(stream_id)
        if fmt.format in VALUE_COLUMN_FORMATS:
            if legacy is not None and legacy != fmt:
                raise ConfigError(
                    f"pipeline {pipeline.id!r}: streams with different value formats that land in the `value` "
                    f"column ({legacy.format} and {fmt.format}, stream {stream_id!r}) cannot share a "
                    "table.",
                    hint="Give them the same value format and schema, or put them in separate pipelines.",
                )
            legacy = fmt
        elif fmt.schema_file is not None:
            source = _fixed_schema_source(stream_id, cluster_id, topic, fmt.schema_file)
            _check_schema_file_pin(source, fmt.schema_file, pinned.get((cluster_id, topic)))
            sources.append(source)
        else:
            registry = _registry_of(
                pipeline, stream_id, f"value format {fmt.format}", clusters.get(cluster_id), cluster_id
            )
            client = _client(clients, registry, cluster_id)
            subject = fmt.subject(topic)
            registered = _registered(client, pinned.get((cluster_id, topic)), subject)
            sources.append(_registry_source(stream_id, cluster_id, topic, fmt.format, subject, registered))
    for source in sources:
        _check_field_names(source)
    if sources:
        logger.info(
            "pipeline %s: decoding %s",
            pipeline.id,
            "; ".join(
                f"{s.cluster_id}/{s.topic} as {s.value_format}"
                + (f" ({s.subject} versions {[v.version for v in s.versions]})" if s.subject else "")
                for s in sources
            ),
        )
    return tuple(sources), legacy


def prepare_key_sources(
    pipeline: PipelineConfig,
    splits: Sequence[Split],
    clusters: Mapping[str, ClusterMetadata],
    *,
    clients: dict[RegistryConfig, RegistryClient] | None = None,
    pins: Sequence[DecodePin] = (),
) -> tuple[SourceDecoding, ...]:
    """The key sources of the planned ranges under a registry ``key.format``: per ``(cluster, topic)`` the writer
    schemas of its key subject (:meth:`~dynamic_kafka.config.models.KeyFormatConfig.subject`), pinned as
    :func:`prepare_sources` pins the values'. Empty for the ``bytes`` and ``string`` key formats. JVM-free.

    Raises:
        ConfigError: a cluster has no registry, or a pinned schema id is gone from the registry.
        SchemaRegistryError: a registry is unreachable (retriable) or refused the call.
    """
    if not pipeline.key.uses_registry:
        return ()
    clients = {} if clients is None else clients
    pinned = {(pin.cluster_id, pin.topic): pin for pin in pins if pin.role == "key"}
    sources = []
    for (cluster_id, topic), stream_id in _planned_topics(splits):
        registry = _registry_of(
            pipeline, stream_id, f"key format {pipeline.key.format}", clusters.get(cluster_id), cluster_id
        )
        subject = pipeline.key.subject(topic)
        registered = _registered(_client(clients, registry, cluster_id), pinned.get((cluster_id, topic)), subject)
        source = _registry_source(stream_id, cluster_id, topic, pipeline.key.format, subject, registered)
        sources.append(dataclasses.replace(source, role="key"))
    return tuple(sources)


def _planned_topics(splits: Sequence[Split]) -> list[tuple[tuple[str, str], str]]:
    """The planned ``(cluster, topic)`` pairs, sorted, each with the first stream (by id) that reads it."""
    pairs: dict[tuple[str, str], str] = {}
    for split in splits:
        key = (split.cluster_id, split.topic)
        pairs[key] = min(pairs.get(key, split.stream_id), split.stream_id)
    return sorted(pairs.items())


def _registered(client: RegistryClient, pin: DecodePin | None, subject: str) -> list[tuple[int, WriterSchema]]:
    return client.subject_schemas(subject) if pin is None else _pinned_schemas(client, pin, subject)


def _registry_of(
    pipeline: PipelineConfig, stream_id: str, uses: str, cluster: ClusterMetadata | None, cluster_id: str
) -> RegistryConfig:
    registry = (cluster.schema_registry if cluster is not None else None) or pipeline.schema_registry
    if registry is None:
        raise ConfigError(
            f"stream {stream_id!r} uses {uses}, but cluster {cluster_id!r} names no "
            "schema_registry and the pipeline has no default.",
            hint="Add `schema_registry: {url: ...}` to the cluster in the metadata, or to the pipeline.",
        )
    return registry


def _client(clients: dict[RegistryConfig, RegistryClient], config: RegistryConfig, owner: str) -> RegistryClient:
    from dynamic_kafka.registry.client import RegistryClient

    if config not in clients:
        clients[config] = RegistryClient(config, owner=owner)
    return clients[config]


def _fixed_schema_source(stream_id: str, cluster_id: str, topic: str, path: Path) -> SourceDecoding:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(
            f"stream {stream_id!r}: cannot read schema_file {str(path)!r} ({e.strerror}).",
            hint="Check the path (relative paths are relative to the config file).",
        ) from e
    _parse_avro(text, f"schema_file {str(path)!r}")
    version = SchemaVersion(version=1, schema_id=-1, schema_str=text)
    return SourceDecoding(
        stream_id=stream_id,
        cluster_id=cluster_id,
        topic=topic,
        value_format="avro_file",
        subject=None,
        versions=(version,),
        reader=_with_sentinel(text, f"schema_file {str(path)!r}"),
    )


def schema_digest(text: str) -> str:
    """The hash a ``schema_file``'s contents are pinned by."""
    return hashlib.sha256(text.encode()).hexdigest()


def _check_schema_file_pin(source: SourceDecoding, path: Path, pin: DecodePin | None) -> None:
    if pin is None or pin.schema_file_sha256 is None:
        return
    if schema_digest(source.versions[0].schema_str) != pin.schema_file_sha256:
        raise ConfigError(
            f"stream {source.stream_id!r}: schema_file {str(path)!r} was edited since the run being "
            "finished was planned; its records are decoded only with the schema they were planned with.",
            hint="Restore the file's contents until the run has finished, or give the run up with "
            "`dynamic-kafka abandon`.",
        )


def _pinned_schemas(client: RegistryClient, pin: DecodePin, subject: str) -> list[tuple[int, WriterSchema]]:
    """The pinned versions of ``subject``, fetched by their immutable ids (a soft-deleted version's id resolves)."""
    from dynamic_kafka.errors import UnknownSchemaError

    found: list[tuple[int, WriterSchema]] = []
    for pinned in pin.versions:
        try:
            found.append((pinned.version, client.writer_schema(pinned.schema_id)))
        except UnknownSchemaError as e:
            raise ConfigError(
                f"stream {pin.stream_id!r}: the run being finished was planned with version {pinned.version} "
                f"(schema id {pinned.schema_id}) of subject {subject!r} on the registry of cluster "
                f"{pin.cluster_id!r}, which no longer has that id (hard-deleted?); its records cannot be decoded "
                "as planned.",
                hint="Register the schema again under its id (or restore the registry), or give the run up with "
                "`dynamic-kafka abandon`.",
            ) from e
    return found


def _registry_source(
    stream_id: str, cluster_id: str, topic: str, value_format: str, subject: str, registered: Sequence[Any]
) -> SourceDecoding:
    expected = _REGISTRY_TYPE[value_format]
    versions: list[SchemaVersion] = []
    seen: set[int] = set()
    for number, writer in registered:
        if writer.schema_id in seen:  # identical content registered twice has one id (content ids)
            continue
        seen.add(writer.schema_id)
        problem = None if writer.schema_type == expected else f"registered as {writer.schema_type}"
        versions.append(SchemaVersion(number, writer.schema_id, writer.schema_str, problem))
    usable = [v for v in versions if v.problem is None]
    if not usable:
        return SourceDecoding(stream_id, cluster_id, topic, value_format, subject, tuple(versions), None)
    latest = usable[-1]
    where = f"subject {subject!r} version {latest.version}"
    if value_format == "avro":
        reader_schema = _parse_avro(latest.schema_str, where)
        checked = [
            v if v.problem is not None or v is latest else _avro_checked(v, reader_schema, subject) for v in versions
        ]
        reader = _with_sentinel(latest.schema_str, where)
    elif value_format == "protobuf":
        checked, reader = _protobuf_checked(stream_id, subject, versions, latest)
    else:
        reader_type = json_schema_to_spark(_json(latest.schema_str, where), where)
        checked = [
            v if v.problem is not None or v is latest else _json_checked(v, reader_type, subject) for v in versions
        ]
        reader = reader_type.json()
    for v in checked:
        if v.problem is not None:
            logger.warning(
                "stream %s: %s version %d (id %d) cannot be read as version %d: %s",
                stream_id,
                subject,
                v.version,
                v.schema_id,
                latest.version,
                v.problem,
            )
    return SourceDecoding(stream_id, cluster_id, topic, value_format, subject, tuple(checked), reader)


def _parse_avro(text: str, where: str) -> Any:
    import avro.errors
    import avro.schema

    try:
        parsed = avro.schema.parse(text)
    except (avro.errors.AvroException, ValueError) as e:
        raise ConfigError(f"{where} is not a valid Avro schema: {e}") from e
    if parsed.type != "record":
        raise ConfigError(
            f"{where} is an Avro {parsed.type}, not a record.",
            hint="Registry values must be Avro records: their fields become the table's columns.",
        )
    return parsed


def _with_sentinel(text: str, where: str) -> str:
    document = _json(text, where)
    names = {f["name"] for f in document.get("fields", [])}
    if OK_FIELD in names:
        raise ConfigError(f"{where} has a field named {OK_FIELD}, which dynamic-kafka reserves.")
    document["fields"] = [*document["fields"], {"name": OK_FIELD, "type": "boolean", "default": True}]
    return json.dumps(document)


def _json(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as e:
        raise ConfigError(f"{where} is not valid JSON: {e}") from e


def _avro_checked(version: SchemaVersion, reader: Any, subject: str) -> SchemaVersion:
    import avro.schema
    from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

    writer = avro.schema.parse(version.schema_str)
    checker = ReaderWriterCompatibilityChecker()  # type: ignore[no-untyped-call]  # avro ships partial types
    result = checker.get_compatibility(reader, writer)
    if result.compatibility == SchemaCompatibilityType.compatible:
        return version
    problem = "; ".join(sorted(f"{m} at {loc}" for m, loc in zip(result.messages, result.locations, strict=False)))
    return SchemaVersion(version.version, version.schema_id, version.schema_str, problem or "incompatible")


def _json_checked(version: SchemaVersion, reader: StructType, subject: str) -> SchemaVersion:
    try:
        writer = json_schema_to_spark(json.loads(version.schema_str), f"subject {subject!r} version {version.version}")
    except (ConfigError, ValueError) as e:
        return SchemaVersion(version.version, version.schema_id, version.schema_str, str(e))
    problem = type_conflict(writer, reader)
    if problem is None:
        return version
    return SchemaVersion(version.version, version.schema_id, version.schema_str, problem)


def _protobuf_checked(
    stream_id: str, subject: str, versions: Sequence[SchemaVersion], latest: SchemaVersion
) -> tuple[list[SchemaVersion], str]:
    """Versions with a type conflict against the latest marked; the reader is the union of the others' structs.

    Raises:
        ConfigError: a version is not in descriptor form, imports another schema, or is recursive.
    """
    from dynamic_kafka.decoding.protobuf import descriptor_type, message_descriptor, union_struct

    types = {
        v.schema_id: descriptor_type(message_descriptor(_writer_file(stream_id, subject, v)), subject)
        for v in versions
        if v.problem is None
    }
    latest_type = types[latest.schema_id]
    checked: list[SchemaVersion] = []
    for v in versions:
        problem = v.problem
        if problem is None and v is not latest:
            problem = type_conflict(types[v.schema_id], latest_type)
        checked.append(v if problem == v.problem else SchemaVersion(v.version, v.schema_id, v.schema_str, problem))
    compatible = [types[v.schema_id] for v in reversed(checked) if v.problem is None]
    return checked, union_struct(compatible).json()


def _writer_file(stream_id: str, subject: str, version: SchemaVersion) -> WriterFile:
    from dynamic_kafka.decoding.protobuf import writer_file

    return writer_file(version.schema_str, f"stream {stream_id!r}: subject {subject!r} version {version.version}")


def _check_field_names(source: SourceDecoding) -> None:
    if source.reader is None:
        return
    names = _reader_field_names(source)
    reserved = {*OUTPUT_COLUMNS, RUN_SEQ, SCHEMA_ID, *_INTERNAL}
    clashes = sorted(n for n in names if n in reserved or n.startswith(("_dk_", "__dk_")))
    if clashes:
        where = f"subject {source.subject!r}" if source.subject else "the schema_file"
        raise ConfigError(
            f"stream {source.stream_id!r}: field(s) {', '.join(clashes)} of {where} collide with dynamic-kafka's "
            f"columns ({', '.join(OUTPUT_COLUMNS)}, {SCHEMA_ID}, {RUN_SEQ}).",
            hint="Decoded fields become top-level columns; rename the field in the schema.",
        )


def _reader_field_names(source: SourceDecoding) -> list[str]:
    assert source.reader is not None
    document = json.loads(source.reader)
    if source.value_format in ("avro", "avro_file"):
        return [f["name"] for f in document["fields"] if f["name"] != OK_FIELD]
    return [f["name"] for f in document["fields"]]


# --- JSON Schema -> Spark ---------------------------------------------------------------------------------------


def json_schema_to_spark(document: Any, where: str) -> StructType:
    """The Spark struct of an ``object`` JSON Schema (see docs/formats.md for the mapping).

    Raises:
        ConfigError: the schema is not an object schema.
    """
    from pyspark.sql.types import StructType

    converted = _json_type(document)
    if not isinstance(converted, StructType):
        raise ConfigError(f"{where} is not a JSON Schema of an object with properties.")
    return converted


def _json_type(node: Any) -> DataType:
    from pyspark.sql.types import (
        ArrayType,
        BooleanType,
        DateType,
        DoubleType,
        LongType,
        MapType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    if not isinstance(node, dict):
        return StringType()
    kind = node.get("type")
    if isinstance(kind, list):
        non_null = [k for k in kind if k != "null"]
        kind = non_null[0] if len(non_null) == 1 else None
    if kind == "object" or (kind is None and "properties" in node):
        properties = node.get("properties")
        if isinstance(properties, dict) and properties:
            return StructType([StructField(name, _json_type(sub), True) for name, sub in properties.items()])
        additional = node.get("additionalProperties")
        if isinstance(additional, dict) and "type" in additional:
            return MapType(StringType(), _json_type(additional), True)
        return StringType()
    if kind == "array":
        return ArrayType(_json_type(node.get("items", {})), True)
    if kind == "string":
        return {"date-time": TimestampType(), "date": DateType()}.get(node.get("format", ""), StringType())
    if kind == "integer":
        return LongType()
    if kind == "number":
        return DoubleType()
    if kind == "boolean":
        return BooleanType()
    return StringType()  # oneOf/anyOf/untyped: the raw JSON text


def type_conflict(older: DataType, newer: DataType, path: str = "") -> str | None:
    """Where ``older`` and ``newer`` give one field two types (fields only one of them has are fine), or None."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    if isinstance(older, StructType) and isinstance(newer, StructType):
        newer_fields = {f.name: f.dataType for f in newer.fields}
        for f in older.fields:
            if f.name in newer_fields:
                found = type_conflict(f.dataType, newer_fields[f.name], f"{path}.{f.name}" if path else f.name)
                if found is not None:
                    return found
        return None
    if isinstance(older, ArrayType) and isinstance(newer, ArrayType):
        return type_conflict(older.elementType, newer.elementType, f"{path}[]")
    if isinstance(older, MapType) and isinstance(newer, MapType):
        return type_conflict(older.valueType, newer.valueType, f"{path}{{}}")
    if older.simpleString() != newer.simpleString():
        return f"field {path or '(value)'} is {older.simpleString()} in one and {newer.simpleString()} in the other"
    return None


# --- executor: column expressions -------------------------------------------------------------------------------


def registry_frame(staged: DataFrame, sources: Sequence[SourceDecoding], raw_value: str) -> tuple[DataFrame, Column]:
    """Adds the decoded fields and ``_schema_id`` to ``staged``; returns it with the registry rows' error column
    (null for decodable rows and for rows of other streams).

    Raises:
        SchemaIncompatibleError: two sources give one field two types.
    """
    from pyspark.sql import functions as sf

    header_id, decoded_columns, errors = _decoded(sources, raw_value, "_dk_decoded_")
    schema_ids = [(_in_source(s), header_id) for s in sources if s.subject is not None]
    schema_id = _case(schema_ids, sf.lit(None).cast("long")).cast("int")
    with_structs = staged.withColumns({**decoded_columns, SCHEMA_ID: schema_id})
    fields = _flattened(with_structs, sources, decoded_columns)
    error = _case(errors, sf.lit(None).cast("string"))
    return with_structs.withColumns(fields), error


def registry_key(
    staged: DataFrame, sources: Sequence[SourceDecoding], raw_key: str
) -> tuple[DataFrame, Column, Column]:
    """Decodes the keys of the key ``sources`` (:func:`prepare_key_sources`) into one struct; returns ``staged``
    with the sources' decoded structs added, the ``key`` column and the key's error column (null for decodable
    keys, null keys and keys of other topics).

    Raises:
        ConfigError: two topics' keys decode to different struct types, which one ``key`` column cannot hold.
    """
    from pyspark.sql import functions as sf

    _, structs, errors = _decoded(sources, raw_key, "_dk_key_")
    keys = [
        (_in_source(s), sf.col(f"_dk_key_{i}").dropFields(OK_FIELD, WHY_FIELD))
        for i, s in enumerate(sources)
        if f"_dk_key_{i}" in structs
    ]
    with_structs = staged.withColumns(structs)
    types = {with_structs.select(key).schema[0].dataType.simpleString(): i for i, (_, key) in enumerate(keys)}
    if len(types) > 1:
        described = "; ".join(f"{_describe(sources[i])}: {t}" for t, i in types.items())
        raise ConfigError(
            f"the keys of one pipeline decode to different types ({described}); one `key` column holds one type.",
            hint="Give the topics' key subjects one schema, or read them in separate pipelines.",
        )
    return with_structs, _case(keys, sf.lit(None)), _case(errors, sf.lit(None).cast("string"))


def _decoded(
    sources: Sequence[SourceDecoding], raw_name: str, prefix: str
) -> tuple[Column, dict[str, Column], list[tuple[Column, Column]]]:
    """The header's schema id, per source with a reader its decoded struct (named ``<prefix><i>``), and per source
    its rows' error column.
    """
    raw, magic_ok, header_id, payload = _wire(raw_name)
    structs: dict[str, Column] = {}
    errors: list[tuple[Column, Column]] = []
    for i, source in enumerate(sources):
        in_source = _in_source(source)
        name = f"{prefix}{i}"
        struct = _source_struct(source, in_source, raw, header_id, payload)
        if struct is not None:
            structs[name] = struct
        errors.append(
            (in_source, _source_error(source, raw, header_id, magic_ok, name if struct is not None else None))
        )
    return header_id, structs, errors


def _in_source(source: SourceDecoding) -> Column:
    from pyspark.sql import functions as sf

    return (sf.col("cluster") == sf.lit(source.cluster_id)) & (sf.col("topic") == sf.lit(source.topic))


def _wire(raw_name: str) -> tuple[Column, Column, Column, Column]:
    """``(raw bytes, magic byte is 0, schema id, payload)`` of a Confluent wire-format column."""
    from pyspark.sql import functions as sf

    raw = sf.col(raw_name)
    magic_ok = sf.substring(raw, 1, 1) == sf.unhex(sf.lit("00"))
    # Null unless the header is there: a bad magic byte's next 4 bytes are no schema id (and count as none).
    header_id = sf.when(
        (sf.length(raw) >= 5) & magic_ok, sf.conv(sf.hex(sf.substring(raw, 2, 4)), 16, 10).cast("long")
    ).cast("long")
    return raw, magic_ok, header_id, sf.expr(f"substring(`{raw_name}`, 6)")


def _source_struct(
    source: SourceDecoding, in_source: Column, raw: Column, header_id: Column, payload: Column
) -> Column | None:
    from pyspark.sql import functions as sf
    from pyspark.sql.avro.functions import from_avro
    from pyspark.sql.types import StructType

    if source.reader is None:
        return None
    if source.value_format == "avro_file":
        writer = source.versions[0].schema_str
        return sf.when(in_source, from_avro(raw, writer, {"mode": "PERMISSIVE", "avroSchema": source.reader}))
    usable = [v for v in source.versions if v.problem is None]
    if source.value_format == "avro":
        options = {"mode": "PERMISSIVE", "avroSchema": source.reader}
        branches = [(header_id == sf.lit(v.schema_id), from_avro(payload, v.schema_str, options)) for v in usable]
        return _case([(in_source & c, value) for c, value in branches], None)
    if source.value_format == "protobuf":
        from dynamic_kafka.decoding.protobuf import protobuf_column

        writers = {v.schema_id: _writer_file(source.stream_id, source.subject or "", v) for v in usable}
        decoded = protobuf_column(writers, StructType.fromJson(json.loads(source.reader)), sf.when(in_source, raw))
        return sf.when(in_source & _known(header_id, usable), decoded)
    # json_schema: one from_json with the reader struct (JSON text carries its field names), plus a corrupt field.
    reader = StructType.fromJson(json.loads(source.reader))
    is_valid = sf.is_valid_utf8(payload)
    parsed = sf.from_json(
        sf.when(is_valid, payload.cast("string")),
        reader.add("_dk_corrupt", "string"),
        {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_dk_corrupt"},
    )
    ok = is_valid & parsed.isNotNull() & parsed.getField("_dk_corrupt").isNull()
    return sf.when(
        in_source & _known(header_id, usable),
        parsed.dropFields("_dk_corrupt").withField(OK_FIELD, sf.when(ok, sf.lit(True))),
    )


def _source_error(
    source: SourceDecoding, raw: Column, header_id: Column, magic_ok: Column, struct_name: str | None
) -> Column:
    from pyspark.sql import functions as sf

    decoded_ok = sf.col(struct_name).getField(OK_FIELD).isNotNull() if struct_name else sf.lit(False)
    if source.value_format == "avro_file":
        return sf.when(raw.isNotNull() & ~decoded_ok, sf.lit("value is not valid Avro for the value_schema_file"))
    assert source.subject is not None
    chain = sf.when(raw.isNull(), sf.lit(None).cast("string"))
    chain = chain.when(sf.length(raw) < 5, sf.lit(TOO_SHORT.format(role=source.role)))
    chain = chain.when(
        ~magic_ok,
        sf.concat(
            sf.lit(UNKNOWN_MAGIC.format(role=source.role) + " (found 0x"), sf.hex(sf.substring(raw, 1, 1)), sf.lit(")")
        ),
    )
    latest = source.latest
    for v in source.versions:
        if v.problem is not None and latest is not None:
            detail = json.dumps(
                {
                    "stream_id": source.stream_id,
                    "detail": f"subject {source.subject!r} on cluster {source.cluster_id!r}: version {v.version} "
                    f"(id {v.schema_id}) cannot be read as the latest version {latest.version}: {v.problem}",
                }
            )
            chain = chain.when(
                header_id == sf.lit(v.schema_id), sf.raise_error(sf.lit(f"{_MARKER}[{detail}]{_MARKER}"))
            )
    chain = chain.when(
        ~_known(header_id, [v for v in source.versions if v.problem is None]),
        sf.concat(
            sf.lit("unknown schema id "),
            header_id.cast("string"),
            sf.lit(f": not a version of subject {source.subject} in cluster {source.cluster_id}'s registry"),
        ),
    )
    kind = {"avro": "Avro", "protobuf": "Protobuf"}.get(source.value_format, "JSON matching its JSON Schema")
    reason = sf.concat(sf.lit(f"{source.role} is not valid {kind} for schema id "), header_id.cast("string"))
    if source.value_format == "protobuf" and struct_name:
        reason = sf.concat_ws(": ", reason, sf.col(struct_name).getField(WHY_FIELD))
    return chain.when(~decoded_ok, reason)


def _known(header_id: Column, usable: Sequence[SchemaVersion]) -> Column:
    """Whether the header's schema id is one of ``usable``'s."""
    from pyspark.sql import functions as sf

    known = sf.lit(False)
    for v in usable:
        known = known | (header_id == sf.lit(v.schema_id))
    return known


def _flattened(
    frame: DataFrame, sources: Sequence[SourceDecoding], decoded_columns: Mapping[str, Column]
) -> dict[str, Column]:
    """Top-level field columns: per field name, the value of the source that decoded the row."""
    from pyspark.sql import functions as sf
    from pyspark.sql.types import StructType

    by_name: dict[str, list[tuple[str, SourceDecoding]]] = {}
    types: dict[str, tuple[DataType, SourceDecoding]] = {}
    for i, source in enumerate(sources):
        name = f"_dk_decoded_{i}"
        if name not in decoded_columns:
            continue
        struct_type = frame.schema[name].dataType
        assert isinstance(struct_type, StructType)
        for f in struct_type.fields:
            if f.name in (OK_FIELD, WHY_FIELD):
                continue
            known = types.get(f.name)
            if known is not None:
                conflict = type_conflict(known[0], f.dataType, f.name)
                if conflict is not None:
                    raise SchemaIncompatibleError(
                        source.stream_id,
                        f"{_describe(known[1])} and {_describe(source)} disagree: {conflict}",
                    )
            else:
                types[f.name] = (f.dataType, source)
            by_name.setdefault(f.name, []).append((name, source))
    columns: dict[str, Column] = {}
    for field_name, holders in by_name.items():
        values = [sf.col(holder).getField(field_name) for holder, _ in holders]
        columns[field_name] = values[0] if len(values) == 1 else sf.coalesce(*values)
    return columns


def _describe(source: SourceDecoding) -> str:
    latest = source.latest
    if source.subject is None:
        return f"the schema_file of stream {source.stream_id!r}"
    version = f" version {latest.version}" if latest is not None else ""
    return f"subject {source.subject!r}{version} on cluster {source.cluster_id!r}"


def _case(branches: Sequence[tuple[Column, Column]], otherwise: Column | None) -> Column:
    from pyspark.sql import functions as sf

    if not branches:
        return otherwise if otherwise is not None else sf.lit(None)
    result = sf.when(branches[0][0], branches[0][1])
    for condition, value in branches[1:]:
        result = result.when(condition, value)
    return result.otherwise(otherwise) if otherwise is not None else result


# --- failures and the table -------------------------------------------------------------------------------------


def incompatible_error_from(error: BaseException) -> SchemaIncompatibleError | None:
    """The :class:`SchemaIncompatibleError` a task raised through its marker, or None."""
    match = _MARKER_RE.search(str(error))
    if match is None:
        return None
    fields = json.loads(match.group("json"))
    return SchemaIncompatibleError(str(fields["stream_id"]), str(fields["detail"]))


def check_table_schema(
    rows_schema: StructType, table_schema: StructType | None, table: str, sources: Sequence[SourceDecoding] = ()
) -> None:
    """Refuses rows whose columns give an existing table column another type (Delta's ``mergeSchema`` adds new
    columns and nested fields, but never changes a type).

    Args:
        rows_schema: the schema of the rows about to be written.
        table_schema: the table's schema as its Delta log has it (``sink.schema_check.sink_schema``, JVM-free and
            with the table's storage options); None when there is no table yet, which accepts any rows.
        table: the table's location, named in the error.
        sources: the run's writer schemas, used to name the stream and subject that brought a conflicting column.

    Raises:
        SchemaIncompatibleError: a column changes its type; names the stream and subject that brought it.
    """
    if table_schema is None:
        return
    conflict = type_conflict(table_schema, rows_schema)
    if conflict is None:
        return
    column = conflict.split()[1].split(".")[0] if conflict.startswith("field ") else ""
    culprit = next((s for s in sources if s.reader and column in _reader_field_names(s)), None)
    stream = culprit.stream_id if culprit else "(value)"
    where = _describe(culprit) if culprit else "value.schema"
    raise SchemaIncompatibleError(stream, f"{where} does not fit the table {table}: {conflict} (table first)")
