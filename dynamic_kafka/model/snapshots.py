"""The snapshots the planner reads: committed state and broker offsets (the metadata snapshot is the metadata
package's own, :class:`~dynamic_kafka.metadata.snapshot.MetadataSnapshot`, re-used here as the planner's input).

Taking them is I/O (the metadata service, the Delta state, confluent-kafka); planning from them is not. Keeping
them as plain frozen values makes the planner a pure function that unit tests drive without any broker.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from dynamic_kafka.frozen import FrozenModel, replaced
from dynamic_kafka.model.plan import Finding, Plan, Split, TopicPartition
from dynamic_kafka.model.summary import RunSummary

if TYPE_CHECKING:
    from collections.abc import Iterable


class PartitionOffsets(FrozenModel):
    """A partition's offsets on the broker: ``earliest`` available and ``latest`` (LSO under read_committed)."""

    earliest: int = Field(ge=0)
    latest: int = Field(ge=0)
    leader_epoch: int | None = Field(
        None, description="The partition's leader epoch the latest-offset answer carried; None when not given."
    )
    diverged_at: int | None = Field(
        None,
        ge=0,
        description="Set when the committed offset and its recorded leader epoch were checked against the leader "
        "(KIP-320's OffsetForLeaderEpoch) and the log diverged below the committed offset: the end offset of the "
        "recorded epoch, where the leader's log stops being the one the last run read. None: not checked (same "
        "epoch, nothing recorded), no divergence, or no usable answer.",
    )


class TopicSnapshot(FrozenModel):
    """One topic on one cluster. ``exists`` is False when the broker does not have it."""

    topic: str
    exists: bool = True
    topic_id: str | None = None
    partitions: dict[int, PartitionOffsets] = Field(default_factory=dict)
    start_lookups: dict[int, int | None] = Field(
        default_factory=dict,
        description="Per partition, the offset the starting initializer's lookup found (timestamp or "
        "committed group offset); None where the lookup found nothing.",
    )
    stop_lookups: dict[int, int | None] = Field(
        default_factory=dict,
        description="Per partition, the stopping timestamp lookup's offset (None: none).",
    )
    floor_lookups: dict[int, int | None] = Field(
        default_factory=dict,
        description="With a bootstrap archive: per partition, the first offset at or after the archive's "
        "``until`` (None: no record is). Empty without one.",
    )

    def floor(self, partition: int) -> int | None:
        """The lowest offset Kafka may be read from in ``partition`` without landing the bootstrap archive's
        records again: the first offset at or after its ``until``, else the partition's latest. None without a
        bootstrap archive (nothing was looked up).
        """
        if partition not in self.floor_lookups:
            return None
        found = self.floor_lookups[partition]
        return self.partitions[partition].latest if found is None else found


class ClusterSnapshot(FrozenModel):
    """What one cluster answered, or why it could not."""

    cluster_id: str
    reachable: bool = True
    error: str | None = Field(None, description="Why the cluster could not be reached (no secrets).")
    topics: dict[str, TopicSnapshot] = Field(default_factory=dict)


class BrokerSnapshot(FrozenModel):
    """Offsets of every subscribed (and every removed-but-tracked) topic, one batched query per cluster."""

    clusters: dict[str, ClusterSnapshot] = Field(default_factory=dict)
    taken_at: datetime


PartitionStatus = Literal["active", "removed"]


class PartitionState(FrozenModel):
    """The committed position of one partition: the next offset to read."""

    cluster_id: str
    topic: str
    partition: int
    next_offset: int = Field(ge=0)
    topic_id: str | None = None
    leader_epoch: int | None = Field(
        None,
        description="The partition's leader epoch when the committed offset was planned; None in states written "
        "before epochs were recorded (no divergence check until the next commit records one).",
    )
    bootstrap_servers: str = ""
    stream_ids: tuple[str, ...] = ()
    status: PartitionStatus = "active"
    removed_at: datetime | None = None
    updated_run_seq: int = 0

    @property
    def key(self) -> TopicPartition:
        """Return the partition's (cluster, topic, partition)."""
        return TopicPartition(cluster_id=self.cluster_id, topic=self.topic, partition=self.partition)

    def moved_to(self, next_offset: int, run_seq: int) -> PartitionState:
        """This partition with its offset moved to ``next_offset`` by run (or reset) ``run_seq``: the leader epoch of
        the old position no longer describes it.
        """
        return replaced(self, next_offset=next_offset, leader_epoch=None, updated_run_seq=run_seq)

    def removed(self, at: datetime, run_seq: int) -> PartitionState:
        """This partition marked removed by run ``run_seq``: since ``at``, or since it was first marked."""
        removed_at = self.removed_at if self.status == "removed" else at
        return replaced(self, status="removed", removed_at=removed_at, updated_run_seq=run_seq)


RunStatus = Literal["planned", "committed", "abandoned"]

OPERATION_STATUSES = frozenset({"reset", "replayed", "realigned"})
"""The summary statuses of operations recorded in the run history between runs."""


class RunRecord(FrozenModel):
    """One run in the state: its plan while planned, and its summary once committed (or abandoned: its offsets
    were never committed, and its summary says why).
    """

    pipeline_id: str
    run_seq: int
    status: RunStatus
    plan: Plan
    planned_at: datetime
    committed_at: datetime | None = None
    summary_json: str | None = Field(None, description="The run summary, as JSON, once committed.")
    findings: tuple[Finding, ...] = ()
    owner: str | None = Field(None, description="The process running (or that ran) it: host, pid and a token.")
    lease_expires_at: datetime | None = Field(
        None, description="While planned: until when the owner holds the run (renewed while it runs)."
    )

    def lease_is_fresh(self, now: datetime) -> bool:
        """Whether a planned run's owner still holds it at ``now`` (a run without a lease never does)."""
        return self.status == "planned" and self.lease_expires_at is not None and self.lease_expires_at > now

    @property
    def summary(self) -> RunSummary | None:
        """Its summary, once committed (or abandoned); None while planned. Every reader of the history reads it here,
        so an entry of an earlier version's shape is read one way everywhere.
        """
        return RunSummary.stored(self.summary_json, pipeline_id=self.pipeline_id) if self.summary_json else None

    @property
    def summary_status(self) -> str | None:
        """The status its summary records (``reset``, ``replayed``, ``realigned`` for an operation); None while
        planned.
        """
        summary = self.summary
        return summary.status if summary is not None else None

    @property
    def is_operation(self) -> bool:
        """Whether it is an operation recorded between runs (an offsets reset, a dead-letter replay, a realign),
        which planned and read nothing.
        """
        return self.status == "committed" and self.summary_status in OPERATION_STATUSES


class StateSnapshot(FrozenModel):
    """A pipeline's committed state as read at one Delta table version."""

    pipeline_id: str
    table_version: int | None = Field(None, description="Delta version read; None when no state exists yet.")
    last_run: RunRecord | None = None
    operations: tuple[RunRecord, ...] = Field(
        (),
        description="When the last run is an operation (offsets reset, dead-letter replay, realign): it and every "
        "operation recorded since the newest run that is not one, newest first; else empty.",
    )
    before_operations: RunRecord | None = Field(
        None, description="When the last run is an operation: the newest run before it that is not one (if any)."
    )
    partitions: dict[TopicPartition, PartitionState] = Field(default_factory=dict)
    backfilled: dict[TopicPartition, int] = Field(
        default_factory=dict,
        description="Per partition, the backfill frontier: the highest stop offset a time-window backfill "
        "merged into the sink (or is merging). Separate from, and never moving, the incremental offsets.",
    )
    backfill_topic_ids: dict[TopicPartition, str] = Field(
        default_factory=dict,
        description="The topic id each frontier was recorded for (absent: recorded before ids were kept). A "
        "frontier covers only that incarnation of the topic: after a recreation it no longer applies.",
    )
    backfill_streams: dict[TopicPartition, str] = Field(
        default_factory=dict,
        description="With a table per stream: the stream whose table the backfills merged each partition into. It "
        "pins a partition no run has committed yet to that table (``plan.tables.pinned_to_tables``).",
    )

    backfill_floors: dict[TopicPartition, int] = Field(
        default_factory=dict,
        description="Per partition of a recreated topic, the offset below which the sink may hold an earlier "
        "incarnation's rows at the same coordinates: backfills and the runs' backfill checks never match below it.",
    )

    backfill_sequence: int = Field(
        0,
        description="How many backfills raised a frontier; each one's MERGEs record its number as a Delta "
        "transaction in the sink, so a sink ahead of it shows a state restored from before a backfill.",
    )
    backfill_owner: str | None = Field(
        None, description="The backfill in progress: the process holding the pipeline's backfill lease."
    )
    backfill_lease_expires_at: datetime | None = Field(
        None, description="Until when ``backfill_owner`` holds the backfill lease unless it renews it."
    )

    def backfill_floor(self, split: Split) -> int:
        """The first offset of ``split``'s partition whose sink rows can only be of ``split``'s topic incarnation:
        the recorded floor, or, for a topic recreated since the state's last commit (the partition row still has
        the old id), the old incarnation's committed offset and frontier.
        """
        floor = self.backfill_floors.get(split.key, 0)
        row = self.partitions.get(split.key)
        if row is not None and row.topic_id and split.topic_id and row.topic_id != split.topic_id:
            floor = max(floor, row.next_offset)
            if self.backfill_topic_ids.get(split.key) in (None, row.topic_id):
                floor = max(floor, self.backfilled.get(split.key, 0))
        return floor

    @property
    def landing_run(self) -> RunRecord | None:
        """The newest run that planned a read (planned, committed or abandoned), past the operations recorded after
        it: a bootstrap archive landed over several runs continues from it, whatever was done in between.
        """
        return self.before_operations if self.operations else self.last_run

    @property
    def next_run_seq(self) -> int:
        """Return the run_seq the next planned run gets."""
        return (self.last_run.run_seq if self.last_run else 0) + 1

    def backfill_overlaps(self, splits: Iterable[Split]) -> tuple[Split, ...]:
        """The parts of ``splits`` a backfill may already have put in the sink.

        That is ``[max(start, floor), min(stop, frontier))`` for each split that starts below its partition's
        frontier, when the frontier is of the split's topic id. Empty in the common case (no backfill).
        """
        overlaps = []
        for split in splits:
            frontier = self.backfilled.get(split.key, 0)
            recorded_id = self.backfill_topic_ids.get(split.key)
            if recorded_id is not None and split.topic_id is not None and recorded_id != split.topic_id:
                continue  # the frontier of an earlier incarnation of the topic: the sink has none of this one's rows
            # Below the floor the sink's rows at these coordinates may be an earlier incarnation's: never match.
            start = max(split.start_offset, self.backfill_floors.get(split.key, 0))
            if frontier > start and split.stop_offset > start:
                overlaps.append(split.narrowed(start, min(split.stop_offset, frontier)))
        return tuple(overlaps)
