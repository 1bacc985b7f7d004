"""The Confluent Schema Registry wire format: magic byte, schema id and, for Protobuf, message indexes.

Every registry-encoded record starts with a 5-byte header: magic byte ``0`` then the schema id as a big-endian
unsigned 32-bit integer. Avro and JSON Schema payloads follow directly. Protobuf payloads first carry the path of
the message type inside the schema's file: a zigzag varint count, then that many zigzag varint indexes (the
top-level message's position, then nested positions). The common case, the first top-level message, is written as
the single byte ``0`` instead of ``[1, 0]``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from dynamic_kafka.errors import WireFormatError
from dynamic_kafka.registry.protobuf_codec import read_message_indexes

MAGIC_BYTE = 0
HEADER_SIZE = 5


@dataclass(frozen=True)
class FramedHeader:
    """What the header of one record says.

    Attributes:
        schema_id: the registry id of the writer schema.
        payload_offset: where the encoded value starts (after the header and any Protobuf message indexes).
        message_indexes: the Protobuf message path (``(0,)`` is the first top-level message); empty otherwise.
    """

    schema_id: int
    payload_offset: int
    message_indexes: tuple[int, ...] = ()


def parse_header(data: bytes, *, protobuf: bool = False) -> FramedHeader:
    """Parse the header of one wire-format record.

    Args:
        data: the record's key or value bytes.
        protobuf: also read the Protobuf message indexes that follow the schema id.

    Raises:
        WireFormatError: fewer than 5 bytes, a magic byte other than 0, or malformed message indexes.

    Example:
        >>> parse_header(bytes([0, 0, 0, 0, 7, 2]))
        FramedHeader(schema_id=7, payload_offset=5, message_indexes=())
    """
    if len(data) < HEADER_SIZE:
        raise WireFormatError(f"{len(data)} bytes is too short for a wire-format header (5 bytes).")
    if data[0] != MAGIC_BYTE:
        raise WireFormatError(f"unknown magic byte {data[0]} (the Confluent wire format starts with 0).")
    (schema_id,) = struct.unpack_from(">I", data, 1)
    if not protobuf:
        return FramedHeader(schema_id=schema_id, payload_offset=HEADER_SIZE)
    indexes, offset = parse_message_indexes(data, HEADER_SIZE)
    return FramedHeader(schema_id=schema_id, payload_offset=offset, message_indexes=indexes)


def parse_message_indexes(data: bytes, offset: int) -> tuple[tuple[int, ...], int]:
    """Read Protobuf message indexes at ``offset``; return them and the offset just after them.

    Raises:
        WireFormatError: a truncated or oversized varint, or a negative count or index.
    """
    try:
        return read_message_indexes(data, offset)
    except ValueError as e:
        raise WireFormatError(str(e)) from e


def encode_header(schema_id: int) -> bytes:
    """Return the 5-byte header for ``schema_id``."""
    return struct.pack(">bI", MAGIC_BYTE, schema_id)


def encode_message_indexes(indexes: tuple[int, ...]) -> bytes:
    """Return the Protobuf message-index bytes for ``indexes``, ``(0,)`` as the single byte 0."""
    if indexes in ((), (0,)):
        return b"\x00"
    return b"".join(_zigzag_varint(v) for v in (len(indexes), *indexes))


def _zigzag_varint(value: int) -> bytes:
    encoded = (value << 1) ^ (value >> 31)
    out = bytearray()
    while encoded > 0x7F:
        out.append((encoded & 0x7F) | 0x80)
        encoded >>= 7
    out.append(encoded)
    return bytes(out)
