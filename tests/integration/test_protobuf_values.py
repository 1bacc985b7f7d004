"""Protobuf values (Confluent wire format, descriptors from a real Apicurio registry) through the runner, in both
Spark modes: decoded in Python on the executors (an Arrow UDF), in the run's one Spark job.

Two versions of one file (the second adds ``note``) land once each with the union schema: a nested message, a
repeated field, an enum and a map. A value that does not parse, one with an unknown schema id and one naming the
file's second message go to the dead-letter table with their reasons. A ``.proto`` text schema is refused before
anything is written. A field whose type changed between two versions with records of both in the run, and (under
``on_decode_error: fail``) a value that does not parse, fail the run naming what and where, with nothing written.
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from deltalake import DeltaTable

from devtools.testing.kafka import Record, create_topic, produce, unique_name
from devtools.testing.pipeline import PipelineHarness
from devtools.testing.protobuf import descriptor_form, framed, message_class, order_file
from dynamic_kafka.errors import ConfigError, SchemaIncompatibleError, UndecodableRecordError
from dynamic_kafka.registry import encode_header

_ID_AS_STRING = 9  # FieldDescriptorProto.TYPE_STRING

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from pathlib import Path

    from devtools.local_kafka import ClusterEndpoint
    from devtools.local_registry import LocalRegistry

pytestmark = pytest.mark.integration


def new_topic(kafka_clusters: dict[str, ClusterEndpoint]) -> tuple[str, str]:
    """East's bootstrap servers and a new topic there."""
    east = kafka_clusters["east"].bootstrap_servers
    topic = unique_name("orders")
    create_topic(east, topic)
    return east, topic


def register(url: str, topic: str, *files: Any) -> list[int]:
    """Registers each file's descriptor form as the next version of ``<topic>-value``; their schema ids."""
    registry = SchemaRegistryClient({"url": url})
    return [registry.register_schema(f"{topic}-value", Schema(descriptor_form(f), "PROTOBUF")) for f in files]


def harness_of(
    folder: Path,
    east: str,
    url: str,
    session: Callable[[], Any] | None,
    spark_config: Mapping[str, Any] | None = None,
    **pipeline: Any,
) -> PipelineHarness:
    """A ``value: {format: protobuf}`` pipeline on east (with east's registry); its streams are set by the test."""
    return PipelineHarness(
        folder,
        clusters={"east": {"bootstrap_servers": east, "schema_registry": {"url": url}}},
        spark=session,
        spark_config=spark_config,
        value={"format": "protobuf"},
        **pipeline,
    )


def rows(path: Path) -> list[dict[str, Any]]:
    return list(DeltaTable(str(path)).to_pyarrow_table().to_pylist())


def test_two_protobuf_versions_land_once_with_the_union_schema(
    tmp_path: Path,
    kafka_clusters: dict[str, ClusterEndpoint],
    schema_registries: dict[str, LocalRegistry],
    spark_mode: Any,
) -> None:
    east, topic = new_topic(kafka_clusters)
    v1_file, v2_file = order_file(), order_file(with_note=True)
    v1, v2 = register(schema_registries["east"].url, topic, v1_file, v2_file)
    order_v1, order_v2 = message_class(v1_file, "shop.Order"), message_class(v2_file, "shop.Order")
    refund = message_class(v1_file, "shop.Refund")

    expected: dict[int, tuple[Any, ...]] = {}
    records = []
    for i in range(20):
        message = (order_v1 if i < 10 else order_v2)(id=i, tags=[f"t{i}"] * (i % 3), status=i % 2)
        message.customer.name = f"c{i}"
        message.customer.points = 2**64 - 1 - i
        message.counts["n"] = i
        if i >= 10:
            message.note = f"note {i}"
        records.append(Record(framed(v1 if i < 10 else v2, message)))
        expected[i] = (
            i,
            {"name": f"c{i}", "points": Decimal(2**64 - 1 - i)},
            [f"t{i}"] * (i % 3),
            "PAID" if i % 2 else "NEW",
            [("n", i)],
            f"note {i}" if i >= 10 else None,
            v1 if i < 10 else v2,
        )
    records += [
        Record(encode_header(v1) + b"\x00\xff\xff\xff"),  # offset 20: bytes that do not parse
        Record(framed(987_654, order_v1(id=99))),  # offset 21: unknown schema id
        Record(framed(v1, refund(amount=1.0), (1,))),  # offset 22: the file's second message
    ]
    produce(east, topic, records)

    harness = harness_of(tmp_path, east, schema_registries["east"].url, spark_mode.session, spark_mode.config)
    harness.set_streams({"orders": {"east": [topic]}})
    summary = harness.face().run()

    assert (summary.records, summary.dead_letters) == (23, 3)  # records read, dead letters included
    assert sorted((s.subject, s.version, s.records) for s in summary.schemas) == [
        (f"{topic}-value", 1, 10),
        (f"{topic}-value", 2, 10),
    ]
    landed = {
        r["offset"]: (r["id"], r["customer"], r["tags"], r["status"], r["counts"], r["note"], r["_schema_id"])
        for r in rows(harness.sink_path)
    }
    assert landed == expected
    dead = {r["offset"]: r["error"] for r in rows(tmp_path / "sink_dead_letter")}
    assert sorted(dead) == [20, 21, 22]
    assert dead[20].startswith(f"value is not valid Protobuf for schema id {v1}: bytes do not parse as shop.Order")
    assert dead[21].startswith("unknown schema id 987654")
    assert dead[22] == (
        f"value is not valid Protobuf for schema id {v1}: message indexes [1] name shop.Refund, "
        "not the stream's message shop.Order"
    )


def test_a_proto_text_schema_is_refused_before_anything_is_written(
    tmp_path: Path, kafka_clusters: dict[str, ClusterEndpoint], schema_registries: dict[str, LocalRegistry]
) -> None:
    east, topic = new_topic(kafka_clusters)
    text = 'syntax = "proto3";\npackage shop;\nmessage Order { int64 id = 1; }\n'  # what Java serializers register
    registry = SchemaRegistryClient({"url": schema_registries["east"].url})
    schema_id = registry.register_schema(f"{topic}-value", Schema(text, "PROTOBUF"))
    produce(east, topic, [Record(encode_header(schema_id) + b"\x00\x08\x01")])
    harness = harness_of(tmp_path, east, schema_registries["east"].url, None)
    harness.set_streams({"orders": {"east": [topic]}})

    with pytest.raises(ConfigError) as refused:
        harness.face().run()

    assert f"stream 'orders': subject '{topic}-value' version 1 is not a base64 serialized" in str(refused.value)
    assert "Register the schema in descriptor form" in str(refused.value)
    assert not (tmp_path / "sink").exists()
    assert not (tmp_path / "sink_dead_letter").exists()


def assert_nothing_written(harness: PipelineHarness) -> None:
    """No commit in the sink or the dead-letter table, and the failed run is still only planned (no offsets)."""
    # Delta may leave an empty _delta_log/_staged_commits folder behind, never a commit file.
    assert not list(harness.folder.glob("sink/_delta_log/*.json"))
    assert not list(harness.folder.glob("sink_dead_letter/_delta_log/*.json"))
    status = harness.face().status()
    assert status.last_run_status == "planned"
    assert not status.partitions


def test_a_field_changing_its_type_between_protobuf_versions_fails_the_run_with_nothing_written(
    tmp_path: Path,
    kafka_clusters: dict[str, ClusterEndpoint],
    schema_registries: dict[str, LocalRegistry],
    spark: Any,
) -> None:
    east, topic = new_topic(kafka_clusters)
    v1_file, v2_file = order_file(), order_file()
    v2_file.message_type[0].field[0].type = _ID_AS_STRING  # Order.id: int64 -> string (the registry's rule: NONE)
    v1, v2 = register(schema_registries["east"].url, topic, v1_file, v2_file)
    order_v1, order_v2 = message_class(v1_file, "shop.Order"), message_class(v2_file, "shop.Order")
    produce(east, topic, [Record(framed(v1, order_v1(id=1))), Record(framed(v2, order_v2(id="x")))])
    harness = harness_of(tmp_path, east, schema_registries["east"].url, lambda: spark)
    harness.set_streams({"orders": {"east": [topic]}})

    with pytest.raises(SchemaIncompatibleError) as refused:
        harness.face().run()

    message = str(refused.value)
    assert "stream 'orders'" in message
    assert f"subject '{topic}-value'" in message
    assert f"version 1 (id {v1}) cannot be read as the latest version 2" in message
    assert "field id" in message
    assert_nothing_written(harness)


def test_on_decode_error_fail_names_the_undecodable_protobuf_record_with_nothing_written(
    tmp_path: Path,
    kafka_clusters: dict[str, ClusterEndpoint],
    schema_registries: dict[str, LocalRegistry],
    spark: Any,
) -> None:
    east, topic = new_topic(kafka_clusters)
    v1_file = order_file()
    (v1,) = register(schema_registries["east"].url, topic, v1_file)
    order = message_class(v1_file, "shop.Order")
    sent = produce(
        east,
        topic,
        [
            Record(framed(v1, order(id=1))),
            Record(encode_header(v1) + b"\x00\xff\xff\xff"),  # bytes that do not parse
            Record(framed(v1, order(id=3))),
        ],
    )
    harness = harness_of(tmp_path, east, schema_registries["east"].url, lambda: spark, on_decode_error="fail")
    harness.set_streams({"orders": {"east": [topic]}})

    with pytest.raises(UndecodableRecordError) as refused:
        harness.face().run()

    error = refused.value
    assert (error.cluster_id, error.topic, error.partition, error.offset) == (
        "east",
        topic,
        sent[1].partition,
        sent[1].offset,
    )
    assert f"east/{topic}[{sent[1].partition}] offset {sent[1].offset}" in str(error)
    assert error.reason.startswith(f"value is not valid Protobuf for schema id {v1}: bytes do not parse as shop.Order")
    assert_nothing_written(harness)
