"""``offsets reset``: move a pipeline's committed next offsets between runs, with the reason kept in its history.

A reset rewinds (reads again after a bad deploy), skips forward (past a poison range) or places a removed cluster's
kept offset (a fail-back to a cluster that received mirrored records starts at the switch time). It changes the
state only: the next run plans from the new offsets as from any committed offsets, and reads exactly
``[new offset, latest)``.

Invariants:

* One state commit (:meth:`~dynamic_kafka.state.StateStore.record_operation`) against the exact version the reset
  was decided from: the new offsets and a history entry (run status ``committed``, summary status ``reset``: who,
  when, why, and every partition's previous and new offset). A run that planned meanwhile makes it lose the race;
  nothing is written then.
* Never beside a run: the pipeline's run lock is held for the commit (a run or backfill on this machine refuses it),
  a planned run refuses it (in flight: its lease is fresh; crashed: its recovery is about to commit its own
  offsets, so it must be finished or abandoned first), and so does a live backfill lease.
* The sink keeps each record at most once. A reset backwards raises the backfill frontier of each rewound
  partition to its previous offset in the same commit, so the next run reads ``[new, previous)`` again and lands
  only the records the sink (and dead-letter table) do not hold, compared by coordinates, as after a backfill.
  To land records again that landed wrongly (a bad ``value.schema``), delete them from the sink first, then
  rewind: exactly the deleted ones land again. Dead letters are not landed again by a rewind either: that is
  ``dead-letters replay``. A reset below a partition's floor (the sink holds an earlier incarnation of a recreated
  topic there, at the same coordinates) is refused: those records could not be told apart.
* A rewind never reaches records the sink holds under other coordinates: it stops (and says so, :class:`ResetClamp`)
  at the bootstrap archive's ``until`` (the archive landed the records before it, without coordinates) and at a
  cluster's timestamp ``starting_offsets`` in the metadata (a failover's handover: the cluster's records before it
  are a mirror's copies of records the old cluster delivered), as backfills and first reads do.
* A new offset is a resolved number between the broker's earliest and latest offsets, never beyond: a reset never
  creates the data-loss or recreated-topic situations the planner guards against.

Example:
    >>> ResetTarget.parse("timestamp:2026-11-27T10:00:00Z").timestamp_ms
    1795773600000
    >>> ResetTarget.parse("offset:42").offset
    42
"""

from __future__ import annotations

import getpass
import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Literal

from pydantic import Field, computed_field

from dynamic_kafka import clock as wall_clock
from dynamic_kafka.errors import ConfigError, MetadataServiceError, StateError, TopicRecreatedError
from dynamic_kafka.frozen import FrozenModel, replaced
from dynamic_kafka.initializers import EarliestOffsets, LatestOffsets, TimestampOffsets, to_epoch_ms
from dynamic_kafka.kafka import ClusterRequest, take_broker_snapshot
from dynamic_kafka.metadata.identity import with_pipeline_properties
from dynamic_kafka.metadata.models import ClusterMetadata
from dynamic_kafka.model.plan import TopicPartition
from dynamic_kafka.model.summary import OffsetChange, RunSummary
from dynamic_kafka.model.text import table
from dynamic_kafka.protocol.guard import WriterGuard
from dynamic_kafka.state.owner import RunOwner

if TYPE_CHECKING:
    from collections.abc import Mapping

    from dynamic_kafka.metadata.snapshot import MetadataSnapshot
    from dynamic_kafka.model.snapshots import BrokerSnapshot, PartitionState, StateSnapshot
    from dynamic_kafka.protocol.context import PipelineContext

logger = logging.getLogger(__name__)

_TARGET_HINT = "Write --to earliest, latest, timestamp:<ISO-8601 or epoch ms> or offset:<N>."


class ResetTarget(FrozenModel):
    """Where a reset moves the selected partitions: ``earliest``, ``latest``, the first offset at or after a
    timestamp (latest when there is none), or one exact offset.
    """

    kind: Literal["earliest", "latest", "timestamp", "offset"]
    timestamp_ms: int | None = Field(None, ge=0, description="For ``timestamp``: epoch milliseconds, inclusive.")
    offset: int | None = Field(None, ge=0, description="For ``offset``: the next offset to read.")

    @classmethod
    def parse(cls, text: str) -> ResetTarget:
        """The target a ``--to`` value names.

        Raises:
            ConfigError: the text is none of the four forms.
        """
        kind, _, value = text.strip().partition(":")
        try:
            if kind in ("earliest", "latest") and not value:
                return cls(kind=kind)
            if kind == "timestamp" and value:
                return cls(kind=kind, timestamp_ms=int(value) if value.isdigit() else to_epoch_ms(value))
            if kind == "offset" and value.isdigit():
                return cls(kind=kind, offset=int(value))
        except ValueError as e:
            raise ConfigError(f"--to {text!r}: {e}.", hint=_TARGET_HINT) from e
        raise ConfigError(f"--to {text!r} is not a reset target.", hint=_TARGET_HINT)

    @property
    def text(self) -> str:
        """The target as written on the command line (a timestamp in ISO-8601 UTC)."""
        if self.kind == "timestamp" and self.timestamp_ms is not None:
            moment = datetime.fromtimestamp(self.timestamp_ms / 1000, UTC)
            return f"timestamp:{moment.isoformat(timespec='milliseconds').replace('+00:00', 'Z')}"
        return f"offset:{self.offset}" if self.kind == "offset" else self.kind


class ResetSelection(FrozenModel):
    """Which committed partitions a reset moves: all active ones by default; a cluster or topic named selects its
    removed partitions too (their kept offsets), so a cluster the streams no longer list can be placed.
    """

    cluster_id: str | None = None
    topic: str | None = None
    partition: int | None = Field(None, ge=0)

    def picks(self, row: PartitionState) -> bool:
        """Whether ``row`` is selected."""
        if self.cluster_id is None and self.topic is None and row.status != "active":
            return False
        return (
            self.cluster_id in (None, row.cluster_id)
            and self.topic in (None, row.topic)
            and self.partition in (None, row.partition)
        )

    def describe(self) -> str:
        """The selection in words, for messages."""
        parts = [
            f"{name} {value}"
            for name, value in (("cluster", self.cluster_id), ("topic", self.topic), ("partition", self.partition))
            if value is not None
        ]
        return ", ".join(parts) or "every active partition"


class ResetClamp(TopicPartition):
    """A partition whose rewind stops above the target's offset, and why: the sink holds the records below under
    other coordinates, which the next run's dedupe (by coordinates) could not find.
    """

    wanted: int = Field(description="The offset the target names for this partition.")
    to_offset: int = Field(description="Where the rewind stops: the partition's next offset after the reset.")
    reason: str = Field(description="Why it stops there, for people.")


class ResetDecision(FrozenModel):
    """What :func:`decide_reset` decided: the offsets that move, and the rewinds it stopped short of the target."""

    changes: tuple[OffsetChange, ...]
    clamps: tuple[ResetClamp, ...] = ()


class OffsetReset(FrozenModel):
    """What ``offsets reset`` found and did (or, without ``yes``, would do)."""

    pipeline_id: str
    to: str = Field(description="The target, as written on the command line.")
    reason: str
    requested_by: str
    changes: tuple[OffsetChange, ...] = Field(description="The partitions whose offset moves (or moved).")
    clamps: tuple[ResetClamp, ...] = Field(
        (), description="Selected partitions whose rewind stops above the target (moved or not), and why."
    )
    unchanged: int = Field(description="Selected partitions already at the target.")
    applied: bool = Field(description="Whether the state was changed (``--yes``) or only shown.")
    run_seq: int = Field(description="The history entry that records the reset (the run_seq it takes).")
    state_version: int | None = Field(None, description="The state version holding the reset, once applied.")

    def applied_in(self, state_version: int) -> OffsetReset:
        """This reset, applied: the state's ``state_version`` holds it."""
        return replaced(self, applied=True, state_version=state_version)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def read_again(self) -> int:
        """Offsets the next runs read again; records the sink already holds are not landed twice."""
        return sum(c.read_again for c in self.changes)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def skipped(self) -> int:
        """Offsets no run will read."""
        return sum(c.skipped for c in self.changes)

    def text(self) -> str:
        """What the reset changes (or changed), for people."""
        clamped = [
            f"  {c} stops at {c.to_offset}, not at {c.wanted}: {c.reason}; "
            "read again, they would land twice (the sink's dedupe compares Kafka coordinates)"
            for c in self.clamps
        ]
        if not self.changes:
            return "\n".join(
                [
                    f"pipeline {self.pipeline_id}: every selected partition is already at {self.to}"
                    + (" or as far back as it may go" if clamped else "")
                    + "; nothing to change.",
                    *clamped,
                ]
            )
        done = "reset" if self.applied else "a reset would move"
        lines = [
            f"pipeline {self.pipeline_id}: {done} {len(self.changes)} partition(s) to {self.to}"
            + (f" (recorded as run {self.run_seq})" if self.applied else "")
            + f": {self.read_again} offsets read again, {self.skipped} skipped",
        ]
        lines += table(
            ["cluster", "topic", ">part", ">from", ">to", ">earliest", ">latest", "effect"],
            (
                (
                    c.cluster_id,
                    c.topic,
                    c.partition,
                    c.from_offset,
                    c.to_offset,
                    c.earliest,
                    c.latest,
                    (f"read {c.read_again} again" if c.read_again else f"skip {c.skipped}")
                    + (" (removed: its kept offset)" if c.status == "removed" else ""),
                )
                for c in self.changes
            ),
        )
        if self.unchanged:
            lines.append(f"  {self.unchanged} selected partition(s) already there")
        lines += clamped
        if self.read_again:
            lines.append(
                "  records read again that the sink or dead-letter table already holds are not landed twice "
                "(delete them from the sink first to land them again)"
            )
        lines.append(
            f"  reason: {self.reason} (by {self.requested_by})"
            if self.applied
            else "  nothing changed; run again with --yes to reset."
        )
        return "\n".join(lines)


def reset_offsets(
    context: PipelineContext, target: ResetTarget, selection: ResetSelection, reason: str, *, yes: bool
) -> OffsetReset:
    """Decides a reset and, with ``yes``, commits it (see the module's docstring).

    Raises:
        ConfigError: no reason, no committed partition matches the selection, a target offset is outside the
            broker's range (or below a recreated topic's floor), or a subscribed stream is unknown to the metadata
            service (``UnknownStreamError``, as for a run); nothing was written.
        RunInProgressError: a run or backfill of the pipeline is in progress (the run lock, a planned run with a
            fresh lease, the backfill lease), or one planned meanwhile; nothing was written.
        StateError: the pipeline never ran, or a crashed run is planned (finish or abandon it first).
        ClusterUnreachableError: a selected partition's cluster does not answer.
        TopicRecreatedError: a selected topic was deleted or recreated since its offset was committed.
        MetadataServiceError: the metadata service does not answer (a cluster's handover is not known).
    """
    reason = reason.strip()
    if not reason:
        raise ConfigError("offsets reset needs a --reason: it is recorded in the run history for whoever looks next.")
    if not yes:
        return _decide(context, target, selection, reason, apply=False)
    # One commit at the exact version read: the run lock is all it holds (no Spark job to bound, no lease to keep).
    guard = WriterGuard(context.store, context.pipeline, "reset", owner=RunOwner.current())
    with guard.entered(deadline=False):
        return _decide(context, target, selection, reason, apply=True)


def _decide(
    context: PipelineContext, target: ResetTarget, selection: ResetSelection, reason: str, *, apply: bool
) -> OffsetReset:
    state = context.store.load()
    if state.table_version is None or not state.partitions:
        raise StateError(
            f"pipeline {context.pipeline.id!r} has no committed offsets yet: there is nothing to reset.",
            hint="Its first run starts at its starting_offsets; set those instead.",
        )
    if state.last_run is not None and state.last_run.status == "planned":
        raise context.store.planned_error(state.last_run)
    selected = {k: row for k, row in state.partitions.items() if selection.picks(row)}
    if not selected:
        known = ", ".join(sorted({f"{k.cluster_id}/{k.topic}" for k in state.partitions}))
        raise ConfigError(
            f"no committed partition of pipeline {context.pipeline.id!r} matches {selection.describe()}.",
            hint=f"The state has offsets for: {known} (`dynamic-kafka offsets show` lists them).",
        )
    bootstrap = context.pipeline.bootstrap
    until_ms = to_epoch_ms(bootstrap.until) if bootstrap is not None else None
    handovers = {cid: ms for cid, ms in _handovers(context.subscription()).items() if until_ms is None or ms > until_ms}
    floors = {cid: handovers.get(cid, until_ms) for cid in {k.cluster_id for k in selected}}
    brokers = _broker_offsets(context, selected, target, floors)
    decided = decide_reset(state, brokers, target, selected, handovers=handovers)
    changes = decided.changes
    owner = RunOwner.current()
    result = OffsetReset(
        pipeline_id=context.pipeline.id,
        to=target.text,
        reason=reason,
        requested_by=requester(owner),
        changes=changes,
        clamps=decided.clamps,
        unchanged=len(selected) - len(changes),
        applied=False,
        run_seq=state.next_run_seq,
    )
    if not apply or not changes:
        return result
    assert state.table_version is not None
    summary = RunSummary(
        pipeline_id=context.pipeline.id,
        run_seq=state.next_run_seq,
        status="reset",
        reason=reason,
        requested_by=result.requested_by,
        offset_changes=changes,
        clusters=tuple(sorted({c.cluster_id for c in changes})),
        partitions=len(changes),
    )
    rewound = {_key(c): c.from_offset for c in changes if c.to_offset < c.from_offset}
    version = context.store.record_operation(
        summary,
        expected_version=state.table_version,
        offsets={_key(c): c.to_offset for c in changes},
        frontier=rewound,
    )
    logger.warning(
        "pipeline %s: offsets reset to %s by %s (run %d): %d partitions moved, %d offsets to read again, "
        "%d skipped, %d rewinds stopped above the target (a handover or the bootstrap's until): %s",
        context.pipeline.id,
        target.text,
        result.requested_by,
        state.next_run_seq,
        len(changes),
        result.read_again,
        result.skipped,
        len(result.clamps),
        reason,
    )
    return result.applied_in(version)


def decide_reset(
    state: StateSnapshot,
    brokers: BrokerSnapshot,
    target: ResetTarget,
    selected: dict[TopicPartition, PartitionState],
    *,
    handovers: Mapping[str, int] | None = None,
) -> ResetDecision:
    """The offset changes of a reset of ``selected`` to ``target`` over the brokers' offsets; pure. Partitions
    already at the target are left out of the changes.

    Where the brokers hold a partition's floor (:meth:`TopicSnapshot.floor`), a rewind stops there, and the clamp
    says why: the records before it are in the sink under other coordinates, so the run's anti-join on coordinates
    would not find them and they would land twice. The floor is the first offset at or after the bootstrap
    archive's ``until``, or, on a cluster of ``handovers`` (cluster id -> epoch ms of its timestamp
    ``starting_offsets`` in the metadata, when later than ``until``), at or after that handover: before it the
    cluster holds a mirror's copies of what the old cluster delivered.

    Raises:
        TopicRecreatedError: a topic is gone from its cluster, or has another topic id than the committed offset.
        ConfigError: a target offset (or a timestamp's offset) is outside ``[earliest, latest]``, or below the
            floor of a recreated topic's partition; every such partition is named.
    """
    changes: list[OffsetChange] = []
    clamps: list[ResetClamp] = []
    refused: list[str] = []
    for key, row in sorted(selected.items(), key=lambda kv: str(kv[0])):
        topic = brokers.clusters[key.cluster_id].topics.get(key.topic)
        offsets = topic.partitions.get(key.partition) if topic is not None and topic.exists else None
        if topic is None or offsets is None:
            raise TopicRecreatedError(
                key.cluster_id,
                key.topic,
                f"partition {key.partition} is gone from the cluster, so its offsets cannot be placed",
                hint="Nothing was changed. Reset the other partitions (--topic, --partition); the next run applies "
                "on_topic_recreated to this one.",
            )
        if row.topic_id and topic.topic_id and row.topic_id != topic.topic_id:
            raise TopicRecreatedError(
                key.cluster_id,
                key.topic,
                f"its topic id is {topic.topic_id} now, the committed offset is of {row.topic_id}",
                hint="Nothing was changed. The next run applies on_topic_recreated to it; reset it after that run.",
            )
        if target.kind == "earliest":
            new = offsets.earliest
        elif target.kind == "latest":
            new = offsets.latest
        elif target.kind == "timestamp":
            found = topic.start_lookups.get(key.partition)
            new = offsets.latest if found is None else found
        else:
            assert target.offset is not None
            new = target.offset
        floor = topic.floor(key.partition)
        if floor is not None and new < min(floor, row.next_offset):
            stop = min(floor, row.next_offset)
            clamps.append(
                ResetClamp(
                    **key.model_dump(),
                    wanted=new,
                    to_offset=stop,
                    reason=_clamp_reason(key.cluster_id, (handovers or {}).get(key.cluster_id)),
                )
            )
            new = stop
        recreated = state.backfill_floors.get(key, 0)
        if not offsets.earliest <= new <= offsets.latest:
            refused.append(f"{key}: offset {new} is outside [{offsets.earliest}, {offsets.latest}]")
        elif new < recreated and new < row.next_offset:
            refused.append(
                f"{key}: offset {new} is below {recreated}, under which the sink holds records of an earlier "
                "incarnation of the topic at the same coordinates"
            )
        elif new != row.next_offset:
            changes.append(
                OffsetChange(
                    cluster_id=key.cluster_id,
                    topic=key.topic,
                    partition=key.partition,
                    topic_id=row.topic_id or topic.topic_id,
                    status=row.status,
                    from_offset=row.next_offset,
                    to_offset=new,
                    earliest=offsets.earliest,
                    latest=offsets.latest,
                )
            )
    if refused:
        raise ConfigError(
            "cannot reset " + "; ".join(refused) + ".",
            hint="Nothing was changed. Choose an offset the broker still has (`dynamic-kafka offsets show` lists "
            "earliest and latest), or narrow the reset with --cluster, --topic and --partition.",
        )
    return ResetDecision(changes=tuple(changes), clamps=tuple(clamps))


def _clamp_reason(cluster_id: str, handover_ms: int | None) -> str:
    if handover_ms is None:
        return (
            "the first offset at or after the bootstrap archive's until: the archive landed the records before it, "
            "without Kafka coordinates"
        )
    moment = datetime.fromtimestamp(handover_ms / 1000, UTC).isoformat(timespec="milliseconds")
    return (
        f"the first offset at or after {moment.replace('+00:00', 'Z')}, the handover of cluster {cluster_id!r} (its "
        "timestamp starting_offsets in the metadata): its records before it are a mirror's copies of records the old "
        "cluster delivered, landed under the old cluster's coordinates"
    )


def _handovers(metadata: MetadataSnapshot) -> dict[str, int]:
    """Per cluster of the metadata, the epoch ms of its own timestamp ``starting_offsets`` (a failover's handover,
    docs/failover.md), as the planner and backfills read it.
    """
    found: dict[str, int] = {}
    for cluster_id in metadata.clusters():
        starting = metadata.starting_override(cluster_id)
        if isinstance(starting, TimestampOffsets):
            found[cluster_id] = starting.timestamp_ms
    return found


def _broker_offsets(
    context: PipelineContext,
    selected: dict[TopicPartition, PartitionState],
    target: ResetTarget,
    floors_ms: Mapping[str, int | None],
) -> BrokerSnapshot:
    """Earliest, latest, the target timestamp's offsets and, per cluster of ``floors_ms`` with a time (a bootstrap
    archive's ``until``, a handover), the floor at that time of the selected partitions' topics; every cluster
    must answer. A cluster the metadata no longer lists is reached as the metadata service still knows it, else
    at the bootstrap servers its offsets were committed from.
    """
    topics: dict[str, set[str]] = {}
    bootstrap: dict[str, str] = {}
    for key, row in selected.items():
        topics.setdefault(key.cluster_id, set()).add(key.topic)
        bootstrap.setdefault(key.cluster_id, row.bootstrap_servers)
    starting = (
        TimestampOffsets(timestamp_ms=target.timestamp_ms)
        if target.kind == "timestamp" and target.timestamp_ms is not None
        else EarliestOffsets()
    )
    requests = [
        ClusterRequest(
            cluster=_connection(context, cluster_id, bootstrap[cluster_id]),
            topics=frozenset(names),
            starting=starting,
            stopping=LatestOffsets(),
            required=True,
            skip_unreachable=False,
            floor_ms=floors_ms.get(cluster_id),
        )
        for cluster_id, names in sorted(topics.items())
    ]
    return take_broker_snapshot(
        requests,
        isolation_level=context.pipeline.isolation_level,
        now=wall_clock.utc_now(),
        timeout_s=context.pipeline.kafka_timeout_seconds,
    )


def _connection(context: PipelineContext, cluster_id: str, bootstrap: str) -> ClusterMetadata:
    try:
        known = context.service.describe_cluster(cluster_id)
    except MetadataServiceError:
        known = None
    if known is not None:
        return known
    plain = ClusterMetadata(cluster_id=cluster_id, bootstrap_servers=bootstrap)
    return with_pipeline_properties(plain, context.pipeline.id, context.pipeline.properties)


def _key(change: OffsetChange) -> TopicPartition:
    return TopicPartition(cluster_id=change.cluster_id, topic=change.topic, partition=change.partition)


def requester(owner: RunOwner) -> str:
    """Who asks for an operation, for the run history: the login name and the process (host, pid)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no login name (a container's anonymous uid)
        user = "unknown user"
    return f"{user} ({owner.describe()})"
