"""Registry formats of published values, without services: each format's bytes decode back with the readers' own
code, and a schema that does not fit the table's columns is refused naming the field, the column and the fix."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from typing import Any

import fastavro
import pyarrow as pa
import pytest

from devtools.testing.protobuf import descriptor_form, message_class, order_file
from dynamic_kafka.errors import PublicationError
from dynamic_kafka.operations.check import check_project
from dynamic_kafka.publish.config import PublicationConfig, RegistryEncoding
from dynamic_kafka.publish.encoders import checked_encoder
from dynamic_kafka.registry import parse_header
from dynamic_kafka.registry.client import WriterSchema

COLUMNS = pa.schema([("id", pa.int64()), ("name", pa.string()), ("ts", pa.timestamp("us", tz="UTC"))])
ROW = {"id": 7, "name": "ann", "ts": datetime(2026, 1, 1, tzinfo=UTC)}
ORDER = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": ["null", "string"]},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "note", "type": "string", "default": "-"},
    ],
}
CONFIG = PublicationConfig(id="out", table="/lake/t", stream="s")  # type: ignore[arg-type]


def encoder(kind: str, schema: str, fmt: str, columns: pa.Schema | None = COLUMNS, record: str | None = None) -> Any:
    strategy = "topic" if record is None else "record"
    encoding = RegistryEncoding(format=fmt, subject_name_strategy=strategy, record_name=record)  # type: ignore[arg-type]
    writer = WriterSchema(schema_id=42, schema_type=kind, schema_str=schema)  # type: ignore[arg-type]
    return checked_encoder(CONFIG, encoding, "value", writer, "the value schema (subject s-value version 1)", columns,
                           "east")  # fmt: skip


def test_avro_values_carry_the_schema_id_and_decode_with_the_registered_schema() -> None:
    data = encoder("AVRO", json.dumps(ORDER), "avro")(ROW)
    header = parse_header(data)
    assert header.schema_id == 42
    decoded = fastavro.schemaless_reader(io.BytesIO(data[header.payload_offset :]), fastavro.parse_schema(ORDER))
    assert decoded == {**ROW, "note": "-"}


def test_json_schema_values_are_validated_and_keep_only_the_schemas_properties() -> None:
    schema = {"type": "object", "properties": {"id": {"type": "integer"}, "ts": {"type": "string"}}}
    encode = encoder("JSON", json.dumps(schema), "json_schema")
    data = encode(ROW)
    assert json.loads(data[5:]) == {"id": 7, "ts": "2026-01-01T00:00:00+00:00"}
    strict = {**schema, "properties": {"id": {"type": "integer", "minimum": 10}}}
    with pytest.raises(ValueError, match="id: 7 is less than the minimum of 10"):
        encoder("JSON", json.dumps(strict), "json_schema")(ROW)


def test_protobuf_values_name_their_message_and_parse_as_it() -> None:
    columns = pa.schema([("id", pa.int64()), ("tags", pa.list_(pa.string())), ("status", pa.string())])
    row = {"id": 5, "tags": ["a", "b"], "status": "PAID"}
    data = encoder("PROTOBUF", descriptor_form(order_file()), "protobuf", columns)(row)
    header = parse_header(data, protobuf=True)
    assert (header.schema_id, header.message_indexes) == (42, (0,))
    message = message_class(order_file(), "shop.Order").FromString(data[header.payload_offset :])
    assert (message.id, list(message.tags), message.status) == (5, ["a", "b"], 1)
    refund = encoder("PROTOBUF", descriptor_form(order_file()), "protobuf", pa.schema([("amount", pa.float64())]),
                     record="shop.Refund")({"amount": 2.5})  # fmt: skip
    assert parse_header(refund, protobuf=True).message_indexes == (1,)


@pytest.mark.parametrize(
    ("schema", "kind", "fmt", "expected"),
    [
        (
            {**ORDER, "fields": [*ORDER["fields"], {"name": "region", "type": "string"}]},
            "AVRO",
            "avro",
            "requires field 'region', and the table has no column 'region'",
        ),
        (
            {**ORDER, "fields": [{"name": "ts", "type": "long"}]},
            "AVRO",
            "avro",
            "field 'ts' of type \"long\", which cannot hold column 'ts' of type timestamp[us, tz=UTC]",
        ),
        (
            {"type": "object", "properties": {"name": {"type": "integer"}}},
            "JSON",
            "json_schema",
            "field 'name' of type \"integer\", which cannot hold column 'name' of type string",
        ),
        ({"type": "object"}, "AVRO", "json_schema", "is registered as AVRO, not as json_schema"),
    ],
)
def test_a_schema_that_does_not_fit_the_columns_is_refused_naming_field_column_and_fix(
    schema: dict[str, Any], kind: str, fmt: str, expected: str
) -> None:
    with pytest.raises(PublicationError) as raised:
        encoder(kind, json.dumps(schema), fmt)
    assert expected in str(raised.value)
    assert raised.value.publication_id == "out"
    assert raised.value.hint


def test_a_protobuf_field_of_another_type_is_refused() -> None:
    with pytest.raises(
        PublicationError, match="field 'id' of type int64, which cannot hold column 'id' of type string"
    ):
        encoder("PROTOBUF", descriptor_form(order_file()), "protobuf", pa.schema([("id", pa.string())]))


def test_check_refuses_a_registry_format_on_a_cluster_without_a_registry(tmp_path: Any) -> None:
    (tmp_path / "metadata.yaml").write_text(
        json.dumps({"clusters": {"east": {"bootstrap_servers": "k:9092"}}, "streams": {"out": {"east": ["t"]}}})
    )
    publication = {"id": "out", "table": "table", "stream": "out", "value": {"format": "avro"}}
    config = tmp_path / "dynamic_kafka.yaml"
    config.write_text(
        json.dumps({"metadata_service": {"type": "file", "path": "metadata.yaml"}, "publications": [publication]})
    )
    problems = check_project(config).problems
    assert [(p.location, "add `schema_registry" in p.message) for p in problems] == [("publications[0].value", True)]
