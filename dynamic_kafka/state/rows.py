"""The state table's schema and the conversion between its rows and the snapshot models.

One Delta table per pipeline, partitioned by ``kind``:

* ``kind='partition'``: one row per (cluster_id, topic, partition) ever committed, active or removed. Its
  ``next_offset`` is the first offset the next run reads. Rewritten whole by every commit, so it never grows
  with the number of runs.
* ``kind='head'``: exactly one row, the pipeline's last run (planned or committed) with its plan as JSON. A planned
  head names its ``owner`` (host, pid and a random token of the process running it) and ``lease_expires_at``: the
  owner renews the lease while it runs; another process recovers the run only once the lease has expired.
* ``kind='run'``: one row per committed run (the history); never read by ``StateStore.load``.
* ``kind='backfill'``: one row per (cluster_id, topic, partition) a time-window backfill ever read; its
  ``next_offset`` is the backfill frontier, the highest stop offset any backfill covered (only ever raised), and
  its ``topic_id`` the topic incarnation it covers (a recreated topic's frontier starts again; a run's commit that
  resets a recreated topic drops the old incarnation's frontier). A ``backfill`` row with status ``floor`` holds,
  for the topic id it names, the offset below which the sink may hold an EARLIER incarnation's rows at the same
  coordinates (recorded by the commit that resets a recreated topic): backfill MERGEs and the runs' backfill
  anti-joins match on coordinates, so neither looks below it.
  Incremental runs dedupe the part of their ranges below it against the sink. One ``backfill`` row with status
  ``sequence`` and no partition counts the backfills that raised a frontier: each such backfill takes the next
  number and its MERGEs carry it as a Delta transaction of their own, so a sink holding a higher number than the
  state shows a state restored from before a backfill (see ``dynamic_kafka.protocol.realign``). The same row names the
  backfill in progress (``owner``, ``lease_expires_at``): its lease, taken with its frontier and renewed while it
  merges, keeps incremental runs of any host from planning beside it. Rewritten whole by each
  backfill; runs never touch these rows (nor backfills the others).

Columns that do not apply to a kind are null. Timestamps are UTC, microseconds.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import pyarrow as pa

from dynamic_kafka.frozen import building_many
from dynamic_kafka.model.plan import Plan, TopicPartition
from dynamic_kafka.model.snapshots import PartitionState, RunRecord, RunStatus

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from dynamic_kafka.model.summary import RunSummary

logger = logging.getLogger(__name__)

Kind = Literal["partition", "head", "run", "backfill"]

_TS = pa.timestamp("us", tz="UTC")

SCHEMA = pa.schema(
    [
        pa.field("kind", pa.string(), nullable=False),
        pa.field("pipeline_id", pa.string(), nullable=False),
        pa.field("status", pa.string(), nullable=False),
        # kind = 'partition'
        pa.field("cluster_id", pa.string()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("next_offset", pa.int64()),
        pa.field("topic_id", pa.string()),
        pa.field("bootstrap_servers", pa.string()),
        pa.field("stream_ids", pa.list_(pa.string())),
        pa.field("removed_at", _TS),
        pa.field("updated_run_seq", pa.int64()),
        # kind = 'head' | 'run'
        pa.field("run_seq", pa.int64()),
        pa.field("planned_at", _TS),
        pa.field("committed_at", _TS),
        pa.field("plan_json", pa.string()),
        pa.field("summary_json", pa.string()),
        # kind = 'head' (added later: older tables gain them at their next write, null in older rows)
        pa.field("owner", pa.string()),
        pa.field("lease_expires_at", _TS),
        # kind = 'partition' (added later, like the two above)
        pa.field("leader_epoch", pa.int32()),
    ]
)

PARTITION_BY = ["kind"]

# Min/max statistics only where they prune (run_seq lets a commit skip the history files); the JSON columns
# would only bloat every log entry and checkpoint that load() replays.
STATS_COLUMNS = "pipeline_id,status,cluster_id,topic,partition,run_seq"


def utc(value: datetime) -> datetime:
    """``value`` in UTC; a naive datetime is taken to be UTC already."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _utc_or_none(value: datetime | None) -> datetime | None:
    return None if value is None else utc(value)


_NAMES = tuple(SCHEMA.names)  # pyarrow builds a new list at every `SCHEMA.names`


def _row(kind: Kind, pipeline_id: str, status: str, **values: Any) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(_NAMES)
    row.update(kind=kind, pipeline_id=pipeline_id, status=status, **values)
    return row


def apply_plan(plan: Plan, partitions: Mapping[TopicPartition, PartitionState], now: datetime) -> list[PartitionState]:
    """The partition rows after committing ``plan`` over ``partitions``, sorted by key.

    Every split (empty ranges included) moves its partition to the split's stop offset and makes it active;
    then every removal marks its partition removed, keeping its offset (a drained partition's is the stop just
    set) and the date of an earlier removal. Partitions the plan does not mention are unchanged.
    """
    rows = dict(partitions)
    for split in plan.splits:
        rows[split.key] = PartitionState(
            cluster_id=split.cluster_id,
            topic=split.topic,
            partition=split.partition,
            next_offset=split.stop_offset,
            topic_id=split.topic_id,
            leader_epoch=split.leader_epoch,
            bootstrap_servers=split.bootstrap_servers,
            stream_ids=split.stream_ids,
            status="active",
            removed_at=None,
            updated_run_seq=plan.run_seq,
        )
    for key in plan.removals:
        current = rows.get(key)
        if current is None:
            logger.warning("run %d removes %s, which has no committed offset: nothing to mark", plan.run_seq, key)
            continue
        rows[key] = current.removed(now, plan.run_seq)
    return sorted(rows.values(), key=lambda p: (p.cluster_id, p.topic, p.partition))


def partition_row(pipeline_id: str, state: PartitionState) -> dict[str, Any]:
    """Return the state row of a partition's committed position."""
    return _row(
        "partition",
        pipeline_id,
        state.status,
        cluster_id=state.cluster_id,
        topic=state.topic,
        partition=state.partition,
        next_offset=state.next_offset,
        topic_id=state.topic_id,
        leader_epoch=state.leader_epoch,
        bootstrap_servers=state.bootstrap_servers,
        stream_ids=list(state.stream_ids),
        removed_at=_utc_or_none(state.removed_at),
        updated_run_seq=state.updated_run_seq,
    )


def run_row(
    kind: Literal["head", "run"],
    plan: Plan,
    status: RunStatus,
    *,
    committed_at: datetime | None = None,
    summary: RunSummary | None = None,
    owner: str | None = None,
    lease_expires_at: datetime | None = None,
) -> dict[str, Any]:
    """Return the state row of a run (the head, or a history entry)."""
    return _row(
        kind,
        plan.pipeline_id,
        status,
        run_seq=plan.run_seq,
        planned_at=utc(plan.planned_at),
        committed_at=_utc_or_none(committed_at),
        plan_json=_PLANS.dump(plan),
        summary_json=summary.model_dump_json() if summary is not None else None,
        owner=owner,
        lease_expires_at=_utc_or_none(lease_expires_at),
    )


class _PlanMemo:
    """The last plans this process wrote to or read from a state row, with their JSON text.

    A run reads the last run's plan with the state, writes its own ahead (``begin_run``, which first reads the head
    again), then renews its lease and commits, and each of these reads the head row back to check it still holds
    exactly this plan: without the memo every read parsed the whole plan again (about a second per 100,000
    splits) and compared it split by split. The same text always parses to an equal plan, and plans are
    immutable, so handing back the one already parsed (or written) changes nothing but the time. Two entries:
    the last run's plan and this run's; a miss only parses.
    """

    _SIZE = 2

    def __init__(self) -> None:
        self._entries: tuple[tuple[str, Plan], ...] = ()

    def dump(self, plan: Plan) -> str:
        """``plan`` as JSON, remembered with it (a commit writes the same plan in two rows)."""
        for text, known in self._entries:
            if known is plan:
                return text
        text = plan.model_dump_json()
        self._remember(text, plan)
        return text

    def load(self, text: str) -> Plan:
        """The plan of ``text``: the remembered one when the text is the same, else parsed (and remembered)."""
        for known_text, plan in self._entries:
            if known_text == text:
                return plan
        with building_many():
            plan = Plan.model_validate_json(text)
        self._remember(text, plan)
        return plan

    def _remember(self, text: str, plan: Plan) -> None:
        # One assignment of a new tuple: a lease renewal in another thread reads either the old or the new one.
        self._entries = ((text, plan), *self._entries[: self._SIZE - 1])


_PLANS = _PlanMemo()

FLOOR = "floor"
"""The status of a ``backfill`` row that holds a floor instead of a frontier."""


class Frontier(NamedTuple):
    """A partition's backfill frontier as its state row holds it: the offset, the topic incarnation it is for
    (None when unknown) and, with a table per stream, the stream whose table the backfills merged the partition
    into (None: no table per stream, or recorded before streams were kept).
    """

    offset: int
    topic_id: str | None
    stream: str | None = None


class BackfillLease(NamedTuple):
    """Who holds the pipeline's backfill lease (an owner's text, ``RunOwner.text``) and until when."""

    owner: str
    expires_at: datetime | None


SEQUENCE = "sequence"
"""The status of the one ``backfill`` row that holds the backfill sequence instead of a partition's offset."""


def backfill_row(
    pipeline_id: str,
    key: TopicPartition,
    frontier: int,
    recorded_at: datetime,
    topic_id: str | None = None,
    *,
    floor: bool = False,
    stream: str | None = None,
) -> dict[str, Any]:
    """Return the state row of a partition's backfill frontier, or of its floor when ``floor`` is set.

    Args:
        pipeline_id: the pipeline the row belongs to.
        key: the partition.
        frontier: the frontier (highest stop offset a backfill covered), or the floor offset.
        recorded_at: when the row was written.
        topic_id: the topic incarnation the frontier or floor is for (None when unknown).
        floor: write a floor row (status ``floor``) instead of a frontier row.
        stream: with a table per stream, the stream whose table the backfills merged the partition into.
    """
    return _row(
        "backfill",
        pipeline_id,
        FLOOR if floor else "recorded",
        cluster_id=key.cluster_id,
        topic=key.topic,
        partition=key.partition,
        next_offset=frontier,
        topic_id=topic_id,
        stream_ids=None if stream is None else [stream],
        committed_at=utc(recorded_at),
    )


def backfill_sequence_row(
    pipeline_id: str,
    sequence: int,
    recorded_at: datetime,
    *,
    owner: str | None = None,
    lease_expires_at: datetime | None = None,
) -> dict[str, Any]:
    """Return the state row holding the backfill sequence (how many backfills raised a frontier) and the lease of
    the backfill in progress, if any (``owner``, ``lease_expires_at``; earlier versions ignore both).
    """
    return _row(
        "backfill",
        pipeline_id,
        SEQUENCE,
        next_offset=sequence,
        committed_at=utc(recorded_at),
        owner=owner,
        lease_expires_at=_utc_or_none(lease_expires_at),
    )


def backfill_lease_from_row(row: dict[str, Any]) -> BackfillLease | None:
    """Return the backfill lease the backfill sequence row names (None: no backfill holds one)."""
    owner = row.get("owner")  # absent in tables written before backfills held leases
    return None if not owner else BackfillLease(owner, _utc_or_none(row.get("lease_expires_at")))


def to_table(rows: Iterable[dict[str, Any]]) -> pa.Table:
    """Return state rows as an Arrow table in the state table's schema."""
    return pa.Table.from_pylist(list(rows), schema=SCHEMA)


_PARTITION_COLUMNS = (
    "cluster_id",
    "topic",
    "partition",
    "next_offset",
    "topic_id",
    "leader_epoch",
    "bootstrap_servers",
    "stream_ids",
    "status",
    "removed_at",
    "updated_run_seq",
)
_OPTIONAL_COLUMNS = frozenset({"leader_epoch"})  # absent in tables written before epochs were recorded


def partitions_from_table(table: pa.Table) -> dict[TopicPartition, PartitionState]:
    """Return the committed positions of a table of ``partition`` rows by partition, sorted.

    Read column by column: a state of 100,000 partitions is read without making a dict of every column of every
    row first. A null written by an older writer reads as the field's default.
    """
    columns = [
        table.column(c).to_pylist() if c in table.column_names or c not in _OPTIONAL_COLUMNS else [None] * len(table)
        for c in _PARTITION_COLUMNS
    ]
    with building_many():
        found = sorted(
            (_partition_state(*values) for values in zip(*columns, strict=True)),
            key=lambda p: (p.cluster_id, p.topic, p.partition),
        )
        return {p.key: p for p in found}


def _partition_state(  # every value as the state table's column holds it
    cluster_id: Any,
    topic: Any,
    partition: Any,
    next_offset: Any,
    topic_id: Any,
    leader_epoch: Any,
    bootstrap_servers: Any,
    stream_ids: Any,
    status: Any,
    removed_at: Any,
    updated_run_seq: Any,
) -> PartitionState:
    return PartitionState(
        cluster_id=cluster_id,
        topic=topic,
        partition=partition,
        next_offset=next_offset,
        topic_id=topic_id,
        leader_epoch=leader_epoch,
        bootstrap_servers=bootstrap_servers or "",
        stream_ids=tuple(stream_ids or ()),
        status=status,
        removed_at=_utc_or_none(removed_at),
        updated_run_seq=updated_run_seq or 0,
    )


def backfill_from_row(row: dict[str, Any]) -> tuple[TopicPartition, Frontier]:
    """Return a partition and its backfill frontier (or floor), from its state row."""
    if row["next_offset"] is None:
        raise ValueError(f"backfill row without an offset: {row}")
    key = TopicPartition(cluster_id=row["cluster_id"], topic=row["topic"], partition=row["partition"])
    streams = row.get("stream_ids") or ()
    return key, Frontier(int(row["next_offset"]), row.get("topic_id"), streams[0] if streams else None)


def run_from_row(row: dict[str, Any]) -> RunRecord:
    """Return a run record from its state row."""
    plan = _PLANS.load(row["plan_json"])
    return RunRecord(
        pipeline_id=row["pipeline_id"],
        run_seq=row["run_seq"],
        status=row["status"],
        plan=plan,
        planned_at=utc(row["planned_at"]),
        committed_at=_utc_or_none(row["committed_at"]),
        summary_json=row["summary_json"],
        findings=plan.findings,
        owner=row.get("owner"),
        lease_expires_at=_utc_or_none(row.get("lease_expires_at")),
    )
