"""The broker snapshot: every cluster's topics, offsets and initializer lookups, all clusters at once.

Per cluster: one describe call for its topics, then one ``list_offsets`` call per offset kind (earliest, latest,
and the starting / stopping timestamps when the initializers need them), in flight together, and one committed
offsets call for each initializer (starting, stopping) that reads a consumer group. A custom starting initializer
is called here, with the partitions no run has read yet, and may ask the same admin client for more. Clusters are
queried concurrently, one thread each, so a snapshot takes as long as the slowest cluster, not the sum (a custom
initializer's function may therefore run for several clusters at once).
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from pydantic import Field

from dynamic_kafka.errors import ClusterUnreachableError, DynamicKafkaError, KafkaClientError
from dynamic_kafka.frozen import FrozenModel, replaced
from dynamic_kafka.initializers import (
    CommittedOffsets,
    CustomOffsets,
    EarliestOffsets,
    Isolation,
    LatestOffsets,
    PartitionBounds,
    PipelineStartingOffsets,
    PipelineStoppingOffsets,
    SpecificOffsets,
    TimestampOffsets,
)
from dynamic_kafka.kafka.client import KafkaAdmin, OffsetAnswer, OffsetQuery, Partition, TopicDescription, offsets_of
from dynamic_kafka.kafka.custom_offsets import resolve_custom
from dynamic_kafka.kafka.epochs import CommittedPosition
from dynamic_kafka.kafka.statistics import submit_in_context
from dynamic_kafka.metadata.models import ClusterMetadata
from dynamic_kafka.model.snapshots import BrokerSnapshot, ClusterSnapshot, PartitionOffsets, TopicSnapshot

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from datetime import datetime

logger = logging.getLogger(__name__)


class ClusterRequest(FrozenModel):
    """What to ask one cluster for a run's broker snapshot."""

    cluster: ClusterMetadata = Field(description="The cluster to query (its connection; topics come below).")
    topics: frozenset[str] = Field(description="Topics to describe and query.")
    starting: PipelineStartingOffsets = Field(
        default_factory=EarliestOffsets,
        description="The effective starting initializer for this cluster (per-cluster override already applied). "
        "A timestamp, committed, specific with a group, or custom initializer adds start lookups.",
    )
    started_topics: frozenset[str] = Field(
        frozenset(),
        description="Topics the state has partitions of on this cluster: they resume from it, so a custom starting "
        "initializer is not asked about them.",
    )
    stopping: PipelineStoppingOffsets = Field(
        default_factory=LatestOffsets,
        description="The effective stopping initializer for this cluster. A timestamp, committed or custom "
        "initializer adds stop lookups.",
    )
    required: bool = Field(
        True,
        description="True for active clusters: a failure raises (unless skip_unreachable and the cluster is "
        "unreachable). False for best-effort snapshots of removed clusters: any failure gives reachable=False.",
    )
    skip_unreachable: bool = Field(
        False, description="For a required cluster, record an unreachable cluster instead of raising."
    )
    floor_ms: int | None = Field(
        None,
        ge=0,
        description="A bootstrap archive's ``until`` (epoch ms): adds floor lookups, each partition's first offset "
        "at or after it, below which Kafka holds the archive's records.",
    )
    positions: tuple[CommittedPosition, ...] = Field(
        (),
        description="Committed positions of the requested topics that recorded a leader epoch: each one whose "
        "partition's epoch changed since is checked for a log divergence below it (``diverged_at``).",
    )

    def with_topics(self, topics: frozenset[str]) -> ClusterRequest:
        """This request asking about ``topics``."""
        return replaced(self, topics=topics)

    def with_positions(self, positions: tuple[CommittedPosition, ...]) -> ClusterRequest:
        """This request checking ``positions`` for a log divergence."""
        return replaced(self, positions=positions)

    def best_effort(self) -> ClusterRequest:
        """This request for a report: whatever fails gives an unreachable cluster, nothing raises."""
        return replaced(self, required=False, skip_unreachable=True)


def take_broker_snapshot(
    requests: Sequence[ClusterRequest],
    *,
    isolation_level: Isolation,
    now: datetime,
    timeout_s: float = 10.0,
    warn_skipped: bool = True,
) -> BrokerSnapshot:
    """Queries every cluster concurrently and returns their answers as one snapshot.

    Args:
        requests: one per cluster (cluster ids must be distinct).
        isolation_level: ``read_committed`` makes ``latest`` the last stable offset.
        now: recorded as the snapshot's ``taken_at``.
        timeout_s: the deadline of each admin call.
        warn_skipped: log a warning for each skipped unreachable cluster (False: a caller that asks the same
            clusters again at once, and reports them itself, says it once).

    Raises:
        KafkaClientError: a required cluster failed (the first one in request order, once all have finished);
            a skipped unreachable cluster is recorded as ``reachable=False`` instead.
    """
    ids = [r.cluster.cluster_id for r in requests]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise ValueError(f"one request per cluster; repeated: {', '.join(duplicates)}")
    if not requests:
        return BrokerSnapshot(taken_at=now)
    with ThreadPoolExecutor(max_workers=len(requests), thread_name_prefix="kafka-snapshot") as pool:
        futures = [submit_in_context(pool, _snapshot_cluster, r, isolation_level, timeout_s) for r in requests]
        outcomes = [f.exception() or f.result() for f in futures]
    clusters: dict[str, ClusterSnapshot] = {}
    for request, outcome in zip(requests, outcomes, strict=True):
        if isinstance(outcome, ClusterSnapshot):
            clusters[outcome.cluster_id] = outcome
        elif _tolerated(request, outcome):
            cluster_id = request.cluster.cluster_id
            if warn_skipped:
                logger.warning("cluster %r skipped: %s", cluster_id, outcome)
            clusters[cluster_id] = ClusterSnapshot(cluster_id=cluster_id, reachable=False, error=str(outcome))
        else:
            raise outcome
    return BrokerSnapshot(clusters=clusters, taken_at=now)


def _tolerated(request: ClusterRequest, error: BaseException) -> bool:
    if not request.required:
        # A removed cluster is best effort: whatever went wrong (down, credentials gone), record it and go on.
        return isinstance(error, DynamicKafkaError)
    return request.skip_unreachable and isinstance(error, ClusterUnreachableError)


def _snapshot_cluster(request: ClusterRequest, isolation_level: Isolation, timeout_s: float) -> ClusterSnapshot:
    cluster_id = request.cluster.cluster_id
    with KafkaAdmin(request.cluster, timeout_s=timeout_s) as admin:
        described = admin.describe_topics(request.topics)
        partitions: list[Partition] = [(t, p) for t, d in sorted(described.items()) if d.exists for p in d.partitions]
        queries: dict[str, OffsetQuery] = {"earliest": "earliest", "latest": "latest"}
        if isinstance(request.starting, TimestampOffsets):
            queries["start"] = request.starting.timestamp_ms
        if isinstance(request.stopping, TimestampOffsets):
            queries["stop"] = request.stopping.timestamp_ms
        if request.floor_ms is not None:
            queries["floor"] = request.floor_ms
        answers = admin.offset_answers(partitions, queries, isolation_level=isolation_level)
        offsets = offsets_of(answers)
        starting = request.starting
        if isinstance(starting, CommittedOffsets | SpecificOffsets) and starting.group_id is not None:
            offsets["start"] = dict(admin.committed_offsets(starting.group_id, partitions))
        if isinstance(starting, CustomOffsets):
            fresh = [_bounds(cluster_id, t, p, offsets) for t, p in partitions if t not in request.started_topics]
            lookups = AdminLookups(admin, [(b.topic, b.partition) for b in fresh], isolation_level)
            offsets["start"] = {**resolve_custom(starting, fresh, lookups)}
        if isinstance(request.stopping, CommittedOffsets):
            offsets["stop"] = dict(admin.committed_offsets(request.stopping.group_id, partitions))
        if isinstance(request.stopping, CustomOffsets):
            every = [_bounds(cluster_id, t, p, offsets) for t, p in partitions]
            lookups = AdminLookups(admin, partitions, isolation_level)
            offsets["stop"] = {**resolve_custom(request.stopping, every, lookups, role="stopping_offsets")}
        diverged = admin.diverged_offsets(epoch_checks(request.positions, described, answers["latest"]))

    topics: dict[str, TopicSnapshot] = {}
    for name in sorted(request.topics):
        description = described[name]
        if not description.exists:
            topics[name] = TopicSnapshot(topic=name, exists=False)
            continue
        keys = [(name, p) for p in description.partitions]
        topics[name] = TopicSnapshot(
            topic=name,
            topic_id=description.topic_id,
            partitions={
                p: PartitionOffsets(
                    earliest=_known(offsets["earliest"], (name, p), cluster_id),
                    latest=_known(offsets["latest"], (name, p), cluster_id),
                    leader_epoch=answers["latest"][(name, p)].leader_epoch,
                    diverged_at=diverged.get((name, p)),
                )
                for _, p in keys
            },
            start_lookups={p: offsets["start"].get((name, p)) for _, p in keys} if "start" in offsets else {},
            stop_lookups={p: offsets["stop"][(name, p)] for _, p in keys} if "stop" in offsets else {},
            floor_lookups={p: offsets["floor"][(name, p)] for _, p in keys} if "floor" in offsets else {},
        )
    return ClusterSnapshot(cluster_id=cluster_id, topics=topics)


def _bounds(
    cluster_id: str, topic: str, partition: int, offsets: Mapping[str, Mapping[Partition, int | None]]
) -> PartitionBounds:
    """One partition as a custom initializer is given it."""
    return PartitionBounds(
        cluster_id=cluster_id,
        topic=topic,
        partition=partition,
        earliest=_known(offsets["earliest"], (topic, partition), cluster_id),
        latest=_known(offsets["latest"], (topic, partition), cluster_id),
    )


class AdminLookups:
    """A custom initializer's :class:`~dynamic_kafka.initializers.OffsetLookups` over the snapshot's admin client, for
    the partitions it was given.
    """

    def __init__(self, admin: KafkaAdmin, partitions: Sequence[Partition], isolation_level: Isolation) -> None:
        self._admin = admin
        self._partitions = partitions
        self._isolation_level = isolation_level

    def offsets_for_times(self, timestamp_ms: int) -> dict[Partition, int | None]:
        """Per partition, the first offset at or after ``timestamp_ms`` (None: no record is)."""
        answers = self._admin.offset_answers(
            self._partitions, {"at": timestamp_ms}, isolation_level=self._isolation_level
        )
        return offsets_of(answers)["at"]

    def committed(self, group_id: str) -> dict[Partition, int | None]:
        """Per partition, ``group_id``'s committed offset (None: none)."""
        return self._admin.committed_offsets(group_id, self._partitions)


def epoch_checks(
    positions: Sequence[CommittedPosition],
    described: Mapping[str, TopicDescription],
    latest: Mapping[Partition, OffsetAnswer],
) -> list[CommittedPosition]:
    """The committed positions worth a divergence check: of the same topic incarnation, with something below
    them, still reachable (latest at or beyond; below it the planner sees the truncation by offsets alone), and
    whose partition's leader epoch changed since. An unchanged epoch means no leader change, so no truncation:
    the common run asks nothing more.
    """
    checks = []
    for position in positions:
        topic = described.get(position.topic)
        answer = latest.get((position.topic, position.partition))
        if topic is None or not topic.exists or answer is None or answer.leader_epoch is None:
            continue
        if position.topic_id is not None and topic.topic_id is not None and position.topic_id != topic.topic_id:
            continue
        if answer.leader_epoch == position.leader_epoch or position.next_offset == 0:
            continue
        if answer.offset is None or answer.offset < position.next_offset:
            continue
        checks.append(position)
    return checks


def _known(found: Mapping[Partition, int | None], partition: Partition, cluster_id: str) -> int:
    offset = found.get(partition)
    if offset is None:
        raise KafkaClientError(
            f"the broker gave no earliest/latest offset for {partition[0]}[{partition[1]}]",
            cluster_id=cluster_id,
        )
    return offset
