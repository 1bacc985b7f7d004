"""Protobuf without services or a JVM: descriptor -> Spark types, the union of versions, the executors' decoder."""

from __future__ import annotations

import json
import pickle
from decimal import Decimal

import pyarrow as pa
import pytest
from google.protobuf import descriptor_pb2
from pyspark import cloudpickle
from pyspark.sql.pandas.types import to_arrow_type
from pyspark.sql.types import BooleanType, StringType, StructType

from devtools.testing.protobuf import descriptor_form, framed, message_class, order_file
from dynamic_kafka.decoding.protobuf import descriptor_type, message_descriptor, union_struct, writer_file
from dynamic_kafka.decoding.registry_formats import _registry_source
from dynamic_kafka.errors import ConfigError
from dynamic_kafka.registry import encode_header, protobuf_codec
from dynamic_kafka.registry.client import WriterSchema
from dynamic_kafka.registry.protobuf_codec import ProtobufDecoder, WriterFile

ORDER_V1 = (
    "struct<id:bigint,customer:struct<name:string,points:decimal(20,0)>,tags:array<string>,status:string,"
    "counts:map<string,int>>"
)
_F = descriptor_pb2.FieldDescriptorProto


def writer(proto: descriptor_pb2.FileDescriptorProto) -> WriterFile:
    return writer_file(descriptor_form(proto), "test")


def struct_of(proto: descriptor_pb2.FileDescriptorProto) -> StructType:
    return descriptor_type(message_descriptor(writer(proto)), "test")


def decoder(writers: dict[int, WriterFile], reader: StructType) -> ProtobufDecoder:
    returned = StructType([*reader.fields]).add("__dk_ok", BooleanType()).add("__dk_why", StringType())
    return ProtobufDecoder(writers, to_arrow_type(returned))


def single_field_file(
    kind: int, *, name: str = "t.proto", type_name: str | None = None
) -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto(name=name, package="t", syntax="proto3")
    message = proto.message_type.add(name="M")
    added = message.field.add(name="id", number=1, type=kind, label=_F.LABEL_OPTIONAL)
    if type_name:
        added.type_name = type_name
    return proto


def test_descriptor_types_map_to_spark_types() -> None:
    assert struct_of(order_file()).simpleString() == ORDER_V1
    assert writer(order_file()).message == "shop.Order"


def test_the_union_keeps_the_newest_order_then_fields_only_older_versions_have() -> None:
    older, newer = struct_of(order_file(with_note=True)), struct_of(order_file())
    assert union_struct([newer, older]).simpleString() == ORDER_V1[:-1] + ",note:string>"
    assert union_struct([older, newer]) == older


def test_a_type_change_makes_the_older_version_incompatible_and_the_reader_is_the_union() -> None:
    def registered(version: int, proto: descriptor_pb2.FileDescriptorProto) -> tuple[int, WriterSchema]:
        return version, WriterSchema(schema_id=version, schema_type="PROTOBUF", schema_str=descriptor_form(proto))

    changed = single_field_file(_F.TYPE_STRING)
    versions = [registered(1, order_file()), registered(2, order_file(with_note=True))]
    source = _registry_source("orders", "east", "t", "protobuf", "t-value", versions)
    assert [v.problem for v in source.versions] == [None, None]
    assert source.reader is not None
    assert StructType.fromJson(json.loads(source.reader)).fieldNames()[-1] == "note"
    changed.name, changed.package = "shop/order.proto", "shop"
    changed.message_type[0].name = "Order"
    source = _registry_source("orders", "east", "t", "protobuf", "t-value", [*versions, registered(3, changed)])
    assert [v.problem for v in source.versions] == [
        "field id is bigint in one and string in the other",
        "field id is bigint in one and string in the other",
        None,
    ]


def test_proto_text_imports_and_recursion_are_refused_with_what_to_do() -> None:
    text = WriterSchema(
        schema_id=1, schema_type="PROTOBUF", schema_str='syntax = "proto3"; message A { int64 id = 1; }'
    )
    with pytest.raises(ConfigError, match=r"stream 'orders': subject 't-value' version 1 is not a base64") as raised:
        _registry_source("orders", "east", "t", "protobuf", "t-value", [(1, text)])
    assert "descriptor form" in str(raised.value)
    imported = single_field_file(_F.TYPE_MESSAGE, type_name=".other.Thing")
    imported.dependency.append("other/thing.proto")
    with pytest.raises(ConfigError, match=r"imports 'other/thing\.proto': schema references are not supported"):
        writer(imported)
    recursive = single_field_file(_F.TYPE_MESSAGE, type_name=".t.M")
    with pytest.raises(ConfigError, match=r"message t.M contains itself \(t.M -> t.M\)"):
        struct_of(recursive)


def test_well_known_imports_come_from_the_installed_package() -> None:
    stamped = single_field_file(_F.TYPE_MESSAGE, type_name=".google.protobuf.Timestamp")
    stamped.dependency.append("google/protobuf/timestamp.proto")
    assert struct_of(stamped).simpleString() == "struct<id:struct<seconds:bigint,nanos:int>>"


def test_records_of_two_versions_decode_into_the_union() -> None:
    v1_file, v2_file = order_file(), order_file(with_note=True)
    reader = union_struct([struct_of(v2_file), struct_of(v1_file)])
    decode = decoder({1: writer(v1_file), 2: writer(v2_file)}, reader)
    first = message_class(v1_file, "shop.Order")(id=7, tags=["a", "b"], status=1)
    first.customer.name = "ann"
    first.customer.points = 2**64 - 1
    first.counts["x"] = 3
    second = message_class(v2_file, "shop.Order")(note="hi")
    second.status = 5  # an open enum keeps a number its schema does not name
    decoded = decode.decode(pa.array([framed(1, first), framed(2, second), None], pa.binary())).to_pylist()
    assert decoded == [
        {
            "id": 7,
            "customer": {"name": "ann", "points": Decimal(2**64 - 1)},
            "tags": ["a", "b"],
            "status": "PAID",
            "counts": [("x", 3)],
            "note": None,  # version 1 has no note
            "__dk_ok": True,
            "__dk_why": None,
        },
        {
            "id": 0,  # proto3 without presence: unset means the default
            "customer": None,  # a message has presence: unset means null
            "tags": [],
            "status": "5",
            "counts": [],
            "note": "hi",
            "__dk_ok": True,
            "__dk_why": None,
        },
        None,
    ]


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (encode_header(1) + b"\x00\xff\xff\xff", "bytes do not parse as shop.Order"),
        (encode_header(1) + b"\xff\xff\xff\xff\xff\xff", "a Protobuf message index varint is longer than 5 bytes."),
        (encode_header(1) + b"\x02\x02", "message indexes [1] name shop.Refund, not the stream's message shop.Order"),
        (encode_header(1) + b"\x02\x08", "message indexes [4] name no message of shop/order.proto"),
        (encode_header(9) + b"\x00", "schema id 9 is not a usable version"),
        (b"\x01\x00", "no Schema Registry header"),
    ],
)
def test_undecodable_values_say_why(value: bytes, why: str) -> None:
    decoded = decoder({1: writer(order_file())}, struct_of(order_file())).decode_one(value)
    assert decoded.get("__dk_ok") is None
    assert decoded["__dk_why"].startswith(why)


def test_a_used_decoder_still_pickles_by_value() -> None:
    decode = decoder({1: writer(order_file())}, struct_of(order_file()))
    assert decode.decode_one(framed(1, message_class(order_file(), "shop.Order")(id=1)))["id"] == 1
    cloudpickle.register_pickle_by_value(protobuf_codec)
    restored = pickle.loads(cloudpickle.dumps(decode.decode))  # noqa: S301  # bytes this test just made
    assert restored(pa.array([framed(1, message_class(order_file(), "shop.Order")(id=2))])).to_pylist()[0]["id"] == 2
