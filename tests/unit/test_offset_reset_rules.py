"""The rules of ``offsets reset`` without a broker: parsing ``--to``, deciding the new offsets from a broker
snapshot, and the state commit that records an operation (``StateStore.record_operation``).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pytest

from dynamic_kafka.errors import ConfigError, RunInProgressError, StateError, TopicRecreatedError
from dynamic_kafka.model.plan import Plan, Split, TopicPartition
from dynamic_kafka.model.snapshots import (
    BrokerSnapshot,
    ClusterSnapshot,
    PartitionOffsets,
    PartitionState,
    StateSnapshot,
    TopicSnapshot,
)
from dynamic_kafka.model.summary import RunSummary
from dynamic_kafka.operations.offsets_reset import OffsetReset, ResetSelection, ResetTarget, decide_reset
from dynamic_kafka.state import StateStore
from tests.support.builders import a_row

if TYPE_CHECKING:
    from pathlib import Path

T0 = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
EAST0 = TopicPartition(cluster_id="east", topic="orders", partition=0)
EAST1 = TopicPartition(cluster_id="east", topic="orders", partition=1)


def row(key: TopicPartition, next_offset: int, status: str = "active") -> PartitionState:
    return a_row(key, next_offset, topic_id="tid", status=status, updated_run_seq=1)


def brokers(lookups: dict[int, int | None] | None = None, topic_id: str = "tid") -> BrokerSnapshot:
    topic = TopicSnapshot(
        topic="orders",
        topic_id=topic_id,
        partitions={0: PartitionOffsets(earliest=2, latest=20), 1: PartitionOffsets(earliest=0, latest=8)},
        start_lookups=lookups or {},
    )
    return BrokerSnapshot(clusters={"east": ClusterSnapshot(cluster_id="east", topics={"orders": topic})}, taken_at=T0)


STATE = StateSnapshot(pipeline_id="p", table_version=3, partitions={EAST0: row(EAST0, 10), EAST1: row(EAST1, 8)})


def moves(target: str, snapshot: BrokerSnapshot | None = None, state: StateSnapshot = STATE) -> list[tuple[int, int]]:
    changes = decide_reset(state, snapshot or brokers(), ResetTarget.parse(target), dict(state.partitions)).changes
    return [(c.from_offset, c.to_offset) for c in changes]


def test_targets_resolve_against_the_broker_and_no_ops_are_left_out() -> None:
    assert moves("earliest") == [(10, 2), (8, 0)]
    assert moves("latest") == [(10, 20)], "partition 1 is at its latest already"
    # A timestamp with no record at or after it resolves to latest.
    assert moves("timestamp:1000", brokers({0: 5, 1: None})) == [(10, 5)]
    assert moves("offset:8") == [(10, 8)]


def test_offsets_outside_the_broker_range_are_refused_naming_every_partition() -> None:
    with pytest.raises(ConfigError) as refused:
        moves("offset:1")
    assert "east/orders[0]: offset 1 is outside [2, 20]" in str(refused.value)
    assert "east/orders[1]" not in str(refused.value), "partition 1 has offset 1"
    with pytest.raises(ConfigError, match=r"east/orders\[1\]: offset 9 is outside \[0, 8\]"):
        moves("offset:9")


def test_a_rewind_below_a_recreated_topics_floor_is_refused() -> None:
    state = STATE.model_copy(update={"backfill_floors": {EAST0: 6}})
    with pytest.raises(ConfigError, match="below 6"):
        moves("offset:4", state=state)
    assert moves("offset:7", state=state) == [(10, 7), (8, 7)]


def test_a_rewind_stops_at_a_clusters_handover_and_says_why() -> None:
    # A failover's handover (east's timestamp starting_offsets in the metadata): partition 0's first offset at or
    # after it is 6, partition 1's is 9 (none yet: latest). Below are a mirror's copies, landed under the old
    # cluster's coordinates.
    handover_ms = int(T0.timestamp() * 1000)
    at_handover = brokers()
    topic = at_handover.clusters["east"].topics["orders"].model_copy(update={"floor_lookups": {0: 6, 1: None}})
    at_handover = at_handover.model_copy(
        update={"clusters": {"east": ClusterSnapshot(cluster_id="east", topics={"orders": topic})}}
    )
    rows = dict(STATE.partitions)
    decided = decide_reset(STATE, at_handover, ResetTarget.parse("earliest"), rows, handovers={"east": handover_ms})

    assert [(c.partition, c.from_offset, c.to_offset) for c in decided.changes] == [(0, 10, 6)]
    assert [(c.partition, c.wanted, c.to_offset) for c in decided.clamps] == [(0, 2, 6), (1, 0, 8)]
    assert all("2026-11-27T12:00:00.000Z, the handover of cluster 'east'" in c.reason for c in decided.clamps)
    result = OffsetReset(
        pipeline_id="p",
        to="earliest",
        reason="bad deploy",
        requested_by="me",
        changes=decided.changes,
        clamps=decided.clamps,
        unchanged=1,
        applied=False,
        run_seq=2,
    )
    shown = result.text()
    assert "east/orders[1] stops at 8, not at 0: the first offset at or after 2026-11-27T12:00:00.000Z" in shown
    assert "a mirror's copies of records the old cluster delivered" in shown
    nothing = (result.model_copy(update={"changes": (), "clamps": decided.clamps[1:]})).text()
    assert nothing.startswith("pipeline p: every selected partition is already at earliest or as far back as it may")
    assert "east/orders[1] stops at 8, not at 0" in nothing
    # Without the handover the same floors are the bootstrap archive's until.
    bootstrapped = decide_reset(STATE, at_handover, ResetTarget.parse("offset:3"), rows).clamps
    assert [(c.partition, c.wanted, c.to_offset) for c in bootstrapped] == [(0, 3, 6), (1, 3, 8)]
    assert all("bootstrap archive's until" in c.reason for c in bootstrapped)


def test_a_recreated_topic_is_not_reset() -> None:
    with pytest.raises(TopicRecreatedError, match="topic id is other"):
        moves("earliest", brokers(topic_id="other"))


@pytest.mark.parametrize("text", ["", "first", "offset:", "offset:-3", "timestamp:", "latest:4", "timestamp:soon"])
def test_unknown_targets_are_refused_with_the_forms(text: str) -> None:
    with pytest.raises(ConfigError, match="Write --to earliest, latest, timestamp"):
        ResetTarget.parse(text)


def test_a_removed_partition_is_selected_only_when_its_cluster_or_topic_is_named() -> None:
    removed = row(EAST1, 8, status="removed")
    assert not ResetSelection().picks(removed)
    assert ResetSelection(cluster_id="east").picks(removed)
    assert ResetSelection(topic="orders", partition=1).picks(removed)
    assert not ResetSelection(cluster_id="west").picks(removed)


# --- the state commit --------------------------------------------------------------------------------------------


def committed_store(tmp_path: Path) -> StateStore:
    store = StateStore(tmp_path / "state", "p", clock=lambda: T0)
    splits = [
        Split(
            cluster_id="east",
            topic="orders",
            partition=p,
            start_offset=0,
            stop_offset=10,
            stream_ids=("orders",),
            topic_id="tid",
            leader_epoch=4,
            bootstrap_servers="east:9092",
        )
        for p in (0, 1)
    ]
    first = Plan(pipeline_id="p", run_seq=1, splits=tuple(splits), planned_at=T0)
    version = store.begin_run(first, expected_version=None)
    store.commit_run(first, summary=RunSummary.of_plan(first, "committed"), expected_version=version)
    return store


def reset_summary(run_seq: int) -> RunSummary:
    return RunSummary(pipeline_id="p", run_seq=run_seq, status="reset", reason="bad deploy", requested_by="me")


def test_an_operation_moves_offsets_raises_the_frontier_and_is_a_run_of_the_history(tmp_path: Path) -> None:
    store = committed_store(tmp_path)
    state = store.load()

    store.record_operation(
        reset_summary(2), expected_version=state.table_version or 0, offsets={EAST0: 3}, frontier={EAST0: 10}
    )

    after = store.load()
    moved, kept = after.partitions[EAST0], after.partitions[EAST1]
    assert (moved.next_offset, moved.updated_run_seq, moved.leader_epoch) == (3, 2, None)
    assert (kept.next_offset, kept.updated_run_seq, kept.leader_epoch) == (10, 1, 4)
    assert after.backfilled == {EAST0: 10}
    assert after.last_run is not None
    assert (after.last_run.run_seq, after.last_run.status) == (2, "committed")
    (history, _) = store.run_history(limit=2)
    assert RunSummary.model_validate_json(history.summary_json or "").reason == "bad deploy"
    assert after.next_run_seq == 3


def test_an_operation_is_refused_beside_a_planned_run_and_after_another_commit(tmp_path: Path) -> None:
    store = committed_store(tmp_path)
    version = store.load().table_version or 0
    with pytest.raises(StateError, match="is 2"):
        store.record_operation(reset_summary(5), expected_version=version, offsets={EAST0: 3})
    planned = Plan(pipeline_id="p", run_seq=2, splits=(), planned_at=T0)
    live = store.begin_run(planned, expected_version=version, owner="someone", lease_expires_at=T0 + timedelta(hours=1))

    with pytest.raises(RunInProgressError):
        store.record_operation(reset_summary(3), expected_version=live, offsets={EAST0: 3})
    with pytest.raises(RunInProgressError):  # decided from the version before the run planned
        store.record_operation(reset_summary(2), expected_version=version, offsets={EAST0: 3})
    crashed = StateStore(tmp_path / "state", "p", clock=lambda: T0 + timedelta(hours=2))
    with pytest.raises(StateError, match="abandon --run-seq 2"):
        crashed.record_operation(reset_summary(3), expected_version=live, offsets={EAST0: 3})
    assert store.load().partitions[EAST0].next_offset == 10
