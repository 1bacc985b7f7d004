"""Protobuf schemas for tests and benchmarks, built as descriptors (no protoc): an ``Order`` with a nested message,
a repeated field, an enum and a map, in two versions (the second adds ``note``), plus helpers to register and
encode them the way confluent-kafka's ``ProtobufSerializer`` does.
"""

from __future__ import annotations

import base64
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from dynamic_kafka.registry.wire import encode_header, encode_message_indexes

_F = descriptor_pb2.FieldDescriptorProto


def order_file(*, with_note: bool = False, name: str = "shop/order.proto") -> descriptor_pb2.FileDescriptorProto:
    """``shop.Order {id, customer {name, points}, tags[], status, counts<string,int32>, [note]}`` plus ``Refund``.

    ``Refund`` is the file's second top-level message: its records are not the stream's value message.
    """
    proto = descriptor_pb2.FileDescriptorProto(name=name, package="shop", syntax="proto3")
    proto.enum_type.add(name="Status").value.extend(
        [
            descriptor_pb2.EnumValueDescriptorProto(name="NEW", number=0),
            descriptor_pb2.EnumValueDescriptorProto(name="PAID", number=1),
        ]
    )
    order = proto.message_type.add(name="Order")
    customer = order.nested_type.add(name="Customer")
    _field(customer, "name", 1, _F.TYPE_STRING)
    _field(customer, "points", 2, _F.TYPE_UINT64)
    entry = order.nested_type.add(name="CountsEntry")
    entry.options.map_entry = True
    _field(entry, "key", 1, _F.TYPE_STRING)
    _field(entry, "value", 2, _F.TYPE_INT32)
    _field(order, "id", 1, _F.TYPE_INT64)
    _field(order, "customer", 2, _F.TYPE_MESSAGE, type_name=".shop.Order.Customer")
    _field(order, "tags", 3, _F.TYPE_STRING, repeated=True)
    _field(order, "status", 4, _F.TYPE_ENUM, type_name=".shop.Status")
    _field(order, "counts", 5, _F.TYPE_MESSAGE, type_name=".shop.Order.CountsEntry", repeated=True)
    if with_note:
        _field(order, "note", 6, _F.TYPE_STRING)
    refund = proto.message_type.add(name="Refund")
    _field(refund, "amount", 1, _F.TYPE_DOUBLE)
    return proto


def _field(
    message: descriptor_pb2.DescriptorProto,
    name: str,
    number: int,
    kind: int,
    *,
    type_name: str | None = None,
    repeated: bool = False,
) -> None:
    added = message.field.add(name=name, number=number, type=kind)
    added.label = _F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL
    if type_name is not None:
        added.type_name = type_name


def descriptor_form(proto: descriptor_pb2.FileDescriptorProto) -> str:
    """The schema text confluent-kafka's Python serializer registers: a base64 serialized FileDescriptorProto."""
    return base64.b64encode(proto.SerializeToString()).decode("ascii")


def message_class(proto: descriptor_pb2.FileDescriptorProto, name: str) -> Any:
    """The generated class of message ``name`` (full name) of ``proto``, from a private pool."""
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))


def framed(schema_id: int, message: Any, indexes: tuple[int, ...] = (0,)) -> bytes:
    """A wire-format value: header, message indexes, then the message's bytes."""
    body: bytes = message.SerializeToString()
    return encode_header(schema_id) + encode_message_indexes(indexes) + body
