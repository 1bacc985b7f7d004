"""Registry-encoded values through the CLI, on real clusters with real Schema Registries (Apicurio, ccompat API).

One pipeline lands, in one run: an Avro stream on two clusters, each with its own registry (east holds two
versions, the second adds a field with a default), a JSON Schema stream, a fixed-schema Avro topic (no registry),
and two undecodable records (a bad magic byte, an unknown schema id) into the dead-letter table. Then: an
incompatible version is refused with nothing written, and a registry that is down fails the run, retriable,
before anything is written. Keys under ``key: {format: avro}`` land as a ``key`` struct, bad keys as dead letters.
The registry password (a ``${env:...}`` reference) appears in no output.
"""

from __future__ import annotations

import io
import json
from typing import TYPE_CHECKING, Any

import fastavro
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from deltalake import DeltaTable

from devtools.testing.clusters import distinct_free_ports
from devtools.testing.kafka import Record, create_topic, produce, unique_name
from devtools.testing.pipeline import PipelineHarness
from dynamic_kafka.errors import ConfigError, SchemaIncompatibleError
from dynamic_kafka.registry import encode_header

if TYPE_CHECKING:
    from pathlib import Path

    from devtools.local_kafka import ClusterEndpoint
    from devtools.local_registry import LocalRegistry

pytestmark = pytest.mark.integration

PASSWORD_VAR = "DYNAMIC_KAFKA_TEST_REGISTRY_PASSWORD"
PASSWORD = "sr-pw-never-shown-4711"

ORDER_V1 = {
    "type": "record",
    "name": "Order",
    "fields": [{"name": "id", "type": "long"}, {"name": "amount", "type": "double"}],
}
ORDER_V2 = {**ORDER_V1, "fields": [*ORDER_V1["fields"], {"name": "note", "type": ["null", "string"], "default": None}]}
ORDER_BAD = {**ORDER_V1, "fields": [{"name": "id", "type": "string"}, {"name": "amount", "type": "double"}]}
CLICK = {"type": "object", "properties": {"user": {"type": "string"}, "n": {"type": "integer"}}}
KEY_V1 = {"type": "record", "name": "OrderKey", "fields": [{"name": "region", "type": "string"}]}
KEY_V2 = {**KEY_V1, "fields": [*KEY_V1["fields"], {"name": "shard", "type": "int", "default": 0}]}
ITEM = {"type": "record", "name": "Item", "fields": [{"name": "sku", "type": "string"}, {"name": "qty", "type": "int"}]}


def avro(schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def register(registry: LocalRegistry, subject: str, schema: dict[str, Any], kind: str = "AVRO") -> int:
    return int(SchemaRegistryClient({"url": registry.url}).register_schema(subject, Schema(json.dumps(schema), kind)))


def rows(path: Path) -> list[dict[str, Any]]:
    return list(DeltaTable(str(path)).to_pyarrow_table().to_pylist())


def test_avro_json_schema_and_fixed_avro_land_in_one_table(
    tmp_path: Path, kafka_clusters: dict[str, ClusterEndpoint], schema_registries: dict[str, LocalRegistry]
) -> None:
    east, west = kafka_clusters["east"].bootstrap_servers, kafka_clusters["west"].bootstrap_servers
    orders_e, orders_w, clicks, items = (unique_name(p) for p in ("orders", "orders", "clicks", "items"))
    for client, topic in ((east, orders_e), (west, orders_w), (east, clicks), (east, items)):
        create_topic(client, topic)
    v1 = register(schema_registries["east"], f"{orders_e}-value", ORDER_V1)
    v2 = register(schema_registries["east"], f"{orders_e}-value", ORDER_V2)
    w1 = register(schema_registries["west"], f"{orders_w}-value", ORDER_V1)
    c1 = register(schema_registries["east"], f"{clicks}-value", CLICK, "JSON")
    produce(
        east,
        orders_e,
        [
            Record(encode_header(v1) + avro(ORDER_V1, {"id": 1, "amount": 1.5})),
            Record(encode_header(v2) + avro(ORDER_V2, {"id": 2, "amount": 2.5, "note": "gift"})),
            Record(b"\x01" + encode_header(v1)[1:] + avro(ORDER_V1, {"id": 3, "amount": 3.5})),  # bad magic byte
            Record(encode_header(987_654) + avro(ORDER_V1, {"id": 4, "amount": 4.5})),  # unknown schema id
        ],
    )
    produce(west, orders_w, [Record(encode_header(w1) + avro(ORDER_V1, {"id": 10, "amount": 10.0}))])
    produce(east, clicks, [Record(encode_header(c1) + json.dumps({"user": "ann", "n": 7}).encode())])
    produce(east, items, [Record(avro(ITEM, {"sku": "A-1", "qty": 3}))])
    (tmp_path / "item.avsc").write_text(json.dumps(ITEM))

    harness = PipelineHarness(
        tmp_path,
        clusters={
            "east": {
                "bootstrap_servers": east,
                "schema_registry": {
                    "url": schema_registries["east"].url,
                    "username": "svc",
                    "password": f"${{env:{PASSWORD_VAR}}}",
                },
            },
            "west": {"bootstrap_servers": west, "schema_registry": {"url": schema_registries["west"].url}},
        },
        streams=["orders", "clicks", "items"],
        value={"format": "avro"},
        formats={
            "clicks": {"format": "json_schema"},
            "items": {"format": "avro", "schema_file": "item.avsc"},
        },
    )
    harness.set_streams({"orders": {"east": [orders_e], "west": [orders_w]}, "clicks": {"east": [clicks]},
                         "items": {"east": [items]}})  # fmt: skip
    done = harness.cli("-v", "run", "--json", env={PASSWORD_VAR: PASSWORD}, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert (summary["records"], summary["dead_letters"]) == (7, 2)
    assert sorted((s["cluster_id"], s["subject"], s["version"], s["records"]) for s in summary["schemas"]) == [
        ("east", f"{clicks}-value", 1, 1),
        ("east", f"{orders_e}-value", 1, 1),
        ("east", f"{orders_e}-value", 2, 1),
        ("west", f"{orders_w}-value", 1, 1),
    ]

    landed = {(r["cluster"], r["topic"], r["offset"]): r for r in rows(harness.sink_path)}
    assert "value" not in next(iter(landed.values()))
    picked = {k: (r["id"], r["amount"], r["note"], r["user"], r["n"], r["sku"], r["qty"]) for k, r in landed.items()}
    assert picked == {
        ("east", orders_e, 0): (1, 1.5, None, None, None, None, None),  # v1 read as v2: note from its default
        ("east", orders_e, 1): (2, 2.5, "gift", None, None, None, None),
        ("west", orders_w, 0): (10, 10.0, None, None, None, None, None),
        ("east", clicks, 0): (None, None, None, "ann", 7, None, None),
        ("east", items, 0): (None, None, None, None, None, "A-1", 3),
    }
    assert landed[("east", orders_e, 1)]["_schema_id"] == v2
    dead = sorted((r["offset"], r["error"]) for r in rows(tmp_path / "sink_dead_letter"))
    assert dead[0][0] == 2
    assert dead[0][1].startswith("value does not start with the Schema Registry magic byte 0 (found 0x01)")
    assert dead[1][0] == 3
    assert dead[1][1].startswith("unknown schema id 987654")

    outputs = done.stdout + done.stderr + json.dumps(rows(tmp_path / "sink_state"), default=str)
    assert PASSWORD not in outputs
    assert schema_registries["east"].url not in done.stdout  # the summary names subjects, never registries


@pytest.fixture
def east_topic(kafka_clusters: dict[str, ClusterEndpoint]) -> tuple[str, str]:
    """The east cluster's bootstrap servers and a new topic there."""
    east = kafka_clusters["east"].bootstrap_servers
    topic = unique_name("orders")
    create_topic(east, topic)
    return east, topic


def in_process(tmp_path: Path, east: str, topic: str, spark: Any, **pipeline: Any) -> PipelineHarness:
    """A pipeline over ``topic`` on the session's Spark (a CLI process would start a driver JVM of its own)."""
    harness = PipelineHarness(tmp_path, clusters={"east": {"bootstrap_servers": east}}, spark=lambda: spark, **pipeline)
    harness.set_streams({"orders": {"east": [topic]}})
    return harness


def test_an_incompatible_version_is_refused_with_nothing_written(
    tmp_path: Path, east_topic: tuple[str, str], schema_registries: dict[str, LocalRegistry], spark: Any
) -> None:
    east, topic = east_topic
    registry = schema_registries["east"]
    v1 = register(registry, f"{topic}-value", ORDER_V1)
    v2 = register(registry, f"{topic}-value", ORDER_BAD)  # id: long -> string (Apicurio's default rule is NONE)
    produce(
        east,
        topic,
        [
            Record(encode_header(v1) + avro(ORDER_V1, {"id": 1, "amount": 1.0})),
            Record(encode_header(v2) + avro(ORDER_BAD, {"id": "x", "amount": 2.0})),
        ],
    )
    # In process: the refusal is the library's error; how the CLI prints errors is the business of the CLI tests.
    harness = in_process(tmp_path, east, topic, spark, value={"format": "avro"}, schema_registry={"url": registry.url})
    with pytest.raises(SchemaIncompatibleError) as refused:
        harness.face().run()
    message = str(refused.value)
    assert "incompatible schema change" in message
    assert f"subject '{topic}-value'" in message
    assert "version 1" in message
    assert "version 2" in message
    # No commit in either table (Delta may leave an empty _delta_log/_staged_commits folder behind).
    assert not list(tmp_path.glob("sink_dead_letter/_delta_log/*.json"))
    assert not list(tmp_path.glob("sink/_delta_log/*.json"))


def test_a_registry_that_is_down_fails_the_run_before_anything_is_written(
    tmp_path: Path, kafka_clusters: dict[str, ClusterEndpoint]
) -> None:
    east = kafka_clusters["east"].bootstrap_servers
    topic = unique_name("orders")
    create_topic(east, topic)
    produce(east, topic, [Record(encode_header(1) + avro(ORDER_V1, {"id": 1, "amount": 1.0}))])
    (port,) = distinct_free_ports(1)
    harness = PipelineHarness(
        tmp_path,
        clusters={"east": {"bootstrap_servers": east}},
        value={"format": "avro"},
        schema_registry={"url": f"http://127.0.0.1:{port}", "username": "svc", "password": f"${{env:{PASSWORD_VAR}}}"},
    )
    harness.set_streams({"orders": {"east": [topic]}})
    done = harness.cli("run", env={PASSWORD_VAR: PASSWORD})
    assert done.returncode != 0
    assert "the registry is unreachable" in done.stderr
    assert "nothing was written" in done.stderr
    assert PASSWORD not in done.stdout + done.stderr
    assert not (tmp_path / "sink").exists()
    # Nothing planned either: the next run starts from a clean state.
    assert not (tmp_path / "sink_state").exists() or DeltaTable(str(tmp_path / "sink_state")).version() == 0


def test_avro_keys_land_as_a_struct_and_bad_keys_are_dead_letters(
    tmp_path: Path, east_topic: tuple[str, str], schema_registries: dict[str, LocalRegistry], spark: Any
) -> None:
    """``key: {format: avro}`` decodes keys with the ``<topic>-key`` subject into a ``key`` struct; a key that does not
    decode is a dead letter with its reason, and a null key stays null."""
    east, topic = east_topic
    registry = schema_registries["east"]
    k1 = register(registry, f"{topic}-key", KEY_V1)
    k2 = register(registry, f"{topic}-key", KEY_V2)
    v1 = register(registry, f"{topic}-value", ORDER_V1)

    def value(n: int) -> bytes:
        return encode_header(v1) + avro(ORDER_V1, {"id": n, "amount": 1.0})

    produce(
        east,
        topic,
        [
            Record(value(0), key=encode_header(k1) + avro(KEY_V1, {"region": "eu"})),
            Record(value(1), key=encode_header(k2) + avro(KEY_V2, {"region": "us", "shard": 3})),
            Record(value(2), key=None),
            Record(value(3), key=b"\x07" + encode_header(k1)[1:] + avro(KEY_V1, {"region": "eu"})),
            Record(value(4), key=encode_header(v1) + avro(ORDER_V1, {"id": 4, "amount": 1.0})),  # the value's id
        ],
    )
    harness = in_process(
        tmp_path,
        east,
        topic,
        spark,
        value={"format": "avro"},
        key={"format": "avro"},
        schema_registry={"url": registry.url},
    )
    harness.face().run()

    landed = {r["offset"]: (r["key"], r["id"]) for r in rows(harness.sink_path)}
    assert landed == {
        0: ({"region": "eu", "shard": 0}, 0),  # version 1 read as version 2: shard from its default
        1: ({"region": "us", "shard": 3}, 1),
        2: (None, 2),
    }
    dead = {r["offset"]: (r["error"], r["key"]) for r in rows(tmp_path / "sink_dead_letter")}
    assert sorted(dead) == [3, 4]
    assert dead[3][0].startswith("key does not start with the Schema Registry magic byte 0 (found 0x07)")
    assert dead[4][0].startswith(f"unknown schema id {v1}: not a version of subject {topic}-key")
    assert dead[3][1] == b"\x07" + encode_header(k1)[1:] + avro(KEY_V1, {"region": "eu"})


def test_topics_whose_keys_decode_to_different_types_are_refused_with_nothing_written(
    tmp_path: Path, east_topic: tuple[str, str], schema_registries: dict[str, LocalRegistry], spark: Any
) -> None:
    east, topic = east_topic
    other = unique_name("orders")
    create_topic(east, other)
    registry = schema_registries["east"]
    k1 = register(registry, f"{topic}-key", KEY_V1)
    o1 = register(registry, f"{other}-key", ORDER_V1)
    produce(east, topic, [Record(b"a", key=encode_header(k1) + avro(KEY_V1, {"region": "eu"}))])
    produce(east, other, [Record(b"b", key=encode_header(o1) + avro(ORDER_V1, {"id": 1, "amount": 1.0}))])
    harness = in_process(tmp_path, east, topic, spark, key={"format": "avro"}, schema_registry={"url": registry.url})
    harness.set_streams({"orders": {"east": [topic, other]}})

    with pytest.raises(ConfigError, match="the keys of one pipeline decode to different types") as refused:
        harness.face().run()

    assert f"{topic}-key" in str(refused.value)
    assert f"{other}-key" in str(refused.value)
    assert not list(tmp_path.glob("sink_dead_letter/_delta_log/*.json"))
    assert not list(tmp_path.glob("sink/_delta_log/*.json"))


def test_record_name_strategies_fetch_the_subjects_confluents_serializers_register(
    tmp_path: Path, east_topic: tuple[str, str], schema_registries: dict[str, LocalRegistry], spark: Any
) -> None:
    """Values under TopicRecordNameStrategy (``<topic>-<record>``), keys under RecordNameStrategy (``<record>``):
    the subjects named by config are fetched; the TopicNameStrategy subjects, holding other schemas, are not."""
    east, topic = east_topic
    registry = schema_registries["east"]
    # A record subject is the registry's, shared by every topic: a name no other test registers.
    key_name = f"acme.OrderKey{unique_name('k').split('-')[1]}"
    key_schema = {**KEY_V1, "name": key_name}
    k1 = register(registry, key_name, key_schema)
    v1 = register(registry, f"{topic}-acme.Order", {**ORDER_V1, "name": "acme.Order"})
    register(registry, f"{topic}-value", ITEM)  # what the default strategy would read: not these records
    produce(
        east,
        topic,
        [
            Record(
                encode_header(v1) + avro(ORDER_V1, {"id": 7, "amount": 2.5}),
                key=encode_header(k1) + avro(key_schema, {"region": "eu"}),
            )
        ],
    )
    harness = in_process(
        tmp_path,
        east,
        topic,
        spark,
        value={"format": "avro", "subject_name_strategy": "topic_record", "record_name": "acme.Order"},
        key={"format": "avro", "subject_name_strategy": "record", "record_name": key_name},
        schema_registry={"url": registry.url},
    )
    harness.face().run()

    assert [(r["key"], r["id"], r["amount"]) for r in rows(harness.sink_path)] == [({"region": "eu"}, 7, 2.5)]
    dead_letters = tmp_path / "sink_dead_letter"
    assert not dead_letters.exists() or rows(dead_letters) == []
