"""The Confluent wire-format header: magic byte, schema id, Protobuf message indexes; the registry config's repr."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dynamic_kafka.errors import WireFormatError
from dynamic_kafka.registry import (
    FramedHeader,
    RegistryConfig,
    encode_header,
    encode_message_indexes,
    parse_header,
    parse_message_indexes,
)


def test_avro_header_gives_id_and_payload_offset() -> None:
    assert parse_header(b"\x00\x00\x00\x01\x02payload") == FramedHeader(schema_id=258, payload_offset=5)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "0 bytes is too short"),
        (b"\x00\x00\x00\x01", "4 bytes is too short"),
        (b"\x01\x00\x00\x00\x01\x02", "unknown magic byte 1"),
        (b'{"a": 1}', "unknown magic byte 123"),
    ],
)
def test_bad_headers_are_refused(data: bytes, message: str) -> None:
    with pytest.raises(WireFormatError, match=message):
        parse_header(data)


def test_protobuf_first_message_is_a_single_zero_byte() -> None:
    # As confluent-kafka's ProtobufSerializer writes it for the first message of a file (seen against Apicurio).
    framed = bytes.fromhex("0000000003" + "00" + "0807")
    assert parse_header(framed, protobuf=True) == FramedHeader(schema_id=3, payload_offset=6, message_indexes=(0,))


def test_protobuf_second_message_carries_count_and_index() -> None:
    # Serializer output for the second top-level message: count 1 and index 1, both zigzag varints (0x02).
    framed = bytes.fromhex("0000000003" + "0202" + "0807")
    assert parse_header(framed, protobuf=True) == FramedHeader(schema_id=3, payload_offset=7, message_indexes=(1,))


@pytest.mark.parametrize("tail", [b"", b"\x04\x02", b"\x80\x80\x80\x80\x80\x01", b"\x01"])
def test_malformed_message_indexes_are_refused(tail: bytes) -> None:
    with pytest.raises(WireFormatError):
        parse_header(b"\x00\x00\x00\x00\x01" + tail, protobuf=True)


@given(
    schema_id=st.integers(min_value=0, max_value=2**32 - 1),
    indexes=st.lists(st.integers(min_value=0, max_value=2**31 - 1), min_size=1, max_size=5).map(tuple),
    payload=st.binary(max_size=20),
)
def test_protobuf_headers_round_trip(schema_id: int, indexes: tuple[int, ...], payload: bytes) -> None:
    framed = encode_header(schema_id) + encode_message_indexes(indexes) + payload
    header = parse_header(framed, protobuf=True)
    assert (header.schema_id, header.message_indexes) == (schema_id, indexes)
    assert framed[header.payload_offset :] == payload


def test_message_indexes_stop_where_the_payload_starts() -> None:
    assert parse_message_indexes(b"\x04\x02\x06\xff", 0) == ((1, 3), 3)


def test_registry_config_repr_shows_no_password() -> None:
    config = RegistryConfig(url="http://r:8081", username="svc", password="literal-secret")
    assert "literal-secret" not in repr(config)
    assert "literal-secret" not in str(config)
