"""``value.format: protobuf``: registered descriptors -> Spark types on the driver, and the Arrow UDF that decodes.

Driver: each registered version's schema must be the *descriptor form*, a base64 serialized
``FileDescriptorProto`` (what confluent-kafka's Python ``ProtobufSerializer`` registers). A ``.proto`` text schema
(what Java producers register) is refused with a :class:`~dynamic_kafka.errors.ConfigError`: Apicurio 3.0.9 ignores
``?format=serialized``, and parsing ``.proto`` text needs protoc (docs/decisions/0033-protobuf-decoded-in-python.md
says why neither is built in).
Imports of Google's well-known types are resolved from the installed ``protobuf`` package; other imports (schema
references) are refused. The stream's value message is the file's first top-level message (message index 0, the
serializer's choice for a one-message file).

Spark types (``descriptor_type``): message -> struct, repeated -> array, map -> map, enum -> string (its name),
int32/sint32/sfixed32 -> int, uint32/fixed32 -> bigint, int64/sint64/sfixed64 -> bigint, uint64/fixed64 ->
decimal(20,0), float -> float, double -> double, bool -> boolean, string -> string, bytes -> binary. Well-known
types are messages like any other (a Timestamp is ``struct<seconds, nanos>``). A recursive message is refused.

Union of versions (``union_struct``): the newest version's fields in its order, then the fields only older
versions have, newest first; nested structs (also inside arrays and map values) merge the same way. A field whose
type differs between two versions makes the older version incompatible (its records fail the run).

Executor: :func:`protobuf_column` wraps :class:`~dynamic_kafka.registry.protobuf_codec.ProtobufDecoder` in an
Arrow UDF; the codec module is pickled by value, so executors need the ``protobuf`` package, not dynamic-kafka.
"""

from __future__ import annotations

import base64
import binascii
import importlib
import warnings
from typing import TYPE_CHECKING, Any

from dynamic_kafka.errors import ConfigError
from dynamic_kafka.registry import protobuf_codec
from dynamic_kafka.registry.protobuf_codec import OK_FIELD, WHY_FIELD, ProtobufDecoder, WriterFile

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from pyspark.sql import Column
    from pyspark.sql.types import DataType, StructType

_WELL_KNOWN_PREFIX = "google/protobuf/"


def writer_file(schema_str: str, where: str) -> WriterFile:
    """The executors' form of one registered Protobuf schema (descriptor form only).

    Args:
        schema_str: the registry's ``schema`` text.
        where: the stream, subject and version, for errors.

    Raises:
        ConfigError: a ``.proto`` text schema, an import other than a well-known type, or a file without messages.
    """
    from google.protobuf import descriptor_pb2

    proto = descriptor_pb2.FileDescriptorProto()
    try:
        proto.ParseFromString(base64.b64decode(schema_str, validate=True))
    except (binascii.Error, ValueError, Exception) as e:  # DecodeError has no narrower public base
        raise ConfigError(
            f"{where} is not a base64 serialized FileDescriptorProto (.proto text, which Java serializers "
            "register, is not parsed by dynamic-kafka).",
            hint="Register the schema in descriptor form (base64 FileDescriptorProto), as confluent-kafka's "
            "Python ProtobufSerializer does, or land the values as bytes.",
        ) from e
    if not proto.message_type:
        raise ConfigError(f"{where} declares no message.", hint="The value message must be the file's first message.")
    files = descriptor_pb2.FileDescriptorSet()
    for dependency in proto.dependency:
        _add_well_known(files, dependency, where, seen=set())
    files.file.append(proto)
    package = f"{proto.package}." if proto.package else ""
    return WriterFile(
        descriptor_set=files.SerializeToString(),
        file_name=proto.name,
        message=package + proto.message_type[0].name,
    )


def _add_well_known(files: Any, name: str, where: str, *, seen: set[str]) -> None:
    if name in seen:
        return
    seen.add(name)
    if not name.startswith(_WELL_KNOWN_PREFIX):
        raise ConfigError(
            f"{where} imports {name!r}: schema references are not supported for Protobuf.",
            hint="Register a self-contained file (only Google's well-known types may be imported).",
        )
    from google.protobuf import descriptor_pb2

    module_name = "google.protobuf." + name.removeprefix(_WELL_KNOWN_PREFIX).removesuffix(".proto") + "_pb2"
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(f"{where} imports {name!r}, which the installed protobuf package does not have.") from e
    proto = descriptor_pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb)
    for dependency in proto.dependency:
        _add_well_known(files, dependency, where, seen=seen)
    files.file.append(proto)


def message_descriptor(writer: WriterFile) -> Any:
    """The descriptor of the writer's value message (built in a private pool)."""
    from google.protobuf import descriptor_pb2, descriptor_pool

    pool = descriptor_pool.DescriptorPool()
    for proto in descriptor_pb2.FileDescriptorSet.FromString(writer.descriptor_set).file:
        pool.Add(proto)
    return pool.FindMessageTypeByName(writer.message)


def descriptor_type(descriptor: Any, where: str) -> StructType:
    """The Spark struct of a message descriptor (mapping in the module docstring).

    Raises:
        ConfigError: the message is recursive.
    """
    return _struct_of(descriptor, where, ())


def _struct_of(descriptor: Any, where: str, path: tuple[str, ...]) -> StructType:
    from pyspark.sql.types import StructField, StructType

    if descriptor.full_name in path:
        raise ConfigError(
            f"{where}: message {descriptor.full_name} contains itself ({' -> '.join([*path, descriptor.full_name])}); "
            "a recursive message has no fixed table schema.",
            hint="Land the values as bytes, or break the recursion in the schema.",
        )
    inner = (*path, descriptor.full_name)
    return StructType([StructField(f.name, _field_type(f, where, inner), True) for f in descriptor.fields])


def _field_type(fd: Any, where: str, path: tuple[str, ...]) -> DataType:
    from pyspark.sql.types import ArrayType, MapType

    if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
        entry = fd.message_type.fields_by_name
        return MapType(_single_type(entry["key"], where, path), _single_type(entry["value"], where, path), True)
    single = _single_type(fd, where, path)
    return ArrayType(single, True) if protobuf_codec.is_repeated(fd) else single


def _single_type(fd: Any, where: str, path: tuple[str, ...]) -> DataType:
    from google.protobuf.descriptor import FieldDescriptor as F
    from pyspark.sql.types import (
        BinaryType,
        BooleanType,
        DecimalType,
        DoubleType,
        FloatType,
        IntegerType,
        LongType,
        StringType,
    )

    if fd.type in (F.TYPE_MESSAGE, F.TYPE_GROUP):
        return _struct_of(fd.message_type, where, path)
    simple: dict[int, DataType] = {
        F.TYPE_DOUBLE: DoubleType(),
        F.TYPE_FLOAT: FloatType(),
        F.TYPE_INT32: IntegerType(),
        F.TYPE_SINT32: IntegerType(),
        F.TYPE_SFIXED32: IntegerType(),
        F.TYPE_UINT32: LongType(),
        F.TYPE_FIXED32: LongType(),
        F.TYPE_INT64: LongType(),
        F.TYPE_SINT64: LongType(),
        F.TYPE_SFIXED64: LongType(),
        F.TYPE_UINT64: DecimalType(20, 0),
        F.TYPE_FIXED64: DecimalType(20, 0),
        F.TYPE_BOOL: BooleanType(),
        F.TYPE_STRING: StringType(),
        F.TYPE_BYTES: BinaryType(),
        F.TYPE_ENUM: StringType(),
    }
    return simple[fd.type]


def union_struct(newest_first: Sequence[StructType]) -> StructType:
    """The union of compatible versions' structs (rule in the module docstring); types must not conflict."""
    result = newest_first[0]
    for older in newest_first[1:]:
        merged = _merged(result, older)
        assert isinstance(merged, type(result))
        result = merged
    return result


def _merged(newer: DataType, older: DataType) -> DataType:
    from pyspark.sql.types import ArrayType, MapType, StructField, StructType

    if isinstance(newer, StructType) and isinstance(older, StructType):
        older_fields = {f.name: f.dataType for f in older.fields}
        fields = [
            StructField(f.name, _merged(f.dataType, older_fields[f.name]) if f.name in older_fields else f.dataType)
            for f in newer.fields
        ]
        fields += [f for f in older.fields if f.name not in newer.fieldNames()]
        return StructType(fields)
    if isinstance(newer, ArrayType) and isinstance(older, ArrayType):
        return ArrayType(_merged(newer.elementType, older.elementType), True)
    if isinstance(newer, MapType) and isinstance(older, MapType):
        return MapType(newer.keyType, _merged(newer.valueType, older.valueType), True)
    return newer


def protobuf_column(writers: Mapping[int, WriterFile], reader: StructType, raw: Column) -> Column:
    """An Arrow UDF call decoding ``raw`` (wire-format values; null for other sources' rows) into ``reader``'s
    fields plus ``__dk_ok`` (true when decoded) and ``__dk_why`` (why not).
    """
    from pyspark import cloudpickle
    from pyspark.sql.pandas.functions import ArrowUDFType, arrow_udf
    from pyspark.sql.pandas.types import to_arrow_type
    from pyspark.sql.types import BooleanType, StringType, StructType

    returned = StructType([*reader.fields]).add(OK_FIELD, BooleanType(), True).add(WHY_FIELD, StringType(), True)
    arrow_type = to_arrow_type(returned)
    decoder = ProtobufDecoder(dict(writers), arrow_type)
    # By value: executors then need the protobuf package (and pyarrow, which Arrow UDFs need anyway), not ours.
    cloudpickle.register_pickle_by_value(protobuf_codec)  # type: ignore[no-untyped-call]  # pyspark's vendored copy
    with warnings.catch_warnings():
        # pyspark prefers type hints to the explicit UDF type; a bound method's hints name pyarrow lazily.
        warnings.filterwarnings("ignore", "It is preferred to specify type hints", UserWarning)
        decode = arrow_udf(decoder.decode, returned, ArrowUDFType.SCALAR)
    column: Column = decode(raw)
    return column
