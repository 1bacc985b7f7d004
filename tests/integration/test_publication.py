"""Publications on the session's real brokers: every row of a Delta table once to a ``read_committed`` reader,
across kill -9 at each step, a fenced zombie, and a move of the write cluster.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from devtools.testing.pipeline import PipelineHarness
from dynamic_kafka.errors import PublicationError
from tests.support.publication import PublicationWorld

if TYPE_CHECKING:
    from pathlib import Path

    from devtools.local_kafka import ClusterEndpoint, LocalCluster
    from devtools.local_registry import LocalRegistry

pytestmark = pytest.mark.integration


@pytest.fixture
def world(tmp_path: Path, kafka_clusters: dict[str, ClusterEndpoint]) -> PublicationWorld:
    return PublicationWorld(tmp_path, {name: c.bootstrap_servers for name, c in kafka_clusters.items()})


def test_each_version_is_published_once_with_its_key_headers_and_timestamp(world: PublicationWorld) -> None:
    first = world.append(4) + world.append(3)
    outcome = world.publication().publish()
    assert (outcome.records, outcome.transactions, outcome.next_version) == (7, 1, 2)
    assert world.publication().publish().records == 0
    second = world.append(2)
    assert world.publication().publish().first_version == 2

    assert world.ids("east") == first + second
    key, value, headers = next(r for r in world.read("east") if json.loads(r[1] or b"")["id"] == 5)
    assert key == b"n0"
    assert json.loads(value or b"") == {"id": 5, "name": "n0", "ts": "2026-01-01T00:00:00+00:00"}
    assert headers == {"dynamic-kafka.table": str(world.table).encode(), "dynamic-kafka.version": b"1"}


@pytest.mark.parametrize("point", ["publish_before_transaction", "publish_in_transaction", "publish_after_commit"])
def test_a_run_killed_at_each_step_leaves_every_row_once_after_the_next_run(
    tmp_path: Path, kafka_clusters: dict[str, ClusterEndpoint], point: str
) -> None:
    # Each version a transaction of its own, so a kill after the first commit leaves a second one to do.
    world = PublicationWorld(tmp_path, {"east": kafka_clusters["east"].bootstrap_servers}, max_rows_per_transaction=5)
    ids = world.append(5) + world.append(4)
    killed = world.cli("publish", env={"DYNAMIC_KAFKA_FAULT": point})
    assert killed.returncode == -9, killed.stderr
    world.publication().publish()
    assert world.ids("east") == ids
    status = world.publication().status()
    assert (status.last_published_version, status.rows_behind) == (1, 0)


def test_an_older_producer_is_fenced_and_its_records_never_seen(world: PublicationWorld) -> None:
    from dynamic_kafka.errors import KafkaClientError
    from dynamic_kafka.kafka.transactions import TransactionalProducer, is_fenced
    from dynamic_kafka.metadata.models import ClusterMetadata

    ids = world.append(3)
    config = world.publication().config
    zombie = TransactionalProducer(
        ClusterMetadata(cluster_id="east", bootstrap_servers=world.bootstrap["east"]),
        transactional_id=config.transactional_id("east"),
        transaction_timeout_ms=60_000,
        group_id=config.progress_group_id,
        topic=world.topics["east"],
        timeout_s=20,
    )
    zombie.start()
    zombie.begin()
    zombie.send([(b"z", b'{"id": -1}', None, [])])
    world.publication().publish()
    with pytest.raises(KafkaClientError) as raised:
        zombie.commit(99, "zombie")
    zombie.close()
    assert is_fenced(raised.value), raised.value.kafka_error
    assert world.ids("east") == ids
    assert world.publication().status().last_published_version == 0


def test_a_move_of_the_write_cluster_publishes_nothing_twice_and_skips_nothing(world: PublicationWorld) -> None:
    on_east = world.append(3)
    world.publication().publish()
    world.place("west")
    on_west = world.append(2)
    plan = world.publication().plan()
    assert (plan.cluster_id, plan.next_version, plan.moves_to_cluster) == ("west", 1, True)
    assert world.publication().publish().moved
    world.place("east")
    back_on_east = world.append(4)
    world.publication().publish()

    assert world.ids("east") == on_east + back_on_east
    assert world.ids("west") == on_west
    moves = [(m.cluster_id, m.start_version) for m in world.publication().status().moves]
    assert moves == [("east", 0), ("west", 1), ("east", 2)]


def test_a_stream_on_two_clusters_is_refused_naming_them(world: PublicationWorld) -> None:
    world.append(1)
    (world.folder / "metadata.yaml").write_text(
        json.dumps(
            {
                "clusters": {name: {"bootstrap_servers": s} for name, s in world.bootstrap.items()},
                "streams": {"out": {name: [world.topics[name]] for name in world.bootstrap}},
            }
        )
    )
    with pytest.raises(PublicationError) as raised:
        world.publication().publish()
    assert "east: " in str(raised.value)
    assert "west: " in str(raised.value)
    assert raised.value.attributes()["publication_id"] == "out"
    assert world.ids("east") == []


def test_the_projects_own_pipeline_reads_back_exactly_the_rows_after_a_killed_run(
    world: PublicationWorld, spark: Any
) -> None:
    ids = world.append(4)
    assert world.cli("publish", env={"DYNAMIC_KAFKA_FAULT": "publish_in_transaction"}).returncode == -9
    ids += world.append(3)
    assert world.cli("publish").returncode == 0

    reader = PipelineHarness(
        world.folder / "reader",
        clusters={"east": world.bootstrap["east"]},
        spark=lambda: spark,
        value={"format": "string"},
    )
    reader.set_streams({"orders": {"east": [world.topics["east"]]}})
    expected = [
        json.dumps({"id": i, "name": f"n{i % 5}", "ts": "2026-01-01T00:00:00+00:00"}, separators=(",", ":")).encode()
        for i in ids
    ]
    # A transaction's commit returns once the coordinator has logged it; its markers reach the partitions just
    # after, and until then a read_committed reader's last stable offset stops before them. A run planned in that
    # moment leaves those records to the next run (seen: 2 of 7 in the suite), so the reader runs until it is
    # caught up; a duplicate or a lost record still fails the comparison.
    deadline = time.monotonic() + 30
    while True:
        assert reader.face().run().status in ("committed", "empty")
        if len(reader.sink_values()) >= len(expected) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert reader.sink_values() == sorted(expected)


ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": "string"},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    ],
}


def test_avro_values_from_the_driver_and_from_spark_tasks_are_read_back_exactly_by_a_pipeline_after_a_killed_run(
    tmp_path: Path, kafka_clusters: dict[str, ClusterEndpoint], schema_registries: dict[str, LocalRegistry], spark: Any
) -> None:
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
    from deltalake import DeltaTable

    registry = schema_registries["east"].url
    east = kafka_clusters["east"].bootstrap_servers
    world = PublicationWorld(tmp_path, {"east": east}, registries={"east": registry}, value={"format": "avro"})
    ids = world.append(4)
    with pytest.raises(PublicationError, match="has no version on the registry") as raised:
        world.publication().plan()
    assert raised.value.hint is not None
    assert "Register the schema" in raised.value.hint
    SchemaRegistryClient({"url": registry}).register_schema(f"{world.topics['east']}-value", Schema(json.dumps(ORDER)))
    assert world.cli("publish", env={"DYNAMIC_KAFKA_FAULT": "publish_in_transaction"}).returncode == -9
    ids += world.append(3)
    assert world.cli("publish").returncode == 0
    # A large run's rows are encoded by Spark's tasks, with the same registry schema as the driver's.
    config = yaml.safe_load(world.config_path.read_text())
    config["publications"][0]["executor_rows"] = 0
    world.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    ids += world.append(2)
    assert world.publication().publish().records == 2

    reader = PipelineHarness(
        tmp_path / "reader",
        clusters={"east": {"bootstrap_servers": east, "schema_registry": {"url": registry}}},
        spark=lambda: spark,
        value={"format": "avro"},
    )
    reader.set_streams({"orders": {"east": [world.topics["east"]]}})
    deadline = None  # until the reader is past the last transaction's markers (see above)
    while True:
        assert reader.face().run().status in ("committed", "empty")
        rows = DeltaTable(str(reader.sink_path)).to_pyarrow_table(columns=["id", "name", "ts"]).to_pylist()
        deadline = deadline or time.monotonic() + 30  # counted after the first run, whose Spark start is slow
        if len(rows) >= len(ids) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    stamp = datetime(2026, 1, 1, tzinfo=UTC)
    assert sorted(rows, key=lambda r: r["id"]) == [{"id": i, "name": f"n{i % 5}", "ts": stamp} for i in ids]


def test_a_publication_to_a_sasl_cluster_shows_its_password_nowhere(
    tmp_path: Path, sasl_cluster: LocalCluster, sasl_password: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PUBLICATION_TEST_PASSWORD", sasl_password)
    properties = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "ingest",
        "sasl.password": "${env:PUBLICATION_TEST_PASSWORD}",
    }
    world = PublicationWorld(
        tmp_path,
        {"secured": sasl_cluster.bootstrap_servers},
        properties={"secured": properties},
        clients={"secured": sasl_cluster.client_config(sasl_password)},
    )
    ids = world.append(3)
    results = [world.cli(*command) for command in (("publish", "--dry-run"), ("-v", "publish"), ("publish", "status"))]

    assert [r.returncode for r in results] == [0, 0, 0], [r.stderr for r in results]
    assert world.ids("secured") == ids
    for result in results:
        assert sasl_password not in result.stdout + result.stderr
    assert "3 records" in results[1].stdout


def test_a_large_run_from_spark_tasks_killed_in_its_tasks_then_after_its_slices_lands_every_row_once(
    tmp_path: Path, kafka_clusters: dict[str, ClusterEndpoint], spark: Any
) -> None:
    from dynamic_kafka.faults import ENV, acting_at

    class DriverKilled(BaseException):
        pass

    def kill() -> None:
        raise DriverKilled

    # Every run from Spark's executors; a slice per version here (3 + 2 + 4 rows at most 3 per transaction).
    world = PublicationWorld(
        tmp_path, {"east": kafka_clusters["east"].bootstrap_servers}, executor_rows=0, max_rows_per_transaction=3
    )
    ids = world.append(3) + world.append(2) + world.append(4)
    # Every task's Python worker dies inside its transaction (kill -9; the tasks' environment comes from the
    # session's): Spark gives up, the run fails, nothing is visible.
    environment = spark.sparkContext.environment
    environment[ENV] = "publish_slice_in_transaction"
    try:
        with pytest.raises(PublicationError, match="Python worker exited unexpectedly"):
            world.publication().publish()
    finally:
        del environment[ENV]
    assert world.ids("east") == []

    ids += world.append(1)
    # The next run finishes the pending plan first; it dies once the slices committed, before its progress moved.
    with acting_at("publish_slices_committed", kill), pytest.raises(DriverKilled):
        world.publication().publish()
    assert world.ids("east") == ids[:9]

    outcome = world.publication().publish()
    assert (outcome.records, outcome.next_version) == (1, 4)
    assert world.ids("east") == ids
    assert world.publication().status().rows_behind == 0
