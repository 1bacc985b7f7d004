"""The planner's invariants (docs/design.md, "Invariants"; the rules in :mod:`dynamic_kafka.plan.planner`) over
generated inputs: any committed state, any broker offsets, any subscription, any data-loss, drain and cap settings.
Pure: no broker, no Delta.
"""

from __future__ import annotations

import itertools
from collections import Counter
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dynamic_kafka.errors import DataLossError, TopicRecreatedError
from dynamic_kafka.model.plan import TopicPartition
from dynamic_kafka.model.snapshots import (
    BrokerSnapshot,
    ClusterSnapshot,
    PartitionOffsets,
    StateSnapshot,
    TopicSnapshot,
)
from dynamic_kafka.plan.planner import plan_run
from dynamic_kafka.state.rows import apply_plan
from tests.support.builders import NOW, a_pipeline, a_row, a_stream, metadata_of, state_of

if TYPE_CHECKING:
    from dynamic_kafka.metadata.snapshot import MetadataSnapshot
    from dynamic_kafka.model.plan import Plan

CLUSTERS = ("east", "west")
TOPICS = ("orders", "refunds")
PROPERTIES = settings(max_examples=80, deadline=None)
# Findings that say why a partition does not resume exactly at its committed offset.
EXPLAINED = {"data_loss", "truncated", "topic_recreated"}


class Inputs:
    """One generated planning problem."""

    def __init__(
        self, metadata: MetadataSnapshot, brokers: BrokerSnapshot, state: StateSnapshot, config: dict[str, Any]
    ) -> None:
        self.metadata = metadata
        self.brokers = brokers
        self.state = state
        self.config = config

    def __repr__(self) -> str:
        return f"Inputs({self.metadata!r}, {self.brokers!r}, {self.state.partitions!r}, {self.config!r})"

    def plan(
        self, state: StateSnapshot | None = None, run_seq: int = 1, brokers: BrokerSnapshot | None = None, **config: Any
    ) -> Plan:
        return plan_run(
            pipeline=a_pipeline(**{**self.config, **config}),
            metadata=self.metadata,
            state=self.state if state is None else state,
            brokers=brokers or self.brokers,
            run_seq=run_seq,
            now=NOW,
        )

    def settled(self) -> BrokerSnapshot:
        """The brokers as the runs after the first see them: a divergence is found against the leader epoch of a
        committed offset, and the first run committed its offsets under the current epoch.
        """

        def calm(topic: TopicSnapshot) -> TopicSnapshot:
            partitions = {p: o.model_copy(update={"diverged_at": None}) for p, o in topic.partitions.items()}
            return topic.model_copy(update={"partitions": partitions})

        clusters = {
            cid: c.model_copy(update={"topics": {name: calm(t) for name, t in c.topics.items()}})
            for cid, c in self.brokers.clusters.items()
        }
        return self.brokers.model_copy(update={"clusters": clusters})

    def offsets(self, key: TopicPartition) -> PartitionOffsets | None:
        cluster = self.brokers.clusters.get(key.cluster_id)
        topic = cluster.topics.get(key.topic) if cluster is not None and cluster.reachable else None
        return topic.partitions.get(key.partition) if topic is not None and topic.exists else None

    def readable(self) -> set[TopicPartition]:
        """The subscribed partitions the brokers answered for."""
        keys = set()
        for cluster_id, topic in self.metadata.topics():
            cluster = self.brokers.clusters[cluster_id]
            snapshot = cluster.topics.get(topic) if cluster.reachable else None
            if snapshot is not None and snapshot.exists:
                keys.update(
                    TopicPartition(cluster_id=cluster_id, topic=topic, partition=p) for p in snapshot.partitions
                )
        return keys


def _offsets(earliest: int, length: int, diverged: int | None) -> PartitionOffsets:
    latest = earliest + length
    # A diverged log (KIP-320): the committed offset's leader epoch ended at `diverged_at`.
    return PartitionOffsets(
        earliest=earliest, latest=latest, diverged_at=None if diverged is None else min(diverged, latest)
    )


# Module-level strategies: Hypothesis validates a strategy object once, so nothing is built per example.
OFFSETS = st.builds(_offsets, st.integers(0, 20), st.integers(0, 25), st.none() | st.none() | st.integers(0, 45))
PARTITIONS = st.dictionaries(st.integers(0, 2), OFFSETS, min_size=1, max_size=3)
EXISTS = st.sampled_from([True, True, True, False])
TOPIC_IDS = st.sampled_from(["id-1", "id-1", "id-2"])
ROW_TOPIC_IDS = st.sampled_from(["id-1", "id-1", "id-2", None])
STATUSES = st.sampled_from(["active", "active", "removed"])
PLACED = st.sampled_from([True, True, True, False])
REACHABLE = st.sampled_from([True, True, True, True, True, False])
TOPIC_SETS = st.sets(st.sampled_from(TOPICS))
SUBSCRIBED = st.sets(st.sampled_from(TOPICS), min_size=1)
NEXT_OFFSETS = st.integers(0, 50)
NEAR = st.integers(-5, 30)
KEYS = st.lists(
    st.sampled_from(
        [TopicPartition(cluster_id=c, topic=t, partition=p) for c in CLUSTERS for t in TOPICS for p in range(4)]
    ),
    unique=True,
    max_size=8,
)
PER_PARTITION = st.none() | st.integers(5, 30)
PER_RUN = st.none() | st.integers(10, 100)


@st.composite
def inputs(draw: st.DrawFn, **fixed: Any) -> Inputs:
    # Mostly a subscription the brokers know: an empty one or a missing topic now and then.
    placements = {c: sorted(draw(SUBSCRIBED)) for c in CLUSTERS if draw(PLACED)}
    clusters = {}
    for cluster_id in CLUSTERS:
        if not draw(REACHABLE):
            clusters[cluster_id] = ClusterSnapshot(cluster_id=cluster_id, reachable=False, error="connection refused")
            continue
        topics = {
            name: TopicSnapshot(topic=name, exists=draw(EXISTS), topic_id=draw(TOPIC_IDS), partitions=draw(PARTITIONS))
            for name in sorted(draw(TOPIC_SETS) | set(placements.get(cluster_id, ()) if draw(EXISTS) else ()))
        }
        clusters[cluster_id] = ClusterSnapshot(cluster_id=cluster_id, topics=topics)
    rows = []
    for key in draw(KEYS):
        topic = clusters[key.cluster_id].topics.get(key.topic)
        offsets = topic.partitions.get(key.partition) if topic is not None else None
        # Mostly near the broker's range, where resuming, losing and truncating are decided.
        near = offsets is not None and draw(st.booleans())
        next_offset = max(0, offsets.earliest + draw(NEAR)) if near and offsets else draw(NEXT_OFFSETS)
        rows.append(a_row(key, next_offset, topic_id=draw(ROW_TOPIC_IDS), status=draw(STATUSES)))
    config: dict[str, Any] = {
        "on_data_loss": draw(st.sampled_from(["skip", "fail"])),
        "on_topic_recreated": draw(st.sampled_from(["reset", "fail"])),
        "on_topic_missing": "warn",
        "skip_unreachable_clusters": True,
        "drain_removed": draw(st.booleans()),
        "starting_offsets": draw(st.sampled_from(["earliest", "latest"])),
        "max_records_per_partition": draw(PER_PARTITION),
        "max_records_per_run": draw(PER_RUN),
        **fixed,
    }
    brokers = BrokerSnapshot(clusters=clusters, taken_at=NOW)
    state = state_of(*rows, table_version=3 if rows else None)
    return Inputs(metadata_of(a_stream(**placements)), brokers, state, config)


def lenient() -> st.SearchStrategy[Inputs]:
    """Inputs whose policies never refuse a plan, so every property sees one."""
    return inputs(on_data_loss="skip", on_topic_recreated="reset")


def explained(plan: Plan, key: TopicPartition) -> bool:
    return any(
        f.kind in EXPLAINED
        and (f.cluster_id, f.topic) == (key.cluster_id, key.topic)
        and f.partition in (None, key.partition)
        for f in plan.findings
    )


@PROPERTIES
@given(lenient())
def test_every_split_is_a_range_within_the_brokers_offsets_once_per_partition(given_inputs: Inputs) -> None:
    plan = given_inputs.plan()

    assert not [k for k, n in Counter(s.key for s in plan.splits).items() if n > 1], "a partition planned twice"
    for split in plan.splits:
        offsets = given_inputs.offsets(split.key)
        assert offsets is not None, f"{split.key} is read but its broker did not answer for it"
        assert offsets.earliest <= split.start_offset <= split.stop_offset <= offsets.latest, split


@PROPERTIES
@given(lenient())
def test_a_committed_partition_resumes_at_its_offset_unless_a_finding_says_why(given_inputs: Inputs) -> None:
    plan = given_inputs.plan()

    for split in plan.splits:
        row = given_inputs.state.partitions.get(split.key)
        topic = given_inputs.brokers.clusters[split.cluster_id].topics[split.topic]
        same_incarnation = row is not None and not (row.topic_id and topic.topic_id and row.topic_id != topic.topic_id)
        if row is not None and same_incarnation and split.start_offset != row.next_offset:
            # Neither a gap (records skipped) nor an overlap (records read twice) without a reported reason.
            assert explained(plan, split.key), (split, row, plan.findings)


@PROPERTIES
@given(lenient())
def test_every_subscribed_partition_the_brokers_answered_for_is_in_the_plan(given_inputs: Inputs) -> None:
    plan = given_inputs.plan()

    assert given_inputs.readable() <= {s.key for s in plan.splits}


@PROPERTIES
@given(lenient())
def test_only_subscribed_partitions_are_read_and_unsubscribed_ones_only_to_drain_them(given_inputs: Inputs) -> None:
    plan = given_inputs.plan()
    subscribed = set(given_inputs.metadata.topics())

    for split in plan.splits:
        if (split.cluster_id, split.topic) in subscribed:
            assert not split.draining
            continue
        assert given_inputs.config["drain_removed"], split
        assert split.draining, split
        row = given_inputs.state.partitions[split.key]
        assert row.status == "active"
        assert split.start_offset == row.next_offset or explained(plan, split.key), (split, row, plan.findings)
    for key in plan.removals:
        assert key in given_inputs.state.partitions
        assert key not in given_inputs.readable() or key not in {s.key for s in plan.splits}


@PROPERTIES
@given(lenient())
def test_an_active_partition_no_longer_subscribed_is_removed_or_drained(given_inputs: Inputs) -> None:
    plan = given_inputs.plan()
    subscribed = set(given_inputs.metadata.topics())
    draining = {s.key for s in plan.splits if s.draining}

    for key, row in given_inputs.state.partitions.items():
        if row.status == "active" and (key.cluster_id, key.topic) not in subscribed:
            assert key in plan.removals or key in draining, key


@PROPERTIES
@given(lenient())
def test_unreachable_clusters_are_skipped_and_never_read(given_inputs: Inputs) -> None:
    plan = given_inputs.plan()
    unreachable = {c for c, s in given_inputs.brokers.clusters.items() if not s.reachable}

    assert not [s for s in plan.splits if s.cluster_id in unreachable]
    assert {c for c, _ in given_inputs.metadata.topics()} & unreachable <= set(plan.skipped_clusters)


@PROPERTIES
@given(lenient())
def test_caps_bound_each_partition_and_the_whole_run(given_inputs: Inputs) -> None:
    plan = given_inputs.plan()
    per_partition = given_inputs.config["max_records_per_partition"]
    per_run = given_inputs.config["max_records_per_run"]

    if per_partition is not None:
        assert all(s.record_count <= per_partition for s in plan.splits)
    if per_run is not None:
        assert plan.planned_records <= per_run


@settings(PROPERTIES, max_examples=40)
@given(lenient())
def test_runs_after_one_another_read_every_offset_up_to_latest_exactly_once(given_inputs: Inputs) -> None:
    # Each run commits its plan (the committed next offset is the planned stop) and the next plans from it, until
    # a run reads nothing: per partition, the ranges read are contiguous and end at the brokers' latest offset.
    read: dict[TopicPartition, list[tuple[int, int]]] = {}
    state, brokers = given_inputs.state, given_inputs.brokers
    for run_seq in range(1, 100):
        plan = given_inputs.plan(state, run_seq, brokers)
        brokers = given_inputs.settled()
        for split in plan.splits:
            if split.record_count:
                read.setdefault(split.key, []).append((split.start_offset, split.stop_offset))
        if not plan.planned_records:
            break
        rows = apply_plan(plan, state.partitions, NOW)
        state = StateSnapshot(pipeline_id="p", table_version=run_seq + 3, partitions={r.key: r for r in rows})
    else:
        pytest.fail("the runs never caught up")

    for key, ranges in read.items():
        assert all(stop == start for (_, stop), (start, _) in itertools.pairwise(ranges)), (key, ranges)
        offsets = given_inputs.offsets(key)
        assert offsets is not None
        assert ranges[-1][1] == offsets.latest, (key, ranges)


@PROPERTIES
@given(inputs(on_data_loss="fail", on_topic_recreated="reset"))
def test_under_on_data_loss_fail_a_plan_is_refused_exactly_when_skip_would_report_a_loss(given_inputs: Inputs) -> None:
    skipped = given_inputs.plan(on_data_loss="skip")
    lost = {
        (f.cluster_id, f.topic, f.partition, f.from_offset, f.to_offset)
        for f in skipped.findings
        if f.kind in ("data_loss", "truncated")
    }

    if not lost:
        given_inputs.plan()
        return
    with pytest.raises(DataLossError) as refused:
        given_inputs.plan()
    named = {(r.cluster_id, r.topic, r.partition, r.from_offset, r.to_offset) for r in refused.value.losses}
    named |= {(r.cluster_id, r.topic, r.partition, r.from_offset, r.to_offset) for r in refused.value.truncated}
    assert named == lost


@PROPERTIES
@given(inputs(on_data_loss="skip", on_topic_recreated="fail"))
def test_under_on_topic_recreated_fail_a_plan_is_refused_exactly_when_reset_would_report_one(
    given_inputs: Inputs,
) -> None:
    reset = given_inputs.plan(on_topic_recreated="reset")
    recreated = {(f.cluster_id, f.topic) for f in reset.findings if f.kind == "topic_recreated"}

    if not recreated:
        given_inputs.plan()
        return
    with pytest.raises(TopicRecreatedError) as refused:
        given_inputs.plan()
    assert (refused.value.cluster_id, refused.value.topic) in recreated
