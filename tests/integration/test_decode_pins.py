"""A decode input changed between a crash and its recovery (issue 24, item 4), on real Kafka, Spark, Delta and
Schema Registry: a record is never in neither table nor in both.

Each run is killed between its dead-letter commit and its sink commit (the crash point ``after_dead_letter``),
where the recovery must keep the verdicts the dead-letter table already holds: it skips that append (Delta holds
its transaction) and lands the rest in the sink. A decode input changed meanwhile would move records between the
verdicts, and so lose them. The kill is simulated in this process (an exception no ``except Exception`` catches,
raised at the crash point; the clock then jumps past the killed run's lease, as it would have expired before a
real restart), so the crash costs no new JVM.

- ``json_strict`` flipped: the recovery is refused naming ``json_strict``; restored, every record lands once;
- an Avro ``schema_file`` edited: refused naming the file; restored, every record lands once;
- the registry subject changed (a new version registered, the planned one soft-deleted): the recovery decodes
  with the schema ids its plan pinned, fetched by id, and lands the record the new latest would have lost.
"""

from __future__ import annotations

import io
import json
from typing import TYPE_CHECKING, Any

import fastavro
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError
from test_registry_formats import KEY_V1, KEY_V2, ORDER_V1, ORDER_V2, register

from devtools.testing.kafka import Record, create_topic, produce, unique_name
from devtools.testing.pipeline import PipelineHarness
from dynamic_kafka.errors import ConfigError
from dynamic_kafka.registry import encode_header
from dynamic_kafka.sink import committed_txn_version
from dynamic_kafka.sink import incremental as incremental_module
from tests.support.clock import past_the_planned_runs_lease

if TYPE_CHECKING:
    from pathlib import Path

    from devtools.local_kafka import ClusterEndpoint
    from devtools.local_registry import LocalRegistry

pytestmark = pytest.mark.integration

ITEM = {"type": "record", "name": "Item", "fields": [{"name": "sku", "type": "string"}, {"name": "qty", "type": "int"}]}


class Killed(BaseException):
    """A simulated ``kill -9`` at a crash point."""


def run_killed_at(harness: PipelineHarness, point: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs the pipeline, killed at ``point``; afterwards the clock is past the killed run's lease."""

    def die(name: str) -> None:
        if name == point:
            raise Killed(name)

    with monkeypatch.context() as patched:
        patched.setattr(incremental_module, "crash_point", die)
        with pytest.raises(Killed):
            harness.runner().run()
    past_the_planned_runs_lease(monkeypatch, harness.runner().store)


def offsets(table: Path) -> list[int]:
    """The offsets of a Delta table's rows, sorted, duplicates kept; empty when the table does not exist."""
    try:
        found = DeltaTable(str(table))
    except TableNotFoundError:
        return []
    return sorted(found.to_pyarrow_table(columns=["offset"]).column("offset").to_pylist())


def avro(schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def killed_between_the_two_commits(
    kafka_clusters: dict[str, ClusterEndpoint],
    spark: Any,
    folder: Path,
    monkeypatch: pytest.MonkeyPatch,
    values: list[bytes],
    **pipeline: Any,
) -> PipelineHarness:
    """Pipeline ``p`` over a fresh one-partition topic holding ``values``; its first run killed after its dead-letter
    commit."""
    servers = kafka_clusters["east"].bootstrap_servers
    topic = unique_name("pinned")
    create_topic(servers, topic, 1)
    harness = PipelineHarness(folder, clusters={"east": servers}, spark=lambda: spark, **pipeline)
    harness.set_streams({"orders": {"east": [topic]}})
    produce(servers, topic, [Record(v) for v in values])
    run_killed_at(harness, "after_dead_letter", monkeypatch)
    return harness


def assert_refused_with_nothing_written(harness: PipelineHarness, changed: str, dead_letters: list[int]) -> None:
    with pytest.raises(ConfigError, match=rf"run 1 was planned \(and crashed\) with other settings .*{changed}"):
        harness.face().run()
    assert committed_txn_version(harness.sink_path, "p") is None
    assert offsets(harness.sink_path) == []
    assert offsets(harness.folder / "sink_dead_letter") == dead_letters
    state = harness.runner().store.load()
    assert state.last_run is not None
    assert (state.last_run.run_seq, state.last_run.status) == (1, "planned")


def test_json_strict_flipped_under_a_crashed_run_is_refused_and_restored_lands_every_record_once(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = killed_between_the_two_commits(
        kafka_clusters,
        spark,
        tmp_path,
        monkeypatch,
        [b'{"id": 1, "extra": 1}', b'{"id": 2}', b"not json"],
        value={"format": "json", "schema": "id INT"},
    )
    assert offsets(tmp_path / "sink_dead_letter") == [2]

    harness.configure(json_strict=True)  # offset 0 would now be a dead letter, whose transaction is in already
    assert_refused_with_nothing_written(harness, "json_strict changed", dead_letters=[2])

    harness.configure(json_strict=False)
    summary = harness.face().run()

    assert (summary.recovered_run_seq, summary.status) == (1, "empty")
    assert offsets(harness.sink_path) == [0, 1]
    assert offsets(tmp_path / "sink_dead_letter") == [2]
    harness.configure(json_strict=True)  # with the run finished, the setting applies to the next ones
    assert harness.face().run().status == "empty"


def test_an_avro_schema_file_edited_under_a_crashed_run_is_refused_and_restored_lands_every_record_once(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    schema_file = tmp_path / "item.avsc"
    schema_file.write_text(json.dumps(ITEM))
    truncated = b"\x08A-"  # a 4-character sku cut after 2 bytes
    harness = killed_between_the_two_commits(
        kafka_clusters,
        spark,
        tmp_path,
        monkeypatch,
        [avro(ITEM, {"sku": "A-1", "qty": 3}), truncated],
        value={"format": "avro", "schema_file": "item.avsc"},
    )
    assert offsets(tmp_path / "sink_dead_letter") == [1]

    # A field without a default: offset 0, written without it, would no longer decode.
    schema_file.write_text(json.dumps({**ITEM, "fields": [*ITEM["fields"], {"name": "price", "type": "double"}]}))
    assert_refused_with_nothing_written(harness, "the contents of schema_file .*item.avsc", dead_letters=[1])

    schema_file.write_text(json.dumps(ITEM, indent=2))  # the same schema, but not the same bytes: still refused
    assert_refused_with_nothing_written(harness, "the contents of schema_file", dead_letters=[1])

    schema_file.write_text(json.dumps(ITEM))
    summary = harness.face().run()

    assert (summary.recovered_run_seq, summary.status) == (1, "empty")
    assert offsets(harness.sink_path) == [0]
    assert offsets(tmp_path / "sink_dead_letter") == [1]


def registry_pipeline(
    kafka_clusters: dict[str, ClusterEndpoint], registry: LocalRegistry, spark: Any, folder: Path, **pipeline: Any
) -> tuple[str, str, PipelineHarness]:
    """The east cluster's servers, a fresh one-partition topic there and a pipeline over it with ``registry``."""
    servers = kafka_clusters["east"].bootstrap_servers
    topic = unique_name("pinned")
    create_topic(servers, topic, 1)
    clusters = {"east": {"bootstrap_servers": servers, "schema_registry": {"url": registry.url}}}
    harness = PipelineHarness(folder, clusters=clusters, spark=lambda: spark, **pipeline)
    harness.set_streams({"orders": {"east": [topic]}})
    return servers, topic, harness


def test_a_recovery_decodes_with_the_pinned_schema_ids_after_a_new_version_and_a_soft_delete(
    kafka_clusters: dict[str, ClusterEndpoint],
    schema_registries: dict[str, LocalRegistry],
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    registry = schema_registries["east"]
    servers, topic, harness = registry_pipeline(kafka_clusters, registry, spark, tmp_path, value={"format": "avro"})
    subject = f"{topic}-value"
    v1 = register(registry, subject, ORDER_V1)
    bad_magic = b"\x01" + encode_header(v1)[1:] + avro(ORDER_V1, {"id": 2, "amount": 2.5})
    produce(servers, topic, [Record(encode_header(v1) + avro(ORDER_V1, {"id": 1, "amount": 1.5})), Record(bad_magic)])
    run_killed_at(harness, "after_dead_letter", monkeypatch)
    assert offsets(tmp_path / "sink_dead_letter") == [1]

    client = SchemaRegistryClient({"url": registry.url})
    v2 = register(registry, subject, ORDER_V2)
    client.delete_version(subject, 1)  # soft delete: the subject lists version 2 only, id v1 still resolves
    assert client.get_versions(subject) == [2]
    assert v2 != v1

    summary = harness.face().run()

    assert (summary.recovered_run_seq, summary.status) == (1, "empty")
    landed = DeltaTable(str(harness.sink_path)).to_pyarrow_table().to_pylist()
    assert [(r["offset"], r["id"], r["amount"], r["_schema_id"]) for r in landed] == [(0, 1, 1.5, v1)]
    assert "note" not in landed[0], "decoded with the planned reader (version 1), not today's latest"
    assert offsets(tmp_path / "sink_dead_letter") == [1]


def test_a_recovery_decodes_keys_with_the_pinned_key_schema_ids(
    kafka_clusters: dict[str, ClusterEndpoint],
    schema_registries: dict[str, LocalRegistry],
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    registry = schema_registries["east"]
    servers, topic, harness = registry_pipeline(
        kafka_clusters, registry, spark, tmp_path, key={"format": "avro"}, value={"format": "string"}
    )
    k1 = register(registry, f"{topic}-key", KEY_V1)
    key = encode_header(k1) + avro(KEY_V1, {"region": "eu"})
    produce(servers, topic, [Record(b"a", key=key), Record(b"b", key=b"\x01" + key[1:])])
    run_killed_at(harness, "after_dead_letter", monkeypatch)
    assert offsets(tmp_path / "sink_dead_letter") == [1]

    register(registry, f"{topic}-key", KEY_V2)
    SchemaRegistryClient({"url": registry.url}).delete_version(f"{topic}-key", 1)  # k1 is no listed version now

    summary = harness.face().run()

    assert (summary.recovered_run_seq, summary.status) == (1, "empty")
    landed = DeltaTable(str(harness.sink_path)).to_pyarrow_table().to_pylist()
    assert [(r["offset"], r["key"], r["value"]) for r in landed] == [(0, {"region": "eu"}, "a")]
    assert offsets(tmp_path / "sink_dead_letter") == [1]
