"""Protobuf values decoded in Python, one Arrow batch at a time: the executor half of ``value.format: protobuf``.

No ``spark-protobuf`` jar is served from Maven Central for Spark 4.1 (docs/formats.md section 3), so Spark's
``from_protobuf`` is unavailable; a Python UDF on the executors decodes instead. This module is self-contained on
purpose: it imports only the standard library, ``google.protobuf`` and ``pyarrow``, and the UDF ships it to the
executors *by value* (cloudpickle), so a remote cluster needs the ``protobuf`` package on its executors, not
dynamic-kafka.

Invariants:

- Each record is decoded with its *writer's* descriptor (chosen by the schema id in its header), and the message
  its message indexes name, into a dict keyed by field name; Arrow then fits it to the *reader* struct (the union
  of the compatible versions' fields), so a field the writer did not have is null.
- A field with presence (``optional``, a message, a oneof member, proto2) that is not set is null; a proto3 field
  without presence that is not set holds its default (0, "", false), because that is what the writer meant.
- Nothing is dropped: a value that does not parse (or names another message than the stream's) decodes to a row
  whose ``__dk_ok`` is null and whose ``__dk_why`` says why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

OK_FIELD = "__dk_ok"
WHY_FIELD = "__dk_why"
_HEADER_SIZE = 5
# A varint of a 32-bit zigzag value needs at most 5 bytes; more means corrupt input, not a deeper message.
_MAX_VARINT_BYTES = 5
_MAX_INDEXES = 128

# FieldDescriptor.CPPTYPE_* values (stable across protobuf releases); integers keep this module import-light.
_CPPTYPE_ENUM = 8
_CPPTYPE_MESSAGE = 10


Converters = dict[Any, list[tuple[str, Callable[[Any], Any]]]]


def read_message_indexes(data: bytes, offset: int) -> tuple[tuple[int, ...], int]:
    """Read Confluent's Protobuf message indexes at ``offset``; return them and the offset just after them.

    The first top-level message is written as the single byte 0 and read as ``(0,)``.

    Raises:
        ValueError: a truncated or oversized varint, or a negative or oversized count or index.
    """
    count, offset = _read_zigzag(data, offset)
    if count == 0:
        return (0,), offset
    if count < 0 or count > _MAX_INDEXES:
        raise ValueError(f"invalid Protobuf message index count {count}.")
    indexes = []
    for _ in range(count):
        index, offset = _read_zigzag(data, offset)
        if index < 0:
            raise ValueError(f"invalid Protobuf message index {index}.")
        indexes.append(index)
    return tuple(indexes), offset


def _read_zigzag(data: bytes, offset: int) -> tuple[int, int]:
    value = 0
    for shift_index in range(_MAX_VARINT_BYTES):
        if offset >= len(data):
            raise ValueError("truncated Protobuf message indexes.")
        byte = data[offset]
        offset += 1
        value |= (byte & 0x7F) << (7 * shift_index)
        if not byte & 0x80:
            return (value >> 1) ^ -(value & 1), offset
    raise ValueError("a Protobuf message index varint is longer than 5 bytes.")


@dataclass(frozen=True)
class WriterFile:
    """One registered version, as the executors need it.

    Attributes:
        descriptor_set: a serialized ``FileDescriptorSet``: the version's file last, its imports before it.
        file_name: the version's file in that set.
        message: full name of the stream's value message (the file's first top-level message).
    """

    descriptor_set: bytes
    file_name: str
    message: str


@dataclass
class ProtobufDecoder:
    """Decodes wire-format Protobuf values (header included) into the reader's Arrow struct.

    Attributes:
        writers: per schema id, the writer's file.
        reader: the Arrow struct of the table's fields, plus ``__dk_ok`` (bool) and ``__dk_why`` (string).
    """

    writers: dict[int, WriterFile]
    reader: pa.StructType
    _classes: dict[int, tuple[Any, dict[tuple[int, ...], Any]]] = field(default_factory=dict, repr=False)
    _converters: Converters = field(default_factory=dict, repr=False)

    def __getstate__(self) -> dict[str, Any]:
        # Descriptors and generated classes do not pickle: executors rebuild them from the descriptor sets.
        return {"writers": self.writers, "reader": self.reader}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["writers"], state["reader"])  # type: ignore[misc]  # dataclass init, caches empty

    def decode(self, values: pa.Array) -> pa.Array:
        """One output row per input value; null stays null (a tombstone, or a row of another source)."""
        import pyarrow as pa

        rows = [None if v is None else self.decode_one(v) for v in values.to_pylist()]
        return pa.array(rows, type=self.reader)

    def decode_one(self, data: bytes) -> dict[str, Any]:
        """The fields of one value with ``__dk_ok`` true, or ``__dk_ok`` null and ``__dk_why`` set."""
        if len(data) < _HEADER_SIZE or data[0] != 0:
            return {WHY_FIELD: "no Schema Registry header"}
        schema_id = int.from_bytes(data[1:_HEADER_SIZE], "big")
        if schema_id not in self.writers:
            return {WHY_FIELD: f"schema id {schema_id} is not a usable version"}
        try:
            indexes, offset = read_message_indexes(data, _HEADER_SIZE)
        except ValueError as e:
            return {WHY_FIELD: str(e)}
        try:
            message_class = self._message_class(schema_id, indexes)
        except LookupError as e:
            return {WHY_FIELD: str(e)}
        message = message_class()
        try:
            message.ParseFromString(data[offset:])
        except Exception as e:  # google.protobuf.message.DecodeError, and RuntimeError from the upb backend
            return {WHY_FIELD: f"bytes do not parse as {message.DESCRIPTOR.full_name} ({e})"}
        row = _message_dict(message, self._converters)
        row[OK_FIELD] = True
        return row

    def _message_class(self, schema_id: int, indexes: tuple[int, ...]) -> Any:
        loaded = self._classes.get(schema_id)
        if loaded is None:
            loaded = (_file_descriptor(self.writers[schema_id]), {})
            self._classes[schema_id] = loaded
        file_descriptor, by_path = loaded
        cached = by_path.get(indexes)
        if cached is not None:
            return cached
        from google.protobuf import message_factory

        writer = self.writers[schema_id]
        descriptor = _descriptor_at(file_descriptor, indexes)
        if descriptor.full_name != writer.message:
            raise LookupError(
                f"message indexes {list(indexes)} name {descriptor.full_name}, not the stream's message "
                f"{writer.message}"
            )
        message_class = message_factory.GetMessageClass(descriptor)
        by_path[indexes] = message_class
        return message_class


def _file_descriptor(writer: WriterFile) -> Any:
    from google.protobuf import descriptor_pb2, descriptor_pool

    files = descriptor_pb2.FileDescriptorSet.FromString(writer.descriptor_set)
    pool = descriptor_pool.DescriptorPool()
    for proto in files.file:
        pool.Add(proto)
    return pool.FindFileByName(writer.file_name)


def _descriptor_at(file_descriptor: Any, indexes: tuple[int, ...]) -> Any:
    top = list(file_descriptor.message_types_by_name.values())
    if indexes[0] >= len(top):
        raise LookupError(f"message indexes {list(indexes)} name no message of {file_descriptor.name}")
    descriptor = top[indexes[0]]
    for index in indexes[1:]:
        if index >= len(descriptor.nested_types):
            raise LookupError(f"message indexes {list(indexes)} name no message of {file_descriptor.name}")
        descriptor = descriptor.nested_types[index]
    return descriptor


def _message_dict(message: Any, cache: Converters) -> dict[str, Any]:
    return {name: convert(message) for name, convert in _converters(message.DESCRIPTOR, cache)}


def _converters(descriptor: Any, cache: Converters) -> list[tuple[str, Callable[[Any], Any]]]:
    """Per field of ``descriptor``, a function from a message to the field's Arrow-ready value (built once)."""
    found = cache.get(descriptor)
    if found is None:
        found = [(f.name, _field_reader(f, cache)) for f in descriptor.fields]
        cache[descriptor] = found
    return found


def _field_reader(fd: Any, cache: Converters) -> Callable[[Any], Any]:
    name = fd.name
    if fd.cpp_type == _CPPTYPE_MESSAGE and fd.message_type.GetOptions().map_entry:
        key_of = _value_converter(fd.message_type.fields_by_name["key"], cache)
        value_of = _value_converter(fd.message_type.fields_by_name["value"], cache)
        return lambda m: [(key_of(k), value_of(v)) for k, v in getattr(m, name).items()]
    value_of = _value_converter(fd, cache)
    if is_repeated(fd):
        return lambda m: [value_of(v) for v in getattr(m, name)]
    if fd.has_presence:
        return lambda m: value_of(getattr(m, name)) if m.HasField(name) else None
    return lambda m: value_of(getattr(m, name))


def is_repeated(fd: Any) -> bool:
    """Whether a field descriptor is a repeated field (maps are repeated entry messages)."""
    # FieldDescriptor.is_repeated arrived in protobuf 5.29; `label` is deprecated there but older releases lack it.
    repeated = getattr(fd, "is_repeated", None)
    return bool(repeated) if repeated is not None else bool(fd.label == fd.LABEL_REPEATED)


def _value_converter(fd: Any, cache: Converters) -> Callable[[Any], Any]:
    if fd.cpp_type == _CPPTYPE_MESSAGE:
        return lambda m: _message_dict(m, cache)
    if fd.cpp_type == _CPPTYPE_ENUM:
        names = {v.number: v.name for v in fd.enum_type.values}
        # An open (proto3) enum may carry a number the writer's schema does not name: keep the number as text.
        return lambda v: names.get(v, str(v))
    return _identity


def _identity(value: Any) -> Any:
    return value
