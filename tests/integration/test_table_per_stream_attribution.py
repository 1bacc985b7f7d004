"""Which table a topic's records land in with a table per stream (issue 35, rows 7, 8 and 11): the plan's table of
each split routes its rows, a partition keeps the table it first landed in when the streams that list its topic
change, and a run refuses a table the state never knew that holds the pipeline's later runs. On the real broker,
Spark and Delta.
"""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

from devtools.testing.kafka import Record, create_topic, produce, unique_name
from dynamic_kafka import Pipeline, load_project_config
from dynamic_kafka.errors import StateBehindSinkError
from dynamic_kafka.faults import acting_at
from dynamic_kafka.metadata.models import ClusterMetadata
from dynamic_kafka.model.plan import Split
from dynamic_kafka.spark.reader import read_splits
from tests.integration.test_table_per_stream import (
    SimulatedCrashError,
    crash,
    per_stream_harness,
    table_rows,
)
from tests.support.clock import past_the_planned_runs_lease
from tests.support.metadata_changes import numbered, rows

if TYPE_CHECKING:
    from pathlib import Path

    from devtools.local_kafka import ClusterEndpoint
    from devtools.testing.pipeline import PipelineHarness, Row

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


def east_topic(clusters: dict[str, ClusterEndpoint], partitions: int) -> tuple[str, str]:
    """A new topic ``orders-*`` on "east"; returns the cluster's bootstrap servers and the topic."""
    east = clusters["east"].bootstrap_servers
    topic = unique_name("orders")
    create_topic(east, topic, partitions)
    return east, topic


def listed_by_orders_b(
    clusters: dict[str, ClusterEndpoint], spark: Any, folder: Path
) -> tuple[str, str, PipelineHarness]:
    """A per-stream pipeline whose one stream, orders-b, lists a new one-partition topic on "east"; returns the
    cluster's bootstrap servers, the topic and the harness."""
    east, topic = east_topic(clusters, 1)
    h = per_stream_harness(clusters, spark, folder)
    h.set_streams({"orders-b": {"east": [topic]}})
    return east, topic, h


def test_the_readers_stream_column_is_each_splits_own_stream_when_the_splits_of_a_topic_disagree(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any
) -> None:
    # A drained partition keeps the stream it was landed under; its topic's other partition may have another (a
    # state written before partitions kept their tables). Each row is routed to its own split's table.
    east, topic = east_topic(kafka_clusters, 2)
    produce(east, topic, numbered(range(4), partitions=2))
    splits = [
        Split(
            cluster_id="east",
            topic=topic,
            partition=partition,
            start_offset=0,
            stop_offset=2,
            stream_ids=(stream,),
            bootstrap_servers=east,
            draining=partition == 1,
        )
        for partition, stream in ((0, "orders-a"), (1, "orders-b"))
    ]
    clusters = {"east": ClusterMetadata(cluster_id="east", bootstrap_servers=east)}
    frame = read_splits(spark, splits, clusters, isolation_level="read_committed", min_partitions=None)
    routed = sorted((int(r["partition"]), r["stream"]) for r in frame.select("partition", "stream").collect())
    assert routed == [(0, "orders-a"), (0, "orders-a"), (1, "orders-b"), (1, "orders-b")]


def test_a_new_partition_joins_its_topics_table_beside_a_drained_partition_and_lands_once_across_a_crash(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    east, topic = east_topic(kafka_clusters, 2)
    other = east_topic(kafka_clusters, 1)[1]
    h = per_stream_harness(kafka_clusters, spark, tmp_path, drain_removed=True)
    h.set_streams({"orders-b": {"east": {"topics": {topic: [1]}}}})
    old = rows("east", topic, produce(east, topic, numbered(range(2), partitions=2)))
    assert h.runner().run().records == 1  # partition 1 only, in orders-b's table

    # Partition 1 leaves orders-b (drained), partition 0 joins orders-a, which lands a new topic too: partition 0
    # joins its topic's table (orders-b's), the new topic takes orders-a's.
    a = rows("east", other, produce(east, other, numbered(range(20, 22))))
    h.set_streams({"orders-a": {"east": {"topics": {topic: [0], other: None}}}})
    new = rows("east", topic, produce(east, topic, numbered(range(2, 6), partitions=2)))
    # The run dies after orders-a's commit, before orders-b's; its recovery writes orders-b only.
    with acting_at("between_tables", crash), pytest.raises(SimulatedCrashError):
        h.runner().run()
    assert table_rows(h, "orders-a") == sorted(a)
    past_the_planned_runs_lease(monkeypatch, h.runner().store)
    recovering = h.runner().run()
    assert recovering.recovered_run_seq == 2
    assert table_rows(h, "orders-a") == sorted(a)
    assert table_rows(h, "orders-b") == sorted(old + new)


def test_a_topic_a_backfill_merged_before_its_first_run_keeps_that_table_when_a_stream_sorting_first_lists_it(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> None:
    # Hole 35.16: the backfill records the table it merged each partition into beside its frontier; without it the
    # first run took orders-a's table and checked the backfilled offsets against that table only.
    east, topic, h = listed_by_orders_b(kafka_clusters, spark, tmp_path)
    first = rows("east", topic, produce(east, topic, numbered(range(2))))
    now = datetime.now(UTC)
    h.face().backfill(now - timedelta(hours=1), now + timedelta(minutes=1))  # before any run
    assert table_rows(h, "orders-b") == sorted(first)

    h.set_streams({"orders-a": {"east": [topic]}, "orders-b": {"east": [topic]}})
    second = rows("east", topic, produce(east, topic, numbered(range(2, 3))))
    run = h.face().run()

    assert [t.stream_id for t in run.stream_tables] == ["orders-b"]
    assert table_rows(h, "orders-b") == sorted(first + second)
    assert table_rows(h, "orders-a") == []


def test_a_partition_keeps_its_table_when_a_stream_sorting_first_lists_its_topic_and_a_backfill_adds_nothing_twice(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> None:
    east, topic, h = listed_by_orders_b(kafka_clusters, spark, tmp_path)
    t0 = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(hours=2)

    def send(*minutes: int) -> list[Row]:
        stamps = [int((t0 + timedelta(minutes=m)).timestamp() * 1000) for m in minutes]
        return rows(
            "east",
            topic,
            produce(
                east, topic, [Record(value=b"%d" % m, timestamp_ms=t) for m, t in zip(minutes, stamps, strict=True)]
            ),
        )

    first = send(1, 2)
    assert h.face().run().records == 2

    # orders-a, sorting first, lists the topic too: its partition keeps landing in orders-b's table.
    h.set_streams({"orders-a": {"east": [topic]}, "orders-b": {"east": [topic]}})
    second = send(3)
    later = h.face().run()
    assert [(t.stream_id, t.records) for t in later.stream_tables] == [("orders-b", 1)]
    # A backfill over every record merges into the same table, so it adds none twice.
    h.face().backfill(t0, t0 + timedelta(minutes=30))
    assert table_rows(h, "orders-b") == sorted(first + second)
    assert table_rows(h, "orders-a") == []

    # The table stays looked after: status, maintenance (and realign and replay, which take the same tables).
    assert [t.stream_id for t in h.face().status().tables] == ["orders-b"]
    maintained = h.face().maintain(vacuum_retention_hours=0, unsafe_vacuum_retention=True)
    assert {t.table for t in maintained.tables if t.role == "sink"} == {str(tmp_path / "tables" / "orders-b")}


def test_a_run_after_a_state_restore_refuses_a_stream_table_the_state_never_knew_and_lands_once_after_realign(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> None:
    east = kafka_clusters["east"].bootstrap_servers
    topics = {stream: east_topic(kafka_clusters, 1)[1] for stream in ("orders-a", "orders-b")}
    h = per_stream_harness(kafka_clusters, spark, tmp_path)
    h.set_streams({"orders-a": {"east": [topics["orders-a"]]}})
    a = rows("east", topics["orders-a"], produce(east, topics["orders-a"], numbered(range(2))))
    assert h.face().run().run_seq == 1
    state = tmp_path / "tables" / "_p_state"
    shutil.copytree(state, tmp_path / "backup")

    # Run 2 lands only the new stream orders-b; then the state of run 1 is put back.
    h.set_streams({s: {"east": [t]} for s, t in topics.items()})
    b = rows("east", topics["orders-b"], produce(east, topics["orders-b"], numbered(range(10, 13))))
    assert [(t.stream_id, t.records) for t in h.face().run().stream_tables] == [("orders-b", 3)]
    shutil.rmtree(state)
    shutil.copytree(tmp_path / "backup", state)
    b += rows("east", topics["orders-b"], produce(east, topics["orders-b"], numbered(range(13, 15))))

    # Run 2 again would be skipped in orders-b as already committed (a run 3, duplicated): refused, nothing written.
    with pytest.raises(StateBehindSinkError, match=r"orders-b holds run 2 of this pipeline") as refused:
        h.face().run()
    assert (refused.value.sink_txn, refused.value.state_run_seq) == (2, 1)
    assert len(table_rows(h, "orders-b")) == 3

    realigned = Pipeline(load_project_config(h.config_path), "p", spark=lambda: spark).realign(apply=True)
    assert (realigned.needed, realigned.next_run_seq) == (True, 3)
    after = h.face().run()
    assert (after.run_seq, after.status) == (3, "committed")
    assert table_rows(h, "orders-a") == sorted(a)
    assert table_rows(h, "orders-b") == sorted(b)
