"""The planner's rules, driven by hand-made snapshots: no broker, no JVM, no Delta."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from dynamic_kafka import offsets
from dynamic_kafka.config import PipelineConfig
from dynamic_kafka.errors import ClusterUnreachableError, DataLossError, PlanningError, TopicRecreatedError
from dynamic_kafka.metadata.models import ClusterMetadata, KafkaStream, metadata_fingerprint
from dynamic_kafka.metadata.snapshot import MetadataSnapshot
from dynamic_kafka.plan.model import LostRange, Plan, TopicPartition
from dynamic_kafka.plan.planner import plan_run
from dynamic_kafka.plan.snapshots import (
    BrokerSnapshot,
    ClusterSnapshot,
    PartitionOffsets,
    PartitionState,
    StateSnapshot,
    TopicSnapshot,
)

NOW = datetime(2026, 11, 21, tzinfo=UTC)


def pipeline(**overrides: Any) -> PipelineConfig:
    return PipelineConfig.model_validate({"id": "p", "streams": ["orders"], "sink": {"path": "/tmp/s"}, **overrides})


def stream(stream_id: str = "orders", **placements: list[str]) -> KafkaStream:
    return KafkaStream(
        stream_id=stream_id,
        clusters={
            cid: ClusterMetadata(cluster_id=cid, bootstrap_servers=f"{cid}:9092", topics=frozenset(topics))
            for cid, topics in placements.items()
        },
    )


def metadata(*streams: KafkaStream) -> MetadataSnapshot:
    return MetadataSnapshot(streams={s.stream_id: s for s in streams}, fingerprint=metadata_fingerprint(streams))


def topic(name: str, ranges: dict[int, tuple[int, int]], topic_id: str = "id-1", **lookups: Any) -> TopicSnapshot:
    return TopicSnapshot(
        topic=name,
        topic_id=topic_id,
        partitions={p: PartitionOffsets(earliest=lo, latest=hi) for p, (lo, hi) in ranges.items()},
        **lookups,
    )


def brokers(**clusters: list[TopicSnapshot] | None) -> BrokerSnapshot:
    return BrokerSnapshot(
        clusters={
            cid: ClusterSnapshot(cluster_id=cid, reachable=False, error="connection refused")
            if topics is None
            else ClusterSnapshot(cluster_id=cid, topics={t.topic: t for t in topics})
            for cid, topics in clusters.items()
        },
        taken_at=NOW,
    )


def state(*rows: tuple[str, str, int, int], status: str = "active", topic_id: str | None = "id-1") -> StateSnapshot:
    parts = {}
    for cid, t, p, next_offset in rows:
        row = PartitionState(
            cluster_id=cid,
            topic=t,
            partition=p,
            next_offset=next_offset,
            topic_id=topic_id,
            bootstrap_servers=f"{cid}:9092",
            stream_ids=("orders",),
            status=status,  # type: ignore[arg-type]
        )
        parts[row.key] = row
    return StateSnapshot(pipeline_id="p", table_version=3, partitions=parts)


def ranges(plan: Plan) -> dict[tuple[str, str, int], tuple[int, int]]:
    return {(s.cluster_id, s.topic, s.partition): (s.start_offset, s.stop_offset) for s in plan.splits}


def plan(meta: MetadataSnapshot, snap: BrokerSnapshot, st: StateSnapshot | None = None, **config: Any) -> Plan:
    return plan_run(
        pipeline=pipeline(**config),
        metadata=meta,
        state=st or StateSnapshot(pipeline_id="p"),
        brokers=snap,
        run_seq=1,
        now=NOW,
    )


def kinds(p: Plan) -> list[str]:
    return [f.kind for f in p.findings]


class TestStartingPositions:
    def test_new_stream_across_two_clusters_reads_from_earliest(self) -> None:
        p = plan(
            metadata(stream(east=["orders"], west=["orders-v2"])),
            brokers(east=[topic("orders", {0: (0, 5), 1: (2, 4)})], west=[topic("orders-v2", {0: (0, 3)})]),
        )
        assert ranges(p) == {
            ("east", "orders", 0): (0, 5),
            ("east", "orders", 1): (2, 4),
            ("west", "orders-v2", 0): (0, 3),
        }
        assert {s.stream_id for s in p.splits} == {"orders"}
        assert p.planned_records == 10

    def test_committed_state_wins_over_initializer(self) -> None:
        p = plan(
            metadata(stream(east=["orders"])),
            brokers(east=[topic("orders", {0: (0, 10)})]),
            state(("east", "orders", 0, 7)),
            starting_offsets="latest",
        )
        assert ranges(p) == {("east", "orders", 0): (7, 10)}

    def test_latest_pins_position_with_an_empty_split(self) -> None:
        p = plan(
            metadata(stream(east=["orders"])), brokers(east=[topic("orders", {0: (0, 10)})]), starting_offsets="latest"
        )
        assert ranges(p) == {("east", "orders", 0): (10, 10)}
        assert p.is_empty

    def test_timestamp_uses_lookup_and_none_means_latest(self) -> None:
        snap = brokers(east=[topic("orders", {0: (0, 10), 1: (0, 8)}, start_lookups={0: 4, 1: None})])
        p = plan(metadata(stream(east=["orders"])), snap, starting_offsets={"timestamp": 1000})
        assert ranges(p) == {("east", "orders", 0): (4, 10), ("east", "orders", 1): (8, 8)}

    @pytest.mark.parametrize(("reset", "expected"), [("earliest", (2, 9)), ("latest", (9, 9))])
    def test_committed_group_falls_back_to_reset(self, reset: str, expected: tuple[int, int]) -> None:
        snap = brokers(east=[topic("orders", {0: (0, 9), 1: (2, 9)}, start_lookups={0: 5, 1: None})])
        p = plan(
            metadata(stream(east=["orders"])), snap, starting_offsets={"committed": {"group_id": "g", "reset": reset}}
        )
        assert ranges(p) == {("east", "orders", 0): (5, 9), ("east", "orders", 1): expected}

    def test_committed_group_with_reset_none_fails_naming_partition(self) -> None:
        snap = brokers(east=[topic("orders", {0: (0, 9)}, start_lookups={0: None})])
        with pytest.raises(PlanningError, match=r"east/orders\[0\].*'none'"):
            plan(
                metadata(stream(east=["orders"])),
                snap,
                starting_offsets={"committed": {"group_id": "g", "reset": "none"}},
            )

    def test_specific_offsets_with_fallback_and_clamping(self) -> None:
        snap = brokers(east=[topic("orders", {0: (0, 9), 1: (0, 9), 2: (3, 9)})])
        spec = {"specific": {"offsets": {"orders": {0: 4, 2: 1}}, "fallback": "latest"}}
        p = plan(metadata(stream(east=["orders"])), snap, starting_offsets=spec)
        assert ranges(p) == {
            ("east", "orders", 0): (4, 9),
            ("east", "orders", 1): (9, 9),
            ("east", "orders", 2): (3, 9),
        }
        assert "offset_clamped" in kinds(p)

    def test_per_cluster_override_beats_pipeline_default(self) -> None:
        east = ClusterMetadata(
            cluster_id="east", bootstrap_servers="e:1", topics=frozenset({"orders"}), starting_offsets=offsets.latest()
        )
        west = ClusterMetadata(cluster_id="west", bootstrap_servers="w:1", topics=frozenset({"orders"}))
        meta = metadata(KafkaStream(stream_id="orders", clusters={"east": east, "west": west}))
        p = plan(meta, brokers(east=[topic("orders", {0: (0, 5)})], west=[topic("orders", {0: (0, 5)})]))
        assert ranges(p) == {("east", "orders", 0): (5, 5), ("west", "orders", 0): (0, 5)}

    def test_new_partition_of_known_topic_reads_from_earliest(self) -> None:
        p = plan(
            metadata(stream(east=["orders"])),
            brokers(east=[topic("orders", {0: (0, 10), 1: (0, 4)})]),
            state(("east", "orders", 0, 10)),
            starting_offsets="latest",
        )
        assert ranges(p) == {("east", "orders", 0): (10, 10), ("east", "orders", 1): (0, 4)}
        assert "new_partition" in kinds(p)


class TestStops:
    def test_stop_timestamp_and_specific(self) -> None:
        snap = brokers(east=[topic("orders", {0: (0, 10), 1: (0, 10)}, stop_lookups={0: 6, 1: None})])
        p = plan(metadata(stream(east=["orders"])), snap, stopping_offsets={"timestamp": 5})
        assert ranges(p) == {("east", "orders", 0): (0, 6), ("east", "orders", 1): (0, 10)}
        p = plan(
            metadata(stream(east=["orders"])),
            brokers(east=[topic("orders", {0: (0, 10)})]),
            state(("east", "orders", 0, 5)),
            stopping_offsets={"specific": {"offsets": {"orders": {0: 3}}}},
        )
        assert ranges(p) == {("east", "orders", 0): (5, 5)}

    def test_partition_cap_drains_backlog_in_steps(self) -> None:
        meta, snap = metadata(stream(east=["orders"])), brokers(east=[topic("orders", {0: (0, 25)})])
        first = plan(meta, snap, max_records_per_partition=10)
        assert ranges(first) == {("east", "orders", 0): (0, 10)}
        assert first.capped
        second = plan(meta, snap, state(("east", "orders", 0, 10)), max_records_per_partition=10)
        third = plan(meta, snap, state(("east", "orders", 0, 20)), max_records_per_partition=10)
        assert ranges(second)[("east", "orders", 0)] == (10, 20)
        assert ranges(third)[("east", "orders", 0)] == (20, 25)
        assert not third.capped

    def test_run_cap_is_shared_fairly_and_exactly(self) -> None:
        snap = brokers(east=[topic("orders", {0: (0, 100), 1: (0, 3), 2: (0, 100)})])
        p = plan(metadata(stream(east=["orders"])), snap, max_records_per_run=50)
        got = ranges(p)
        assert sum(stop - start for start, stop in got.values()) == 50
        assert got[("east", "orders", 1)] == (0, 3)
        assert abs((got[("east", "orders", 0)][1]) - got[("east", "orders", 2)][1]) <= 1
        assert p.capped


class TestPolicies:
    def test_data_loss_fails_naming_every_lost_range(self) -> None:
        with pytest.raises(DataLossError) as info:
            plan(
                metadata(stream(east=["orders"])),
                brokers(east=[topic("orders", {0: (5, 10), 1: (8, 10)})]),
                state(("east", "orders", 0, 2), ("east", "orders", 1, 9)),
            )
        assert info.value.losses == (
            LostRange(cluster_id="east", topic="orders", partition=0, from_offset=2, to_offset=5),
        )
        assert "east/orders[0] lost offsets [2, 5)" in str(info.value)

    def test_data_loss_skip_starts_at_earliest_and_records_gap(self) -> None:
        p = plan(
            metadata(stream(east=["orders"])),
            brokers(east=[topic("orders", {0: (5, 10)})]),
            state(("east", "orders", 0, 2)),
            on_data_loss="skip",
        )
        assert ranges(p) == {("east", "orders", 0): (5, 10)}
        gap = next(f for f in p.findings if f.kind == "data_loss")
        assert (gap.from_offset, gap.to_offset) == (2, 5)

    @pytest.mark.parametrize(
        ("snap_topic", "reason"),
        [
            (topic("orders", {0: (0, 10)}, topic_id="id-2"), "topic id changed"),
            (topic("orders", {0: (0, 3)}), "beyond latest"),
        ],
    )
    def test_recreated_topic_fails_by_default(self, snap_topic: TopicSnapshot, reason: str) -> None:
        with pytest.raises(TopicRecreatedError, match=reason) as info:
            plan(metadata(stream(east=["orders"])), brokers(east=[snap_topic]), state(("east", "orders", 0, 7)))
        assert (info.value.cluster_id, info.value.topic) == ("east", "orders")

    def test_recreated_topic_reset_reads_new_topic_from_earliest(self) -> None:
        p = plan(
            metadata(stream(east=["orders"])),
            brokers(east=[topic("orders", {0: (0, 4)}, topic_id="id-2")]),
            state(("east", "orders", 0, 7)),
            on_topic_recreated="reset",
        )
        assert ranges(p) == {("east", "orders", 0): (0, 4)}
        assert p.splits[0].topic_id == "id-2"
        assert "topic_recreated" in kinds(p)

    def test_unreachable_cluster_fails_or_is_skipped(self) -> None:
        meta = metadata(stream(east=["orders"], west=["orders"]))
        snap = brokers(east=[topic("orders", {0: (0, 4)})], west=None)
        st = state(("west", "orders", 0, 2))
        with pytest.raises(ClusterUnreachableError, match="west"):
            plan(meta, snap, st)
        p = plan(meta, snap, st, skip_unreachable_clusters=True)
        assert ranges(p) == {("east", "orders", 0): (0, 4)}
        assert p.skipped_clusters == ("west",)
        assert p.removals == ()


class TestMetadataChanges:
    def test_removed_cluster_is_marked_removed_and_unread_range_reported(self) -> None:
        p = plan(
            metadata(stream(west=["orders"])),
            brokers(west=[topic("orders", {0: (0, 2)})], east=[topic("orders", {0: (0, 50)})]),
            state(("east", "orders", 0, 45)),
        )
        assert ranges(p) == {("west", "orders", 0): (0, 2)}
        assert p.removals == (TopicPartition(cluster_id="east", topic="orders", partition=0),)
        unread = next(f for f in p.findings if f.kind == "removed_unread")
        assert (unread.cluster_id, unread.from_offset, unread.to_offset) == ("east", 45, 50)

    def test_drain_removed_reads_to_latest_then_removes(self) -> None:
        p = plan(
            metadata(stream(west=["orders"])),
            brokers(west=[topic("orders", {0: (0, 2)})], east=[topic("orders", {0: (0, 50)})]),
            state(("east", "orders", 0, 45)),
            drain_removed=True,
        )
        assert ranges(p) == {("west", "orders", 0): (0, 2), ("east", "orders", 0): (45, 50)}
        assert [s.draining for s in p.splits if s.cluster_id == "east"] == [True]
        assert p.removals == (TopicPartition(cluster_id="east", topic="orders", partition=0),)

    def test_capped_drain_is_not_removed_until_finished(self) -> None:
        p = plan(
            metadata(stream(west=["orders"])),
            brokers(west=[topic("orders", {0: (0, 0)})], east=[topic("orders", {0: (0, 50)})]),
            state(("east", "orders", 0, 30)),
            drain_removed=True,
            max_records_per_partition=10,
        )
        assert ranges(p)[("east", "orders", 0)] == (30, 40)
        assert p.removals == ()

    def test_unreachable_removed_cluster_with_drain_is_removed_with_warning(self) -> None:
        p = plan(
            metadata(stream(west=["orders"])),
            brokers(west=[topic("orders", {0: (0, 0)})], east=None),
            state(("east", "orders", 0, 30)),
            drain_removed=True,
        )
        assert p.removals == (TopicPartition(cluster_id="east", topic="orders", partition=0),)
        assert "removed_unread" in kinds(p)

    def test_readded_topic_resumes_at_kept_offset(self) -> None:
        p = plan(
            metadata(stream(east=["orders"])),
            brokers(east=[topic("orders", {0: (0, 20)})]),
            state(("east", "orders", 0, 12), status="removed"),
            starting_offsets="latest",
        )
        assert ranges(p) == {("east", "orders", 0): (12, 20)}
        assert "resumed" in kinds(p)

    def test_already_removed_partitions_are_left_alone(self) -> None:
        p = plan(
            metadata(stream(west=["orders"])),
            brokers(west=[topic("orders", {0: (0, 1)})]),
            state(("east", "orders", 0, 12), status="removed"),
        )
        assert p.removals == ()
        assert ranges(p) == {("west", "orders", 0): (0, 1)}

    def test_topic_in_two_streams_is_read_once_with_first_stream_id(self) -> None:
        p = plan(
            metadata(stream("payments", east=["shared"]), stream("orders", east=["shared"])),
            brokers(east=[topic("shared", {0: (0, 3)})]),
        )
        assert len(p.splits) == 1
        assert p.splits[0].stream_ids == ("orders", "payments")
        assert p.splits[0].stream_id == "orders"

    def test_empty_metadata_is_an_empty_plan_with_a_warning(self) -> None:
        p = plan(metadata(), brokers())
        assert p.splits == ()
        assert kinds(p) == ["empty_metadata"]

    def test_missing_topic_keeps_its_state_and_warns(self) -> None:
        p = plan(
            metadata(stream(east=["orders"])),
            brokers(east=[TopicSnapshot(topic="orders", exists=False)]),
            state(("east", "orders", 0, 3)),
        )
        assert p.splits == ()
        assert p.removals == ()
        assert kinds(p) == ["topic_missing"]

    def test_bootstrap_change_keeps_offsets(self) -> None:
        moved = KafkaStream(
            stream_id="orders",
            clusters={
                "east": ClusterMetadata(cluster_id="east", bootstrap_servers="new:1", topics=frozenset({"orders"}))
            },
        )
        p = plan(metadata(moved), brokers(east=[topic("orders", {0: (0, 9)})]), state(("east", "orders", 0, 6)))
        assert ranges(p) == {("east", "orders", 0): (6, 9)}
        assert p.splits[0].bootstrap_servers == "new:1"
