"""Registry formats without services: config shapes, JSON Schema -> Spark types, Avro compatibility, the table check."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from pydantic import ValidationError
from pyspark.sql.types import LongType, StringType, StructField, StructType

from dynamic_kafka.decoding.prepared import prepare_decoding
from dynamic_kafka.decoding.registry_formats import _registry_source, check_table_schema, json_schema_to_spark
from dynamic_kafka.errors import ConfigError, SchemaIncompatibleError
from dynamic_kafka.metadata.file import MetadataFile
from dynamic_kafka.registry.client import WriterSchema
from dynamic_kafka.sink.schema_check import sink_schema
from dynamic_kafka.storage import TableRef
from tests.support.builders import a_pipeline as pipeline

if TYPE_CHECKING:
    from pathlib import Path

V1 = {"type": "record", "name": "O", "fields": [{"name": "id", "type": "long"}]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "note", "type": ["null", "string"], "default": None}]}
V3 = {**V1, "fields": [{"name": "id", "type": "string"}]}


def test_formats_per_stream_and_a_registry_per_cluster() -> None:
    p = pipeline(
        value={"format": "avro"},
        schema_registry={"url": "http://r", "username": "u", "password": "${env:PW}"},
        formats={
            "clicks": {"format": "json_schema"},
            "items": {"format": "avro", "schema_file": "i"},
        },
    )
    assert (p.value_format_of("orders").format, p.value_format_of("orders").schema_file) == ("avro", None)
    assert p.value_format_of("clicks").format == "json_schema"
    assert p.value_format_of("items").schema_file is not None
    assert "${env:PW}" not in repr(p.schema_registry)
    with pytest.raises(ValidationError, match="schema_file` is for format avro"):
        pipeline(value={"format": "json_schema", "schema_file": "x.avsc"})
    cluster = MetadataFile.model_validate(
        {"clusters": {"east": {"bootstrap_servers": "b:1", "schema_registry": {"url": "http://e"}}}, "streams": {}}
    ).cluster("east")
    assert cluster.schema_registry is not None
    assert cluster.schema_registry.url == "http://e"


def test_a_registry_stream_without_a_registry_is_a_config_error() -> None:
    from dynamic_kafka.model.plan import Split

    split = Split(
        stream_ids=("orders",), cluster_id="east", bootstrap_servers="b:1", topic="t", partition=0, start_offset=0,
        stop_offset=1,
    )  # fmt: skip
    with pytest.raises(ConfigError, match="names no schema_registry"):
        prepare_decoding(pipeline(value={"format": "avro"}), [split], {})


def test_older_versions_are_checked_against_the_latest() -> None:
    registered = [(1, WriterSchema(schema_id=1, schema_type="AVRO", schema_str=json.dumps(V1)))]
    registered.append((2, WriterSchema(schema_id=2, schema_type="AVRO", schema_str=json.dumps(V2))))
    source = _registry_source("orders", "east", "t", "avro", "t-value", registered)
    assert [v.problem for v in source.versions] == [None, None]
    assert source.reader is not None
    assert "__dk_ok" in source.reader
    registered.append((3, WriterSchema(schema_id=3, schema_type="AVRO", schema_str=json.dumps(V3))))
    source = _registry_source("orders", "east", "t", "avro", "t-value", registered)
    problems = [v.problem for v in source.versions]
    assert problems[2] is None
    assert problems[0] is not None
    assert "string not compatible with writer type: long" in problems[0]


def test_json_schema_maps_to_spark_types() -> None:
    document = {
        "type": "object",
        "properties": {
            "user": {"type": "string"},
            "n": {"type": ["integer", "null"]},
            "at": {"type": "string", "format": "date-time"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "address": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
    assert json_schema_to_spark(document, "x").simpleString() == (
        "struct<user:string,n:bigint,at:timestamp,tags:array<string>,address:struct<city:string>>"
    )


def test_a_type_change_against_the_table_is_refused(tmp_path: Path) -> None:
    write_deltalake(str(tmp_path / "t"), pa.table({"id": pa.array([1], pa.int64()), "n": pa.array(["a"])}))
    widened = StructType([StructField("id", LongType()), StructField("n", StringType()), StructField("x", LongType())])
    table = str(tmp_path / "t")
    check_table_schema(widened, sink_schema(TableRef.of(table)), table)  # a new column is fine (mergeSchema adds it)
    changed = StructType([StructField("id", StringType())])
    with pytest.raises(SchemaIncompatibleError, match="field id is bigint in one and string in the other"):
        check_table_schema(changed, sink_schema(TableRef.of(table)), table)


def test_subject_name_strategies_name_the_subject_a_batch_read_fetches() -> None:
    p = pipeline(
        value={"format": "avro", "subject_name_strategy": "topic_record", "record_name": "com.acme.Order"},
        key={"format": "avro", "subject_name_strategy": "record", "record_name": "com.acme.OrderKey"},
        formats={"clicks": {"format": "protobuf"}},
    )
    assert p.value_format_of("orders").subject("orders") == "orders-com.acme.Order"
    assert p.value_format_of("clicks").subject("clicks") == "clicks-value"  # its own entry: topic strategy
    assert p.key.subject("orders") == "com.acme.OrderKey"
    assert pipeline(key={"format": "avro"}).key.subject("orders") == "orders-key"


@pytest.mark.parametrize(
    ("settings", "complaint"),
    [
        ({"value": {"format": "avro", "subject_name_strategy": "record"}},
         r"value\n.*fully-qualified name in record_name"),
        ({"value": {"format": "avro", "record_name": "a.B"}}, r"value\n.*record_name is for the record and topic_rec"),
        ({"value": {"format": "json", "schema": "id INT", "subject_name_strategy": "record", "record_name": "a.B"}},
         r"value\n.*subject_name_strategy is for formats read with a Schema Registry"),
        ({"key": {"subject_name_strategy": "topic_record", "record_name": "a.B"}},
         r"key\n.*subject_name_strategy is for"),
        ({"key": {"format": "avro", "subject_name_strategy": "record"}},
         r"key\n.*give its fully-qualified name in record_name"),
        ({"formats": {"s": {"format": "avro", "schema_file": "x.avsc", "subject_name_strategy": "record",
                            "record_name": "a.B"}}}, r"formats\.s\n.*Schema Registry"),
    ],
)  # fmt: skip
def test_a_subject_name_strategy_that_cannot_name_a_subject_is_refused(
    settings: dict[str, object], complaint: str
) -> None:
    with pytest.raises(ValidationError, match=complaint):
        pipeline(**settings)


def test_a_record_strategy_is_pinned_only_when_set() -> None:
    from dynamic_kafka.plan.planner import config_pins

    avro = {"format": "avro"}
    plain = config_pins(pipeline(value=avro, key=avro), ["orders"])
    named = config_pins(
        pipeline(value={**avro, "subject_name_strategy": "record", "record_name": "a.B"}, key=avro), ["orders"]
    )
    keyed = config_pins(
        pipeline(value=avro, key={**avro, "subject_name_strategy": "record", "record_name": "a.K"}), ["orders"]
    )
    assert "key_subject_name_strategy" not in plain
    assert named["format:orders"] != plain["format:orders"]
    assert "key_subject_name_strategy" in keyed
    assert keyed["format:orders"] == plain["format:orders"]


def test_a_value_expression_goes_with_the_expression_format_only_and_is_pinned() -> None:
    from dynamic_kafka.plan.planner import config_pins

    p = pipeline(value={"format": "expression", "expression": "upper(cast(value AS STRING))"})
    assert p.value_format_of("orders").expression == "upper(cast(value AS STRING))"
    for value in ({"format": "expression"}, {"format": "string", "expression": "value"}):
        with pytest.raises(ValidationError, match=r"`expression` .* goes with format expression"):
            pipeline(value=value)
    other = pipeline(value={"format": "expression", "expression": "lower(cast(value AS STRING))"})
    assert config_pins(p, ["orders"])["format:orders"] != config_pins(other, ["orders"])["format:orders"]
