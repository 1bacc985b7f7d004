"""``offsets reset`` as properties over generated states and broker offsets (the invariants in
:mod:`dynamic_kafka.operations.offsets_reset`): what ``offsets show`` shows is the state's next offsets, a reset
moves them exactly to the target within the broker's range, and resetting to what was shown changes nothing.
Pure (:func:`decide_reset`): no broker, no Delta.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dynamic_kafka.errors import ConfigError
from dynamic_kafka.model.plan import TopicPartition
from dynamic_kafka.model.snapshots import BrokerSnapshot, ClusterSnapshot, PartitionOffsets, TopicSnapshot
from dynamic_kafka.operations.offsets_reset import ResetSelection, ResetTarget, decide_reset
from tests.support.builders import NOW, a_row, state_of

if TYPE_CHECKING:
    from dynamic_kafka.model.snapshots import StateSnapshot
    from dynamic_kafka.operations.offsets_reset import ResetDecision

PROPERTIES = settings(max_examples=100, deadline=None)
KEYS = [TopicPartition(cluster_id="east", topic="orders", partition=p) for p in range(3)]
BOUNDS = st.tuples(st.integers(0, 30), st.integers(0, 30))
TARGETS = st.sampled_from(["earliest", "latest"]) | st.integers(0, 70).map(lambda n: f"offset:{n}")


class World:
    """A committed state of three partitions and the broker's offsets of each (every committed offset within)."""

    def __init__(self, state: StateSnapshot, brokers: BrokerSnapshot) -> None:
        self.state = state
        self.brokers = brokers

    def __repr__(self) -> str:
        return f"World({self.shown()}, {self.brokers.clusters['east'].topics['orders'].partitions})"

    def shown(self, state: StateSnapshot | None = None) -> dict[TopicPartition, int]:
        """What ``offsets show`` lists as each partition's next offset."""
        return {k: row.next_offset for k, row in (state or self.state).partitions.items()}

    def reset(
        self, target: str, state: StateSnapshot | None = None, selection: ResetSelection | None = None
    ) -> ResetDecision:
        state = state or self.state
        picked = {k: r for k, r in state.partitions.items() if (selection or ResetSelection()).picks(r)}
        return decide_reset(state, self.brokers, ResetTarget.parse(target), picked)

    def applied(self, decision: ResetDecision, state: StateSnapshot | None = None) -> StateSnapshot:
        """The state after the reset's commit: each change's partition at its new offset."""
        state = state or self.state
        rows = dict(state.partitions)
        for change in decision.changes:
            key = TopicPartition(cluster_id=change.cluster_id, topic=change.topic, partition=change.partition)
            rows[key] = rows[key].model_copy(update={"next_offset": change.to_offset})
        return state.model_copy(update={"partitions": rows})


@st.composite
def worlds(draw: st.DrawFn) -> World:
    partitions = {}
    rows = []
    for key in KEYS:
        earliest, length = draw(BOUNDS)
        partitions[key.partition] = PartitionOffsets(earliest=earliest, latest=earliest + length)
        rows.append(a_row(key, draw(st.integers(earliest, earliest + length)), topic_id="tid"))
    topic = TopicSnapshot(topic="orders", topic_id="tid", partitions=partitions)
    brokers = BrokerSnapshot(
        clusters={"east": ClusterSnapshot(cluster_id="east", topics={"orders": topic})}, taken_at=NOW
    )
    return World(state_of(*rows), brokers)


def in_range(world: World, target: str) -> bool:
    """Whether ``target`` is within every partition's broker range."""
    if not target.startswith("offset:"):
        return True
    wanted = int(target.removeprefix("offset:"))
    return all(
        o.earliest <= wanted <= o.latest for o in world.brokers.clusters["east"].topics["orders"].partitions.values()
    )


@PROPERTIES
@given(worlds())
def test_resetting_each_partition_to_the_offset_shown_changes_nothing(world: World) -> None:
    for key, shown in world.shown().items():
        decision = world.reset(f"offset:{shown}", selection=ResetSelection(partition=key.partition))

        assert decision.changes == ()


@PROPERTIES
@given(worlds(), TARGETS)
def test_a_reset_moves_exactly_to_the_target_or_is_refused_whole(world: World, target: str) -> None:
    if not in_range(world, target):
        with pytest.raises(ConfigError, match="outside"):
            world.reset(target)
        return

    decision = world.reset(target)
    after = world.shown(world.applied(decision))

    partitions = world.brokers.clusters["east"].topics["orders"].partitions
    for key, offset in after.items():
        bounds = partitions[key.partition]
        wanted = {"earliest": bounds.earliest, "latest": bounds.latest}.get(target)
        assert offset == (int(target.removeprefix("offset:")) if wanted is None else wanted)
    for change in decision.changes:
        assert change.from_offset != change.to_offset, "a no-op is left out"
        assert (
            change.from_offset
            == world.shown()[TopicPartition(**change.model_dump(include={"cluster_id", "topic", "partition"}))]
        )
        assert change.read_again + change.skipped == abs(change.to_offset - change.from_offset)
    assert len(decision.changes) == sum(world.shown()[k] != after[k] for k in after)


@PROPERTIES
@given(worlds(), TARGETS)
def test_show_reset_show_and_resetting_back_to_what_was_shown_restores_every_offset(world: World, target: str) -> None:
    if not in_range(world, target):
        return
    before = world.shown()
    moved = world.applied(world.reset(target))

    restored = moved
    for key, offset in before.items():
        back = world.reset(f"offset:{offset}", moved, ResetSelection(partition=key.partition))
        restored = world.applied(back, restored)

    assert world.shown(restored) == before
