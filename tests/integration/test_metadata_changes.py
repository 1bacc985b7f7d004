"""Acceptance tests of the "Dynamic metadata" issue: the metadata changes between runs (README, "Semantics of
metadata changes"; DESIGN.md section 6), on the real "east"/"west" clusters, Spark and Delta.

Every test compares the sink with exactly the rows the produced records must become (values, partition, offset
and the ``cluster`` column), duplicates kept, so a lost or twice-read record fails it.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewPartitions

from devtools.local_kafka import ClusterEndpoint
from devtools.testing.kafka import (
    Record,
    create_topic,
    delete_topics,
    produce,
    recreate_topic,
    unique_name,
    wait_for,
)
from tests.support.metadata_changes import (
    finding_ranges,
    harness,
    numbered,
    orders_stream,
    positions,
    rows,
    sink_streams,
    unread_ranges,
)

if TYPE_CHECKING:
    from pathlib import Path

    from devtools.testing.pipeline import PipelineHarness, Row
    from dynamic_kafka.model.summary import RunSummary

pytestmark = pytest.mark.integration

Clusters = dict[str, ClusterEndpoint]


@dataclasses.dataclass
class Migration:
    """A stream moved from east to west in three runs; what the runs read and what east kept after the last."""

    topic_a: str
    topic_b: str
    read: list[Row]
    left_on_a: list[Record]
    last: RunSummary


def migrate(h: PipelineHarness, clusters: Clusters, *, left_on_a: range = range(0)) -> Migration:
    """Stream "orders" on east only, then on east + west, then on west only, with a run at each step: 0..14 to east
    before run 1, 15..29 to east before run 2, 30..44 to west (and ``left_on_a`` to east) before run 3."""
    east, west = clusters["east"].bootstrap_servers, clusters["west"].bootstrap_servers
    topic_a, topic_b = unique_name("orders-a"), unique_name("orders-b")
    create_topic(east, topic_a, 2)
    create_topic(west, topic_b, 2)

    h.set_streams({"orders": {"east": [topic_a]}})
    read = rows("east", topic_a, produce(east, topic_a, numbered(range(15), partitions=2)))
    assert h.face().run().records == 15

    h.set_streams({"orders": {"east": [topic_a], "west": [topic_b]}})
    read += rows("east", topic_a, produce(east, topic_a, numbered(range(15, 30), partitions=2)))
    assert h.face().run().records == 15
    assert h.sink_rows() == sorted(read)

    read += rows("west", topic_b, produce(west, topic_b, numbered(range(30, 45), partitions=2)))
    left = produce(east, topic_a, numbered(left_on_a, partitions=2))
    h.set_streams({"orders": {"west": [topic_b]}})
    last = h.face().run()
    return Migration(topic_a, topic_b, read, left, last)


def test_migration_between_clusters_lands_every_record_once_with_its_cluster(
    kafka_clusters: Clusters, spark: Any, tmp_path: Path
) -> None:
    h = harness(tmp_path, kafka_clusters, spark)

    m = migrate(h, kafka_clusters)

    assert m.last.records == 15
    assert {(t.cluster_id, t.topic): t.records for t in m.last.topics} == {("west", m.topic_b): 15}
    assert h.sink_rows() == sorted(m.read)
    assert sorted(int(v) for *_, v in h.sink_rows() if v is not None) == list(range(45))
    # east left the metadata fully read: marked removed at its offsets (15 per partition), nothing unread.
    assert positions(h, "east") == {("east", m.topic_a, 0): ("removed", 15), ("east", m.topic_a, 1): ("removed", 15)}
    assert finding_ranges(m.last.findings, "removed") == {
        ("east", m.topic_a, 0, None, None),
        ("east", m.topic_a, 1, None, None),
    }
    assert not finding_ranges(m.last.findings, "removed_unread")


def test_migration_with_drain_removed_reads_what_the_old_cluster_got_after_its_last_run(
    kafka_clusters: Clusters, spark: Any, tmp_path: Path
) -> None:
    h = harness(tmp_path, kafka_clusters, spark, drain_removed=True)

    m = migrate(h, kafka_clusters, left_on_a=range(45, 50))

    drained = unread_ranges("east", m.topic_a, m.left_on_a)
    assert m.last.records == 20
    assert {(t.cluster_id, t.topic): t.records for t in m.last.topics} == {
        ("east", m.topic_a): 5,
        ("west", m.topic_b): 15,
    }
    assert h.sink_rows() == sorted(m.read + rows("east", m.topic_a, m.left_on_a))
    assert sorted(int(v) for *_, v in h.sink_rows() if v is not None) == list(range(50))
    assert finding_ranges(m.last.findings, "removed") == drained
    assert positions(h, "east") == {(c, t, p): ("removed", stop) for c, t, p, _, stop in drained}

    # Drained and removed: the next run neither reads east again nor starts Spark.
    again = h.face().run()
    assert again.status == "empty"
    assert not again.spark_started
    assert h.sink_rows() == sorted(m.read + rows("east", m.topic_a, m.left_on_a))


def test_migration_reports_records_left_unread_on_the_removed_cluster(
    kafka_clusters: Clusters, spark: Any, tmp_path: Path
) -> None:
    h = harness(tmp_path, kafka_clusters, spark)

    m = migrate(h, kafka_clusters, left_on_a=range(45, 50))

    unread = unread_ranges("east", m.topic_a, m.left_on_a)
    assert {r[3] for r in unread} == {15}, "45..49 follow the 15 records per partition already read"
    assert h.sink_rows() == sorted(m.read)
    assert finding_ranges(m.last.findings, "removed_unread") == unread
    assert set(m.last.warnings) >= {f for f in m.last.findings if f.kind == "removed_unread"}
    assert positions(h, "east") == {(c, t, p): ("removed", start) for c, t, p, start, _ in unread}

    status = h.face().status()
    assert finding_ranges(status.warnings, "removed_unread") == unread
    lag = {(p.cluster_id, p.topic, p.partition): (p.status, p.next_offset, p.latest_offset) for p in status.partitions}
    assert {k: v for k, v in lag.items() if k[0] == "east"} == {
        (c, t, p): ("removed", start, stop) for c, t, p, start, stop in unread
    }


def test_removed_then_readded_topic_resumes_where_it_stopped(
    kafka_clusters: Clusters, spark: Any, tmp_path: Path
) -> None:
    east = kafka_clusters["east"].bootstrap_servers
    moving, staying = unique_name("orders-moving"), unique_name("orders-staying")
    create_topic(east, moving, 2)
    create_topic(east, staying, 1)
    h = harness(tmp_path, kafka_clusters, spark)
    h.set_streams({"orders": {"east": [moving, staying]}})
    expected = rows("east", moving, produce(east, moving, numbered(range(10), partitions=2)))
    expected += rows("east", staying, produce(east, staying, numbered(range(100, 105))))
    assert h.face().run().records == 15

    before_removal = produce(east, moving, numbered(range(10, 14), partitions=2))
    h.set_streams({"orders": {"east": [staying]}})
    removal = h.face().run()
    assert removal.status == "empty"
    assert finding_ranges(removal.findings, "removed_unread") == unread_ranges("east", moving, before_removal)
    assert positions(h) == {
        ("east", moving, 0): ("removed", 5),
        ("east", moving, 1): ("removed", 5),
        ("east", staying, 0): ("active", 5),
    }
    while_absent = produce(east, moving, numbered(range(14, 20), partitions=2))

    h.set_streams({"orders": {"east": [moving, staying]}})
    back = h.face().run()

    resumed = before_removal + while_absent
    assert back.records == len(resumed)
    assert finding_ranges(back.findings, "resumed") == {("east", moving, p, None, None) for p in (0, 1)}
    assert h.sink_rows() == sorted(expected + rows("east", moving, resumed))
    assert positions(h) == {
        ("east", moving, 0): ("active", 10),
        ("east", moving, 1): ("active", 10),
        ("east", staying, 0): ("active", 5),
    }


def test_cluster_flapping_in_the_metadata_loses_and_duplicates_nothing(
    kafka_clusters: Clusters, spark: Any, tmp_path: Path
) -> None:
    east, west = kafka_clusters["east"].bootstrap_servers, kafka_clusters["west"].bootstrap_servers
    h, topics = orders_stream(tmp_path, kafka_clusters, spark, {"east": 1, "west": 2})
    t_east, t_west = topics["east"], topics["west"]
    both = {"orders": {"east": [t_east], "west": [t_west]}}
    expected: list[Row] = []

    def produce_both(numbers: range) -> None:
        nonlocal expected
        expected += rows("east", t_east, produce(east, t_east, numbered(numbers)))
        expected += rows("west", t_west, produce(west, t_west, numbered(numbers, partitions=2)))

    produce_both(range(6))
    assert h.face().run().records == 12

    produce_both(range(6, 12))
    h.set_streams({"orders": {"east": [t_east]}})
    absent = h.face().run()
    assert {t.cluster_id: t.records for t in absent.topics} == {"east": 6}
    assert {(c, s) for (c, _, _), (s, _) in positions(h).items()} == {("east", "active"), ("west", "removed")}

    produce_both(range(12, 18))
    h.set_streams(both)
    present = h.face().run()

    assert {t.cluster_id: t.records for t in present.topics} == {"east": 6, "west": 12}
    assert h.sink_rows() == sorted(expected)
    assert sorted(int(v) for c, *_, v in h.sink_rows() if c == "west" and v is not None) == list(range(18))
    assert sorted(int(v) for c, *_, v in h.sink_rows() if c == "east" and v is not None) == list(range(18))


def test_new_stream_matching_the_pattern_is_read_from_the_starting_initializer(
    kafka_clusters: Clusters, spark: Any, tmp_path: Path
) -> None:
    east, west = kafka_clusters["east"].bootstrap_servers, kafka_clusters["west"].bootstrap_servers
    t_eu, t_us, t_old = unique_name("orders-eu"), unique_name("orders-us"), unique_name("old-orders-x")
    for bootstrap, topic in ((east, t_eu), (west, t_us), (west, t_old)):
        create_topic(bootstrap, topic, 1)
    # Every topic not listed starts at earliest; the new stream's topic at offset 3, to show its start comes
    # from the starting initializer.
    h = harness(
        tmp_path,
        kafka_clusters,
        spark,
        streams=None,
        stream_pattern="orders-.*",
        starting_offsets={"specific": {"offsets": {t_us: {0: 3}}, "fallback": "earliest"}},
    )
    h.set_streams({"orders-eu": {"east": [t_eu]}})
    eu = produce(east, t_eu, numbered(range(5)))
    assert h.face().run().records == 5

    eu += produce(east, t_eu, numbered(range(5, 8)))
    us = produce(west, t_us, numbered(range(100, 110)))
    produce(west, t_old, numbered(range(200, 205)))
    h.set_streams({"orders-eu": {"east": [t_eu]}, "orders-us": {"west": [t_us]}, "old-orders-x": {"west": [t_old]}})
    second = h.face().run()

    assert second.records == 3 + 7
    assert finding_ranges(second.findings, "new_topic") == {("west", t_us, -1, None, None)}
    assert h.sink_rows() == sorted(rows("east", t_eu, eu) + rows("west", t_us, us[3:]))
    assert sink_streams(h) == sorted(
        [("orders-eu", "east", t_eu, r.value or b"") for r in eu]
        + [("orders-us", "west", t_us, r.value or b"") for r in us[3:]]
    )
    assert not any(topic == t_old for _, topic, _ in positions(h))


def test_partitions_added_between_runs_are_read_from_earliest(
    kafka_clusters: Clusters, spark: Any, tmp_path: Path
) -> None:
    east = kafka_clusters["east"].bootstrap_servers
    h, topics = orders_stream(tmp_path, kafka_clusters, spark, {"east": 1}, starting_offsets="latest")
    topic = topics["east"]
    produce(east, topic, numbered(range(5)))
    first = h.face().run()
    assert first.status == "empty"
    assert positions(h) == {("east", topic, 0): ("active", 5)}, "latest pins partition 0 after the 5 old records"

    new_on_0 = produce(east, topic, numbered(range(5, 8)))
    admin = AdminClient({"bootstrap.servers": east})
    admin.create_partitions([NewPartitions(topic, 3)])[topic].result(timeout=30)

    def grown() -> bool:
        described = admin.list_topics(topic=topic, timeout=10).topics[topic]
        return len(described.partitions) == 3 and all(p.leader >= 0 for p in described.partitions.values())

    wait_for(grown, what=f"3 partitions with leaders for {topic}")
    before_discovery = produce(east, topic, [Record(value=str(i).encode(), partition=1 + i % 2) for i in range(8, 14)])

    second = h.face().run()

    assert second.records == 9
    assert finding_ranges(second.findings, "new_partition") == {("east", topic, p, None, None) for p in (1, 2)}
    assert h.sink_rows() == sorted(rows("east", topic, new_on_0 + before_discovery))
    assert positions(h) == {("east", topic, p): ("active", n) for p, n in ((0, 8), (1, 3), (2, 3))}


def _recreate(bootstrap: str, topic: str, partitions: int) -> None:
    """Deletes ``topic`` and creates it again (a new topic id)."""
    delete_topics(bootstrap, [topic])
    recreate_topic(bootstrap, topic, partitions)


def test_topic_recreated_with_fewer_partitions_is_reset_once(
    kafka_clusters: Clusters, spark: Any, tmp_path: Path
) -> None:
    """Issue 11, hole 1: the old topic's partition 1 has no counterpart in the new topic; the reset marks it
    removed in its own commit, so the next runs read only new records instead of the whole topic again."""
    east = kafka_clusters["east"].bootstrap_servers
    h, topics = orders_stream(tmp_path, kafka_clusters, spark, {"east": 2}, on_topic_recreated="reset")
    topic = topics["east"]
    old = produce(east, topic, numbered(range(4), partitions=2))
    assert h.face().run().records == 4

    _recreate(east, topic, 1)
    new = produce(east, topic, numbered(range(10, 13)))
    reset = h.face().run()
    assert reset.records == 3
    assert {f.kind for f in reset.findings} >= {"topic_recreated"}
    assert positions(h) == {("east", topic, 0): ("active", 3), ("east", topic, 1): ("removed", 2)}

    newer = produce(east, topic, numbered(range(13, 15)))
    after = h.face().run()
    assert after.records == 2
    assert "topic_recreated" not in {f.kind for f in after.findings}
    assert h.face().run().status == "empty"
    assert h.sink_rows() == sorted(rows("east", topic, old) + rows("east", topic, new + newer))


def test_topic_added_to_a_stream_with_state_is_read_from_earliest(
    kafka_clusters: Clusters, spark: Any, tmp_path: Path
) -> None:
    """Issue 11, hole 9: with `latest`, a topic added to a stream the pipeline already reads (a migration) starts at
    earliest, so the records written to it before the run that discovers it land."""
    east, west = kafka_clusters["east"].bootstrap_servers, kafka_clusters["west"].bootstrap_servers
    h, topics = orders_stream(tmp_path, kafka_clusters, spark, {"east": 1}, starting_offsets="latest")
    old_topic, new_topic = topics["east"], unique_name("orders-new")
    create_topic(west, new_topic, 1)
    produce(east, old_topic, numbered(range(3)))
    assert h.face().run().status == "empty"  # latest: the first run pins the old records as read

    before_discovery = produce(west, new_topic, numbered(range(100, 104)))
    h.set_streams({"orders": {"east": [old_topic], "west": [new_topic]}})
    discovered = h.face().run()

    assert discovered.records == 4
    assert {(f.cluster_id, f.topic) for f in discovered.findings if f.kind == "new_topic"} == {("west", new_topic)}
    assert any("already has state" in f.message for f in discovered.findings if f.kind == "new_topic")
    assert h.sink_rows() == sorted(rows("west", new_topic, before_discovery))


def test_topic_pattern_picks_up_a_matching_topic_from_earliest_and_a_partition_set_restricts_reads(
    kafka_clusters: Clusters, spark: Any, tmp_path: Path
) -> None:
    """Issue 27 item 2: a pattern is resolved against the broker's topic list at every run. A topic created to
    match between runs is read from earliest (records produced before the run that finds it land); a topic that
    does not match is never read; a partition set reads only its partitions."""
    east, west = kafka_clusters["east"].bootstrap_servers, kafka_clusters["west"].bootstrap_servers
    prefix = unique_name("pat")
    first, later, other = f"{prefix}-eu", f"{prefix}-us", f"x{prefix}-eu"
    split = unique_name("split")
    create_topic(east, first, 1)
    create_topic(east, other, 1)
    create_topic(west, split, 3)
    h = harness(tmp_path, kafka_clusters, spark, starting_offsets="latest")
    h.set_streams({"orders": {"east": {"pattern": f"{prefix}-.*"}, "west": {"topics": {split: [0, 2]}}}})
    assert h.face().run().status == "empty"  # latest: pins the (empty) topics

    landed = produce(east, first, numbered(range(3)))
    produce(east, other, numbered(range(10, 12)))
    in_set = produce(west, split, numbered(range(20, 26), partitions=3))
    create_topic(east, later, 1)
    before_discovery = produce(east, later, numbered(range(30, 33)))
    summary = h.face().run()

    wanted = [r for r in in_set if r.partition in (0, 2)]
    assert summary.records == 3 + 3 + len(wanted)
    assert {(f.cluster_id, f.topic) for f in summary.findings if f.kind == "new_topic"} == {("east", later)}
    assert h.sink_rows() == sorted(
        rows("east", first, landed) + rows("east", later, before_discovery) + rows("west", split, wanted)
    )
