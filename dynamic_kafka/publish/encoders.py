"""Registry formats of published keys and values: Avro, Protobuf and JSON Schema in Confluent's wire format.

The schema is the *latest* version of the subject (``subject_name_strategy``, as readers name it) on the write
cluster's Schema Registry (the metadata's ``schema_registry``, else the publication's): the subject is the
contract, owned by whoever registers it, so a publication never registers a schema. The encoders are built once per
run, before anything is fenced or sent, and checked against the table's columns: every field the schema requires
must be a column, and every field that is a column must be able to hold the column's type. A mismatch is a
:class:`~dynamic_kafka.errors.PublicationError` naming the field, the column and the fix, raised by the dry run
and by ``publish`` alike.

Encoding: the schema's fields are filled from the columns of the same name (other columns are not sent); Avro with
fastavro (defaults fill absent fields), JSON Schema validated per record, Protobuf via its JSON mapping (so
timestamps, enums by name and nested messages follow the protobuf runtime's rules).
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa
import pyarrow.types as pat

from dynamic_kafka.errors import ConfigError, PublicationError
from dynamic_kafka.publish.records import Encoders, RowEncoder, json_value, plain_encoder, plain_encoders
from dynamic_kafka.registry.wire import encode_header, encode_message_indexes

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from dynamic_kafka.metadata.models import ClusterMetadata
    from dynamic_kafka.publish.config import PublicationConfig, RegistryEncoding
    from dynamic_kafka.registry.client import RegistryClient, WriterSchema

Role = Literal["key", "value"]
_SCHEMA_TYPE = {"avro": "AVRO", "protobuf": "PROTOBUF", "json_schema": "JSON"}


@dataclass(frozen=True)
class Field:
    """One field of a schema, as the check against the table's columns sees it."""

    name: str
    required: bool
    accepts: Callable[[pa.DataType], bool]
    shown: str  # the field's type as the schema spells it


def publication_encoders(
    config: PublicationConfig, cluster: ClusterMetadata, topic: str, columns: pa.Schema | None
) -> Encoders:
    """The publication's encoders on ``cluster``'s ``topic``, registry formats checked against ``columns`` (the
    table's schema; None while there is no table).

    Raises:
        PublicationError: a registry format without a registry, a subject without a usable version, or a schema
            that does not fit the table's columns.
        SchemaRegistryError: the registry is unreachable or refused the call.
    """
    registry = config.registry_encodings
    if not registry:
        return plain_encoders(config)
    settings = cluster.schema_registry or config.schema_registry
    if settings is None:
        role, encoding = next(iter(registry.items()))
        raise _error(
            config,
            f"its {role} format {encoding.format} needs a Schema Registry, and neither cluster "
            f"{cluster.cluster_id!r} in the metadata nor the publication names one",
            "Add `schema_registry: {url: ...}` to the cluster in the metadata, or to the publication.",
            cluster.cluster_id,
        )
    from dynamic_kafka.registry.client import RegistryClient

    client = RegistryClient(settings, owner=cluster.cluster_id)
    built = {
        role: _registry_encoder(config, client, encoding, role, topic, columns, cluster.cluster_id)
        for role, encoding in registry.items()
    }
    key = built.get("key") or (None if config.key is None else plain_encoder(config.key))
    return Encoders(key=key, value=built.get("value") or plain_encoder(config.value))


def _registry_encoder(
    config: PublicationConfig,
    client: RegistryClient,
    encoding: RegistryEncoding,
    role: Role,
    topic: str,
    columns: pa.Schema | None,
    cluster_id: str,
) -> RowEncoder:
    subject = encoding.subject(topic, role)
    registered = client.subject_schemas(subject)
    if not registered:
        raise _error(
            config,
            f"subject {subject!r} (its {role} format {encoding.format}) has no version on the registry of "
            f"cluster {cluster_id!r}",
            "Register the schema under that subject first: a publication encodes with the subject's latest "
            "version and never registers one.",
            cluster_id,
        )
    version, writer = registered[-1]
    where = f"the {role} schema (subject {subject!r} version {version})"
    return checked_encoder(config, encoding, role, writer, where, columns, cluster_id)


def checked_encoder(
    config: PublicationConfig,
    encoding: RegistryEncoding,
    role: Role,
    writer: WriterSchema,
    where: str,
    columns: pa.Schema | None,
    cluster_id: str,
) -> RowEncoder:
    """The encoder of ``encoding`` with the registered schema ``writer`` (``where``: which subject and version, for
    errors), checked against the table's ``columns`` (None: no table yet, nothing to check).

    Raises:
        PublicationError: the schema is of another type or unusable, or does not fit the columns.
    """
    if writer.schema_type != _SCHEMA_TYPE[encoding.format]:
        raise _error(
            config,
            f"{where} is registered as {writer.schema_type}, not as {encoding.format}",
            f"Set the publication's {role} format to the subject's type, or register a {encoding.format} version.",
            cluster_id,
        )
    build = {"avro": _avro, "json_schema": _json_schema, "protobuf": _protobuf}[encoding.format]
    try:
        fields, encoder = build(writer, encoding)
    except (ConfigError, ValueError, TypeError, KeyError) as e:
        raise _error(
            config,
            f"{where} cannot be used: {e}",
            "Register a valid schema version under that subject.",
            cluster_id,
        ) from e
    if columns is not None:
        _check_fields(config, fields, columns, where, cluster_id)
    return encoder


def _check_fields(
    config: PublicationConfig, fields: list[Field], columns: pa.Schema, where: str, cluster_id: str
) -> None:
    types = {f.name: f.type for f in columns}
    for field in fields:
        column = types.get(field.name)
        if column is None and field.required:
            raise _error(
                config,
                f"{where} requires field {field.name!r}, and the table has no column {field.name!r} "
                f"(its columns: {', '.join(types)})",
                f"Add the column {field.name!r} to the table, or register a version whose field {field.name!r} "
                "has a default (or is optional).",
                cluster_id,
            )
        if column is not None and not field.accepts(column):
            raise _error(
                config,
                f"{where} has field {field.name!r} of type {field.shown}, which cannot hold column "
                f"{field.name!r} of type {column}",
                f"Register a version whose field {field.name!r} fits the column (e.g. a timestamp column needs "
                "Avro's timestamp-micros, JSON's string, Protobuf's google.protobuf.Timestamp), or change the "
                "column's type.",
                cluster_id,
            )


def _error(config: PublicationConfig, detail: str, hint: str, cluster_id: str) -> PublicationError:
    return config.error(f"{detail}; nothing was sent.", hint=hint, cluster_id=cluster_id)


# --- Avro -------------------------------------------------------------------------------------------------------

_INTEGER = pat.is_integer
_NUMBER: Callable[[pa.DataType], bool] = lambda t: pat.is_integer(t) or pat.is_floating(t)  # noqa: E731
_TEXT: Callable[[pa.DataType], bool] = lambda t: pat.is_string(t) or pat.is_large_string(t)  # noqa: E731
_BINARY: Callable[[pa.DataType], bool] = (  # noqa: E731
    lambda t: pat.is_binary(t) or pat.is_large_binary(t) or pat.is_fixed_size_binary(t)
)
_LIST: Callable[[pa.DataType], bool] = lambda t: pat.is_list(t) or pat.is_large_list(t)  # noqa: E731

_AVRO_KINDS: dict[str, Callable[[pa.DataType], bool]] = {
    "boolean": pat.is_boolean,
    "int": lambda t: pat.is_integer(t) and t.bit_width <= 32,
    "long": _INTEGER,
    "float": _NUMBER,
    "double": _NUMBER,
    "string": _TEXT,
    "enum": _TEXT,
    "bytes": _BINARY,
    "fixed": _BINARY,
    "record": pat.is_struct,
    "array": _LIST,
    "map": pat.is_map,
}
_AVRO_LOGICAL: dict[str, Callable[[pa.DataType], bool]] = {
    "timestamp-millis": pat.is_timestamp,
    "timestamp-micros": pat.is_timestamp,
    "local-timestamp-millis": pat.is_timestamp,
    "local-timestamp-micros": pat.is_timestamp,
    "date": pat.is_date,
    "decimal": pat.is_decimal,
}


def _avro_accepts(avro: Any, column: pa.DataType) -> bool:
    if isinstance(avro, list):
        return any(_avro_accepts(branch, column) for branch in avro if branch != "null")
    if isinstance(avro, dict):
        logical = _AVRO_LOGICAL.get(str(avro.get("logicalType")))
        if logical is not None:
            return logical(column)
        return (
            _avro_accepts(avro["type"], column)
            if isinstance(avro["type"], (dict, list))
            else (_AVRO_KINDS.get(avro["type"], lambda _: True)(column))
        )
    return _AVRO_KINDS.get(str(avro), lambda _: True)(column)  # a named type defined elsewhere: not checked here


def _avro(writer: WriterSchema, encoding: RegistryEncoding) -> tuple[list[Field], RowEncoder]:
    import fastavro

    schema = json.loads(writer.schema_str)
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise ValueError("the schema is not an Avro record")
    parsed = fastavro.parse_schema(schema)
    names = [f["name"] for f in schema["fields"]]
    fields = [
        Field(f["name"], "default" not in f, partial(_avro_accepts, f["type"]), json.dumps(f["type"]))
        for f in schema["fields"]
    ]
    header = encode_header(writer.schema_id)

    def encoder(row: Mapping[str, Any]) -> bytes:
        out = io.BytesIO()
        out.write(header)
        fastavro.schemaless_writer(out, parsed, {name: row[name] for name in names if name in row})
        return out.getvalue()

    return fields, encoder


# --- JSON Schema ------------------------------------------------------------------------------------------------

_JSON_KINDS: dict[str, Callable[[pa.DataType], bool]] = {
    "integer": _INTEGER,
    "number": _NUMBER,
    "string": lambda t: _TEXT(t) or _BINARY(t) or pat.is_temporal(t) or pat.is_decimal(t),
    "boolean": pat.is_boolean,
    "object": lambda t: pat.is_struct(t) or pat.is_map(t),
    "array": _LIST,
}


def _json_accepts(spec: Any, column: pa.DataType) -> bool:
    kinds = spec.get("type") if isinstance(spec, dict) else None
    if kinds is None:
        return True
    listed = kinds if isinstance(kinds, list) else [kinds]
    return any(_JSON_KINDS.get(k, lambda _: False)(column) for k in listed if k != "null")


def _json_schema(writer: WriterSchema, encoding: RegistryEncoding) -> tuple[list[Field], RowEncoder]:
    from jsonschema.validators import validator_for

    schema = json.loads(writer.schema_str)
    if not isinstance(schema, dict):
        raise ValueError("the schema is not a JSON object")
    validator = validator_for(schema)(schema)
    properties: dict[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    fields = [
        Field(name, name in required, partial(_json_accepts, spec), json.dumps(spec.get("type", "any")))
        for name, spec in properties.items()
    ]
    header = encode_header(writer.schema_id)

    def encoder(row: Mapping[str, Any]) -> bytes:
        names = properties or row
        text = json.dumps(
            {n: row[n] for n in names if n in row}, default=json_value, separators=(",", ":"), ensure_ascii=False
        )
        problem = next(iter(validator.iter_errors(json.loads(text))), None)
        if problem is not None:
            where = "/".join(str(p) for p in problem.absolute_path) or "the document"
            raise ValueError(f"{where}: {problem.message} (JSON Schema id {writer.schema_id})")
        return header + text.encode()

    return fields, encoder


# --- Protobuf ---------------------------------------------------------------------------------------------------

# FieldDescriptor.CPPTYPE_* and TYPE_BYTES values (stable across protobuf releases).
_PROTO_KINDS: dict[int, Callable[[pa.DataType], bool]] = {
    1: lambda t: pat.is_integer(t) and t.bit_width <= 32,  # int32
    2: _INTEGER,  # int64
    3: lambda t: pat.is_integer(t) and t.bit_width <= 32,  # uint32
    4: _INTEGER,  # uint64
    5: _NUMBER,  # double
    6: _NUMBER,  # float
    7: pat.is_boolean,
    8: lambda t: _TEXT(t) or pat.is_integer(t),  # enum: by name or number
    9: lambda t: _TEXT(t) or pat.is_decimal(t) or pat.is_date(t),  # string
    10: pat.is_struct,  # message
}
_TYPE_BYTES = 12
_TIMESTAMP = "google.protobuf.Timestamp"


def _proto_accepts(fd: Any, column: pa.DataType) -> bool:
    from dynamic_kafka.registry.protobuf_codec import is_repeated

    if is_repeated(fd) and not (fd.message_type is not None and fd.message_type.GetOptions().map_entry):
        return _LIST(column)
    if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
        return bool(pat.is_map(column))
    if fd.type == _TYPE_BYTES:
        return _BINARY(column)
    if fd.message_type is not None and fd.message_type.full_name == _TIMESTAMP:
        return pat.is_timestamp(column) or _TEXT(column)
    return _PROTO_KINDS.get(fd.cpp_type, lambda _: True)(column)


def _protobuf(writer: WriterSchema, encoding: RegistryEncoding) -> tuple[list[Field], RowEncoder]:
    from google.protobuf import json_format, message_factory

    from dynamic_kafka.decoding.protobuf import message_descriptor, writer_file

    file = writer_file(writer.schema_str, "the schema")
    top = message_descriptor(file).file.message_types_by_name
    names = list(top)
    wanted = encoding.record_name.rsplit(".", 1)[-1] if encoding.record_name else names[0]
    if wanted not in top:
        raise ValueError(f"it declares no message {encoding.record_name!r} (messages: {', '.join(names)})")
    descriptor = top[wanted]
    message_class = message_factory.GetMessageClass(descriptor)
    # proto3 fields are all optional: a field without a column stays unset.
    fields = [Field(fd.name, False, partial(_proto_accepts, fd), _proto_shown(fd)) for fd in descriptor.fields]
    prefix = encode_header(writer.schema_id) + encode_message_indexes((names.index(wanted),))
    known = [fd.name for fd in descriptor.fields]

    def encoder(row: Mapping[str, Any]) -> bytes:
        document = json.loads(json.dumps({n: row[n] for n in known if n in row and row[n] is not None},
                                         default=json_value))  # fmt: skip
        try:
            message = json_format.ParseDict(document, message_class())
        except json_format.ParseError as e:
            raise ValueError(str(e)) from e
        return prefix + bytes(message.SerializeToString())

    return fields, encoder


def _proto_shown(fd: Any) -> str:
    from google.protobuf import descriptor_pb2

    from dynamic_kafka.registry.protobuf_codec import is_repeated

    kind = (
        fd.message_type.full_name
        if fd.message_type is not None
        else descriptor_pb2.FieldDescriptorProto.Type.Name(fd.type).removeprefix("TYPE_").lower()
    )
    return f"repeated {kind}" if is_repeated(fd) else kind
