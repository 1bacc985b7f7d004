"""The planner's rules, driven by hand-made snapshots: no broker, no JVM, no Delta."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from dynamic_kafka import initializers as offsets
from dynamic_kafka.errors import (
    ClusterUnreachableError,
    DataLossError,
    PlanningError,
    TopicMissingError,
    TopicRecreatedError,
)
from dynamic_kafka.metadata.models import ClusterMetadata, KafkaStream
from dynamic_kafka.model.plan import LostRange, Plan, TopicPartition
from dynamic_kafka.model.snapshots import (
    BrokerSnapshot,
    ClusterSnapshot,
    PartitionOffsets,
    StateSnapshot,
    TopicSnapshot,
)
from dynamic_kafka.plan.planner import plan_run
from dynamic_kafka.state.rows import apply_plan
from tests.support.builders import NOW, a_row, state_of
from tests.support.builders import a_pipeline as pipeline
from tests.support.builders import a_stream as stream
from tests.support.builders import a_topic as topic
from tests.support.builders import brokers_of as brokers
from tests.support.builders import metadata_of as metadata

if TYPE_CHECKING:
    from dynamic_kafka.metadata.snapshot import MetadataSnapshot


def state(*rows: tuple[str, str, int, int], status: str = "active", topic_id: str | None = "id-1") -> StateSnapshot:
    return state_of(
        *(
            a_row(TopicPartition(cluster_id=c, topic=t, partition=p), n, topic_id=topic_id, status=status)
            for c, t, p, n in rows
        )
    )


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
    def test_new_topic_on_a_stream_with_state_starts_at_earliest(self) -> None:
        """Hole 9: with `latest`, a topic added to a stream the pipeline already reads (a migration) is read from
        earliest, like Flink's discovered partitions; a topic of a stream new to the state follows the initializer."""
        p = plan(
            metadata(stream(east=["orders", "orders-v2"]), stream("payments", east=["payments"])),
            brokers(
                east=[topic("orders", {0: (0, 5)}), topic("orders-v2", {0: (2, 6)}), topic("payments", {0: (1, 8)})]
            ),
            state(("east", "orders", 0, 5)),
            streams=["orders", "payments"],
            starting_offsets="latest",
        )
        assert ranges(p) == {
            ("east", "orders", 0): (5, 5),
            ("east", "orders-v2", 0): (2, 6),
            ("east", "payments", 0): (8, 8),
        }
        new = {f.topic: f.message for f in p.findings if f.kind == "new_topic"}
        assert "earliest (its stream already has state)" in new["orders-v2"]
        assert new["payments"].endswith("starting at latest")

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

    def test_specific_offsets_place_unlisted_partitions_at_the_group_then_the_fallback(self) -> None:
        # Flink's SpecifiedOffsetsInitializer: listed offset, else the group's committed offset, else the reset.
        snap = brokers(east=[topic("orders", {0: (0, 9), 1: (0, 9), 2: (3, 9)}, start_lookups={0: 7, 1: 5, 2: None})])
        spec = {"specific": {"offsets": {"orders": {0: 4}}, "group_id": "g", "fallback": "latest"}}
        p = plan(metadata(stream(east=["orders"])), snap, starting_offsets=spec)
        assert ranges(p) == {
            ("east", "orders", 0): (4, 9),
            ("east", "orders", 1): (5, 9),
            ("east", "orders", 2): (9, 9),
        }

    def test_specific_offsets_without_the_group_or_a_fallback_fail_naming_the_partition(self) -> None:
        snap = brokers(east=[topic("orders", {0: (0, 9)}, start_lookups={0: None})])
        spec = {"specific": {"offsets": {}, "group_id": "g", "fallback": "none"}}
        with pytest.raises(PlanningError, match=r"east/orders\[0\].*'none'"):
            plan(metadata(stream(east=["orders"])), snap, starting_offsets=spec)

    def test_a_custom_initializer_places_only_a_partitions_first_start(self) -> None:
        # Its answers (checked when it was called) for both partitions; partition 0 has state and resumes from it.
        snap = brokers(east=[topic("orders", {0: (0, 9), 1: (0, 9)}, start_lookups={0: 1, 1: 6})])
        custom = {"custom": {"function": "pkg.mod:start"}}
        fresh = plan(metadata(stream(east=["orders"])), snap, starting_offsets=custom)
        assert ranges(fresh) == {("east", "orders", 0): (1, 9), ("east", "orders", 1): (6, 9)}
        resumed = plan(
            metadata(stream(east=["orders"])), snap, state(("east", "orders", 0, 3)), starting_offsets=custom
        )
        assert ranges(resumed) == {("east", "orders", 0): (3, 9), ("east", "orders", 1): (0, 9)}

    def test_a_custom_initializer_not_asked_about_a_fresh_partition_fails_the_plan(self) -> None:
        snap = brokers(east=[topic("orders", {0: (0, 9)}, start_lookups={0: None})])
        with pytest.raises(PlanningError, match=r"'pkg.mod:start' was not asked about east/orders\[0\]"):
            plan(metadata(stream(east=["orders"])), snap, starting_offsets={"custom": {"function": "pkg.mod:start"}})

    def test_a_custom_stopping_initializer_stops_each_run_where_it_answered_never_before_the_start(self) -> None:
        # Its answers (checked within [earliest, latest] when it was called) stop every run, not only the first.
        snap = brokers(east=[topic("orders", {0: (0, 9), 1: (0, 9)}, stop_lookups={0: 4, 1: 2})])
        custom = {"custom": {"function": "pkg.mod:stop"}}
        first = plan(metadata(stream(east=["orders"])), snap, stopping_offsets=custom)
        assert ranges(first) == {("east", "orders", 0): (0, 4), ("east", "orders", 1): (0, 2)}
        later = plan(metadata(stream(east=["orders"])), snap, state(("east", "orders", 1, 5)), stopping_offsets=custom)
        assert ranges(later) == {("east", "orders", 0): (0, 4), ("east", "orders", 1): (5, 5)}

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


def on(cid: str, topics: list[str], starting: offsets.AnyInitializer | None = None) -> ClusterMetadata:
    """A cluster entry of the metadata, with its own ``starting_offsets`` when given."""
    return ClusterMetadata(
        cluster_id=cid, bootstrap_servers=f"{cid}:9092", topics=frozenset(topics), starting_offsets=starting
    )


def placed(*clusters: ClusterMetadata, stream_id: str = "orders") -> MetadataSnapshot:
    return metadata(KafkaStream(stream_id=stream_id, clusters={c.cluster_id: c for c in clusters}))


class TestClusterStartingOverride:
    """A cluster's own ``starting_offsets`` (the metadata's per-cluster override) decides where every partition of
    that cluster without committed state starts, whether its stream is new or already tracked; without one, a
    cluster or topic new to a tracked stream starts at earliest (the loss-free default)."""

    def test_tracked_stream_moved_to_a_mirror_starts_at_the_mirrors_timestamp(self) -> None:
        """Failover: the stream read east, now lists west only, whose override is the switch time. Each partition
        starts where the timestamp lookup found the first record at or after it (none found: latest), so the
        mirrored history east already landed is not read again."""
        p = plan(
            placed(on("west", ["orders"], offsets.timestamp(1_000))),
            brokers(west=[topic("orders", {0: (0, 10), 1: (0, 8)}, start_lookups={0: 4, 1: None})]),
            state(("east", "orders", 0, 4), ("east", "orders", 1, 8)),
        )
        assert ranges(p) == {("west", "orders", 0): (4, 10), ("west", "orders", 1): (8, 8)}
        new = next(f.message for f in p.findings if f.kind == "new_topic")
        assert new.endswith("starting at timestamp 1970-01-01T00:00:01.000Z (the starting_offsets of cluster 'west')")

    def test_topic_added_to_a_tracked_stream_follows_its_clusters_override(self) -> None:
        p = plan(
            placed(on("east", ["orders", "orders-v2"], offsets.latest())),
            brokers(east=[topic("orders", {0: (0, 5)}), topic("orders-v2", {0: (2, 6)})]),
            state(("east", "orders", 0, 3)),
        )
        assert ranges(p) == {("east", "orders", 0): (3, 5), ("east", "orders-v2", 0): (6, 6)}

    def test_without_an_override_a_cluster_new_to_a_tracked_stream_starts_at_earliest(self) -> None:
        """The pipeline's own initializer is for streams new to the state; a tracked stream's new cluster, even one
        the pipeline's timestamp would start late, is read from earliest so nothing written to it is skipped."""
        p = plan(
            placed(on("west", ["orders"])),
            brokers(west=[topic("orders", {0: (1, 9)}, start_lookups={0: 7})]),
            state(("east", "orders", 0, 4)),
            starting_offsets={"timestamp": 1_000},
        )
        assert ranges(p) == {("west", "orders", 0): (1, 9)}
        new = next(f.message for f in p.findings if f.kind == "new_topic")
        assert "earliest (its stream already has state)" in new

    def test_committed_state_wins_over_the_override(self) -> None:
        p = plan(
            placed(on("west", ["orders"], offsets.timestamp(1_000))),
            brokers(west=[topic("orders", {0: (0, 10)}, start_lookups={0: 2})]),
            state(("west", "orders", 0, 6)),
        )
        assert ranges(p) == {("west", "orders", 0): (6, 10)}

    @pytest.mark.parametrize(
        "override",
        [
            offsets.latest(),
            offsets.timestamp(1_000),
            offsets.specific({"orders": {}}, fallback="latest"),
            offsets.committed("g", reset="latest"),
        ],
    )
    def test_new_partition_of_a_read_topic_starts_at_earliest_whatever_the_override(
        self, override: offsets.AnyInitializer
    ) -> None:
        """The override says where reading a cluster's topic begins. A partition added to a topic already read was
        created after that, so all its records are unread: it starts at earliest (as Flink's partition discovery
        does), never at a later run's latest."""
        p = plan(
            placed(on("east", ["orders"], override)),
            brokers(east=[topic("orders", {0: (0, 10), 1: (0, 4)}, start_lookups={0: 9, 1: 3})]),
            state(("east", "orders", 0, 10)),
        )
        assert ranges(p) == {("east", "orders", 0): (10, 10), ("east", "orders", 1): (0, 4)}
        assert "new_partition" in kinds(p)

    def test_recreated_topic_reset_reads_from_earliest_despite_the_override(self) -> None:
        p = plan(
            placed(on("east", ["orders"], offsets.latest())),
            brokers(east=[topic("orders", {0: (0, 4)}, topic_id="id-2")]),
            state(("east", "orders", 0, 7)),
            on_topic_recreated="reset",
        )
        assert ranges(p) == {("east", "orders", 0): (0, 4)}


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
        ("snap_topic", "known_id", "reason"),
        [
            (topic("orders", {0: (0, 10)}, topic_id="id-2"), "id-1", "topic id changed"),
            # Without recorded topic ids (an old state), an offset beyond latest is all there is to go by.
            (topic("orders", {0: (0, 3)}), None, "beyond latest"),
        ],
    )
    def test_recreated_topic_fails_by_default(
        self, snap_topic: TopicSnapshot, known_id: str | None, reason: str
    ) -> None:
        with pytest.raises(TopicRecreatedError, match=reason) as info:
            plan(
                metadata(stream(east=["orders"])),
                brokers(east=[snap_topic]),
                state(("east", "orders", 0, 7), topic_id=known_id),
            )
        assert (info.value.cluster_id, info.value.topic) == ("east", "orders")

    def test_recreated_with_fewer_partitions_is_reset_once(self) -> None:
        """Hole 1: the old topic's partition 1 has no counterpart; its row is marked removed in the reset's own
        commit, and the next plan resumes the new topic instead of resetting it again."""
        meta = metadata(stream(east=["orders"]))
        old = state(("east", "orders", 0, 7), ("east", "orders", 1, 9))
        first = plan(
            meta, brokers(east=[topic("orders", {0: (0, 4)}, topic_id="id-2")]), old, on_topic_recreated="reset"
        )
        assert ranges(first) == {("east", "orders", 0): (0, 4)}
        assert "topic_recreated" in kinds(first)
        assert first.removals == (TopicPartition(cluster_id="east", topic="orders", partition=1),)
        after = StateSnapshot(
            pipeline_id="p", table_version=4, partitions={r.key: r for r in apply_plan(first, old.partitions, NOW)}
        )
        again = plan(
            meta, brokers(east=[topic("orders", {0: (0, 6)}, topic_id="id-2")]), after, on_topic_recreated="fail"
        )
        assert ranges(again) == {("east", "orders", 0): (4, 6)}
        assert "topic_recreated" not in kinds(again)
        assert again.removals == ()

    def test_old_incarnation_row_never_resumes_a_new_partition(self) -> None:
        """After a reset to one partition, the new topic growing a partition 1 reads it from earliest, not from the
        removed old row's offset."""
        rows = {
            **state(("east", "orders", 0, 4), topic_id="id-2").partitions,
            **state(("east", "orders", 1, 9), topic_id="id-1", status="removed").partitions,
        }
        st = StateSnapshot(pipeline_id="p", table_version=5, partitions=rows)
        p = plan(
            metadata(stream(east=["orders"])),
            brokers(east=[topic("orders", {0: (0, 4), 1: (0, 2)}, topic_id="id-2")]),
            st,
        )
        assert ranges(p) == {("east", "orders", 0): (4, 4), ("east", "orders", 1): (0, 2)}
        assert "topic_recreated" not in kinds(p)

    def test_truncated_log_fails_naming_the_range(self) -> None:
        """Same topic id, latest below the committed offset: a truncation, decided by on_data_loss."""
        with pytest.raises(
            DataLossError, match=r"east/orders\[0\] offsets \[3, 7\) below the committed offset 7 are gone"
        ) as info:
            plan(
                metadata(stream(east=["orders"])),
                brokers(east=[topic("orders", {0: (0, 3)})]),
                state(("east", "orders", 0, 7)),
            )
        assert info.value.truncated == (
            LostRange(cluster_id="east", topic="orders", partition=0, from_offset=3, to_offset=7),
        )

    def test_truncated_log_skip_resumes_at_latest(self) -> None:
        p = plan(
            metadata(stream(east=["orders"])),
            brokers(east=[topic("orders", {0: (0, 3)})]),
            state(("east", "orders", 0, 7)),
            on_data_loss="skip",
            on_topic_recreated="fail",
        )
        assert ranges(p) == {("east", "orders", 0): (3, 3)}
        found = next(f for f in p.findings if f.kind == "truncated")
        assert (found.from_offset, found.to_offset) == (3, 7)

    @staticmethod
    def _refilled(diverged_at: int | None, **config: Any) -> Plan:
        """Issue 11: committed 7 under leader epoch 2; an unclean election truncated the log and producers refilled
        it to 9 before this run: latest (9) is beyond the committed offset, only the epoch check can tell."""
        committed = state(("east", "orders", 0, 7))
        row = committed.partitions[TopicPartition(cluster_id="east", topic="orders", partition=0)]
        committed = committed.model_copy(update={"partitions": {row.key: row.model_copy(update={"leader_epoch": 2})}})
        offsets = PartitionOffsets(earliest=0, latest=9, leader_epoch=4, diverged_at=diverged_at)
        snap = BrokerSnapshot(
            clusters={
                "east": ClusterSnapshot(
                    cluster_id="east",
                    topics={"orders": TopicSnapshot(topic="orders", topic_id="id-1", partitions={0: offsets})},
                )
            },
            taken_at=NOW,
        )
        return plan(metadata(stream(east=["orders"])), snap, committed, **config)

    def test_diverged_log_refilled_past_the_committed_offset_fails_naming_the_range(self) -> None:
        with pytest.raises(
            DataLossError, match=r"east/orders\[0\] offsets \[3, 7\) below the committed offset 7 are gone"
        ) as info:
            self._refilled(3, on_data_loss="fail")
        assert info.value.truncated == (
            LostRange(cluster_id="east", topic="orders", partition=0, from_offset=3, to_offset=7),
        )

    def test_diverged_log_skip_resumes_where_it_diverged_and_records_the_new_epoch(self) -> None:
        p = self._refilled(3, on_data_loss="skip")
        assert ranges(p) == {("east", "orders", 0): (3, 9)}  # the new records at the reused offsets 3..6 are read
        found = next(f for f in p.findings if f.kind == "truncated")
        assert (found.from_offset, found.to_offset) == (3, 7)
        assert "leader epoch recorded with it ended at 3" in found.message
        assert p.splits[0].leader_epoch == 4
        (row,) = apply_plan(p, {}, NOW)
        assert (row.next_offset, row.leader_epoch) == (9, 4)

    def test_clean_leader_change_or_unchecked_position_resumes_at_the_committed_offset(self) -> None:
        """No divergence found (a clean leader change, or no usable answer): no finding, nothing re-read."""
        p = self._refilled(None, on_data_loss="fail")
        assert ranges(p) == {("east", "orders", 0): (7, 9)}
        assert "truncated" not in kinds(p)

    def test_divergence_below_earliest_resumes_at_earliest(self) -> None:
        """Retention may have moved the log start past the divergence point since: resume where the log starts."""
        st = state(("east", "orders", 0, 7))
        snap = brokers(east=[topic("orders", {0: (5, 9)})])
        parts = snap.clusters["east"].topics["orders"].partitions
        diverged = PartitionOffsets(earliest=5, latest=9, leader_epoch=4, diverged_at=3)
        topic_snap = snap.clusters["east"].topics["orders"].model_copy(update={"partitions": {**parts, 0: diverged}})
        snap = brokers(east=[topic_snap])
        p = plan(metadata(stream(east=["orders"])), snap, st, on_data_loss="skip")
        assert ranges(p) == {("east", "orders", 0): (5, 9)}
        found = next(f for f in p.findings if f.kind == "truncated")
        assert (found.from_offset, found.to_offset) == (5, 7)

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

    def test_missing_topic_keeps_its_state_and_warns_under_on_topic_missing_warn(self) -> None:
        p = plan(
            metadata(stream(east=["orders"])),
            brokers(east=[TopicSnapshot(topic="orders", exists=False)]),
            state(("east", "orders", 0, 3)),
            on_topic_missing="warn",
        )
        assert p.splits == ()
        assert p.removals == ()
        assert kinds(p) == ["topic_missing"]

    def test_missing_topics_fail_the_plan_by_default_naming_each_one(self) -> None:
        with pytest.raises(TopicMissingError) as raised:
            plan(
                metadata(stream(east=["orders", "refunds"], west=["orders"])),
                brokers(
                    east=[topic("orders", {0: (0, 3)}), TopicSnapshot(topic="refunds", exists=False)],
                    west=[TopicSnapshot(topic="orders", exists=False)],
                ),
            )
        assert raised.value.missing == (("east", "refunds"), ("west", "orders"))
        assert raised.value.retriable is False
        assert "on_topic_missing: warn" in str(raised.value)

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


class TestPatternsAndPartitionSets:
    """Issue 27 item 2: partition sets restrict what is read; a pattern's cluster that cannot be listed is skipped
    with its offsets kept."""

    def test_partition_set_reads_only_its_partitions(self) -> None:
        east = ClusterMetadata(
            cluster_id="east",
            bootstrap_servers="east:9092",
            topics=frozenset({"orders"}),
            partitions={"orders": frozenset({0, 2, 5})},
        )
        p = plan(placed(east), brokers(east=[topic("orders", {0: (0, 4), 1: (0, 4), 2: (1, 3)})]))
        assert ranges(p) == {("east", "orders", 0): (0, 4), ("east", "orders", 2): (1, 3)}
        missing = [f for f in p.findings if f.kind == "partition_missing"]
        assert len(missing) == 1
        assert missing[0].is_warning
        assert "partition(s) 5 of topic 'orders' on cluster 'east'" in missing[0].message

    def test_partition_left_out_of_the_set_is_removed_with_its_offset_kept_and_one_added_starts_at_earliest(
        self,
    ) -> None:
        east = ClusterMetadata(
            cluster_id="east",
            bootstrap_servers="east:9092",
            topics=frozenset({"orders"}),
            partitions={"orders": frozenset({1, 2})},
        )
        p = plan(
            placed(east),
            brokers(east=[topic("orders", {0: (0, 9), 1: (0, 9), 2: (3, 9)})]),
            state(("east", "orders", 0, 4), ("east", "orders", 1, 5)),
            starting_offsets="latest",
        )
        assert ranges(p) == {("east", "orders", 1): (5, 9), ("east", "orders", 2): (3, 9)}
        assert [str(k) for k in p.removals] == [str(TopicPartition(cluster_id="east", topic="orders", partition=0))]

    def test_unlistable_pattern_cluster_is_skipped_and_its_matching_partitions_stay_active(self) -> None:
        east = ClusterMetadata(cluster_id="east", bootstrap_servers="east:9092", topic_pattern="orders-.*")
        meta = placed(east).model_copy(update={"unresolved": {"east": "listing topics: timed out"}})
        st = state(("east", "orders-eu", 0, 4), ("east", "other", 0, 2))
        with pytest.raises(ClusterUnreachableError, match="timed out"):
            plan(meta, brokers(), st)
        p = plan(meta, brokers(), st, skip_unreachable_clusters=True)
        assert p.skipped_clusters == ("east",)
        # The pattern's partition is kept as it is; a partition no pattern or topic names any more is removed.
        assert [k.topic for k in p.removals] == ["other"]

    def test_topic_created_to_match_on_a_tracked_stream_starts_at_earliest(self) -> None:
        """Expanded metadata lists the new topic like any other: on a stream with state it is discovered."""
        east = ClusterMetadata(
            cluster_id="east",
            bootstrap_servers="east:9092",
            topics=frozenset({"orders-eu", "orders-us"}),
            topic_pattern="orders-.*",
        )
        p = plan(
            placed(east),
            brokers(east=[topic("orders-eu", {0: (0, 6)}), topic("orders-us", {0: (2, 7)})]),
            state(("east", "orders-eu", 0, 6)),
            starting_offsets="latest",
        )
        assert ranges(p) == {("east", "orders-eu", 0): (6, 6), ("east", "orders-us", 0): (2, 7)}
        assert "new_topic" in kinds(p)
