"""A state behind its sink: detecting it before anything is planned, and realigning the state with the sink.

The sink's Delta log records, per pipeline, the last transaction version (= run_seq) appended. Normally it is the
state's last committed run, or its planned run when a crash came after the sink commit. When it is higher, the
state is older than the sink (restored from a backup, moved, replaced by a copy): runs the state does not know
landed records. Running on would reuse their run_seqs; Delta skips an append whose txn version it already holds,
so those runs would commit offsets and land nothing. :func:`check_not_behind` refuses that before planning. The
fence of an abandoned run (:mod:`dynamic_kafka.sink.fence`) is such a transaction too: its run_seq is used up.

:func:`realign` repairs it without losing or duplicating records, using the dedupe that backfills already need:

* the head becomes a committed, empty run numbered like the sink's transaction, so the next run_seq is new;
* likewise for backfills: each backfill that raises a frontier takes the state's next backfill sequence number and
  its MERGEs record it as a Delta transaction of their own (app id ``<pipeline>/backfill``). A sink holding a higher
  number means the state was restored from before a backfill, so it lost that backfill's frontier and a run would
  append blind over what the backfill merged; the state's sequence moves up to the sink's;
* the backfill frontier of every partition the sink (or dead-letter table) holds rows of later runs (or of
  backfills, when the state is behind on those) for is raised to one past the highest such offset, so the next
  run, which starts at the state's older offsets, reads those records again but skips every one the sink already
  holds (compared by cluster, topic, partition and offset);
* the partition offsets do not move: committed offsets stay planned stops, never derived from data.

With a table per stream (``sink.path: data/{stream}``) the sink is every table of a stream the state knows: the
highest transactions over all of them decide, and the frontier is raised from each stream's rows (a partition lands
in one stream's table). ``realign`` also reads the tables of the streams the subscription finds now, so a table the
restored state does not know at all (the stream first landed after the backup) is realigned too; a run or backfill
about to write such a table is refused while the state is behind it (:func:`check_tables_not_behind`).

Consequences: the next run re-reads from the state's offsets (more Kafka reads, and a sink check over the realigned
ranges); records retention deleted since the backup are reported as data loss by the planner as usual; the run
history between the backup and the sink's transaction is not in the state (the sink's Delta history has it).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import pyarrow.compute as pc

from dynamic_kafka.errors import StateBehindSinkError
from dynamic_kafka.frozen import FrozenModel
from dynamic_kafka.model.plan import TopicPartition
from dynamic_kafka.model.summary import RealignedPositions, RunSummary
from dynamic_kafka.sink.per_stream import known_tables, unknown_tables
from dynamic_kafka.sink.tables import backfill_app_id, committed_txn_versions, open_delta_rs

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from dynamic_kafka.config.models import PipelineConfig
    from dynamic_kafka.model.snapshots import StateSnapshot
    from dynamic_kafka.sink.per_stream import SinkTable
    from dynamic_kafka.state import StateStore
    from dynamic_kafka.storage import TableRef

logger = logging.getLogger(__name__)


class SinkPosition(FrozenModel):
    """The highest transaction versions of a pipeline in its sink and dead-letter table: its runs' and its
    backfills'.
    """

    txn: int | None
    table: str
    backfill: int | None = None
    backfill_table: str | None = None


def sink_position(pipeline: PipelineConfig) -> SinkPosition:
    """The pipeline's highest run and backfill transaction versions over its sink and dead-letter table (the
    dead-letter table is written first, so after a crash between the two it can be one ahead of the sink).
    JVM-free.
    """
    app_ids = (pipeline.id, backfill_app_id(pipeline.id))
    # Per app id, the highest version and the table holding it; each table's log is read once.
    best: dict[str, tuple[int, str]] = {}
    for table in (pipeline.sink_table, pipeline.dead_letter_table):
        for app_id, txn in committed_txn_versions(table, app_ids).items():
            if txn is not None and (app_id not in best or txn > best[app_id][0]):
                best[app_id] = (txn, str(table))
    runs, backfills = (best.get(app_id, (None, None)) for app_id in app_ids)
    return SinkPosition(
        txn=runs[0], table=runs[1] or str(pipeline.sink_table), backfill=backfills[0], backfill_table=backfills[1]
    )


def highest_position(pipeline: PipelineConfig, tables: Sequence[SinkTable]) -> SinkPosition:
    """The pipeline's highest run and backfill transaction versions over ``tables`` (:func:`sink_position` of
    each), each with the table holding it.
    """
    positions = [sink_position(table.pipeline) for table in tables]
    runs = max((p for p in positions if p.txn is not None), key=lambda p: p.txn or 0, default=None)
    backfills = max((p for p in positions if p.backfill is not None), key=lambda p: p.backfill or 0, default=None)
    return SinkPosition(
        txn=runs.txn if runs is not None else None,
        table=runs.table if runs is not None else str(pipeline.sink.path),
        backfill=backfills.backfill if backfills is not None else None,
        backfill_table=backfills.backfill_table if backfills is not None else None,
    )


def last_run_seq(state: StateSnapshot) -> int:
    """The state's last run_seq, planned or committed (0 without runs)."""
    return state.last_run.run_seq if state.last_run is not None else 0


def check_not_behind(pipeline: PipelineConfig, state: StateSnapshot, store_path: str) -> None:
    """Refuses a state that is behind its sink (with a table per stream: behind any table of a stream it knows).

    Raises:
        StateBehindSinkError: the sink holds a run_seq beyond the state's last (planned or committed) run, or a
            backfill beyond the state's backfill sequence.
    """
    for table in known_tables(pipeline, state):
        _check_position(table.pipeline, state, store_path)


def check_tables_not_behind(
    pipeline: PipelineConfig, state: StateSnapshot, streams: Iterable[str], store_path: str
) -> None:
    """Refuses a state behind the table of any of ``streams`` (the tables a writer is about to write) that it does
    not know: a stream first landed after the backup the state was restored from has a table the state never heard
    of, whose transactions the run_seqs to come would reuse. Nothing to check for a table the state knows (the one
    sink always; :func:`check_not_behind` checked those).

    Raises:
        StateBehindSinkError: as :func:`check_not_behind`, naming the stream's table.
    """
    for table in unknown_tables(pipeline, state, streams):
        _check_position(table.pipeline, state, store_path)


def _check_position(pipeline: PipelineConfig, state: StateSnapshot, store_path: str) -> None:
    position = sink_position(pipeline)
    last = last_run_seq(state)
    if position.txn is not None and position.txn > last:
        raise StateBehindSinkError(
            pipeline.id, table=position.table, sink_txn=position.txn, state_run_seq=last, state_path=store_path
        )
    if position.backfill is not None and position.backfill > state.backfill_sequence:
        raise StateBehindSinkError(
            pipeline.id,
            table=position.backfill_table or position.table,
            sink_txn=position.backfill,
            state_run_seq=state.backfill_sequence,
            state_path=store_path,
            backfill=True,
        )


def landed_frontier(
    pipeline: PipelineConfig, after_run_seq: int | None, *, backfills: bool = False
) -> dict[TopicPartition, int]:
    """Per partition, one past the highest offset the sink or dead-letter table holds from runs after
    ``after_run_seq`` (None: from no run) and, with ``backfills``, from backfills (their rows have no ``_run_seq``).
    Reads only those rows (``_run_seq`` statistics prune older files). JVM-free.
    """
    wanted = []
    if after_run_seq is not None:
        wanted.append(pc.field("_run_seq") > after_run_seq)
    if backfills:
        wanted.append(pc.field("_run_seq").is_null())
    if not wanted:
        return {}
    condition = wanted[0] if len(wanted) == 1 else wanted[0] | wanted[1]
    return _frontier((pipeline.sink_table, pipeline.dead_letter_table), condition)


def run_frontier(table: TableRef, run_seq: int) -> dict[TopicPartition, int]:
    """Per partition, one past the highest offset ``table`` holds from run ``run_seq``. JVM-free."""
    return _frontier((table,), pc.field("_run_seq") == run_seq)


def _frontier(tables: Sequence[TableRef], condition: pc.Expression) -> dict[TopicPartition, int]:
    frontier: dict[TopicPartition, int] = {}
    for table in tables:
        opened = open_delta_rs(table, doing=f"reading the landed offsets of {table}")
        if opened is None:
            continue
        dataset = opened.to_pyarrow_dataset()
        # A bootstrap archive's rows may have no coordinates: they hold no Kafka position.
        placed = pc.field("topic").is_valid() & pc.field("partition").is_valid() & pc.field("offset").is_valid()
        rows = dataset.to_table(columns=["cluster", "topic", "partition", "offset"], filter=condition & placed)
        if rows.num_rows == 0:
            continue
        grouped = rows.group_by(["cluster", "topic", "partition"]).aggregate([("offset", "max")])
        for cluster, topic, partition, top in zip(
            *(grouped.column(c).to_pylist() for c in ("cluster", "topic", "partition", "offset_max")), strict=True
        ):
            key = TopicPartition(cluster_id=cluster, topic=topic, partition=int(partition))
            frontier[key] = max(frontier.get(key, 0), int(top) + 1)
    return frontier


class Realignment(FrozenModel):
    """What ``realign`` found and did (or, without ``yes``, would do)."""

    pipeline_id: str
    state_run_seq: int
    sink_txn: int | None
    state_backfill: int = 0
    sink_backfill: int | None = None
    needed: bool
    applied: bool
    next_run_seq: int
    frontier: dict[str, int]
    """Per partition (``cluster/topic/partition``), the offset below which the next run checks the sink."""


def realign(
    pipeline: PipelineConfig,
    store: StateStore,
    *,
    yes: bool,
    subscribed: Callable[[], Iterable[str]] | None = None,
) -> Realignment:
    """Realigns a state that is behind its sink (see the module docstring); with ``yes`` False, only reports.
    ``subscribed``: the streams the subscription finds now (asked only with a table per stream); their tables are
    read too, known to the state or not (a stream first landed after the state's backup).

    Raises:
        RunInProgressError: the state changed while realigning (a run started); nothing was written.
    """
    state = store.load()
    tables = known_tables(pipeline, state, also=subscribed)
    position = highest_position(pipeline, tables)
    last = last_run_seq(state)
    runs_behind = position.txn is not None and position.txn > last
    backfills_behind = position.backfill is not None and position.backfill > state.backfill_sequence
    needed = runs_behind or backfills_behind
    # A planned head's offsets were never committed: its rows count as landed beyond the state too.
    committed = last - 1 if state.last_run is not None and state.last_run.status == "planned" else last
    frontier: dict[TopicPartition, int] = {}
    pins: dict[TopicPartition, str] = {}
    for table in tables if needed else ():
        # A partition lands in one stream's table; max() all the same, as over a sink and its dead-letter table.
        for key, offset in landed_frontier(
            table.pipeline, committed if runs_behind else None, backfills=backfills_behind
        ).items():
            frontier[key] = max(frontier.get(key, 0), offset)
            if table.stream is not None:
                pins.setdefault(key, table.stream)  # pins a partition no run committed to the table it is in
    shown = {f"{k.cluster_id}/{k.topic}/{k.partition}": v for k, v in sorted(frontier.items(), key=str)}
    applied = False
    next_run_seq = (position.txn if runs_behind and position.txn is not None else last) + 1
    if needed and yes:
        summary = RunSummary.realigned(
            pipeline.id,
            RealignedPositions(
                state_run_seq=last,
                sink_txn=position.txn or 0,
                state_backfill=state.backfill_sequence,
                sink_backfill=position.backfill or 0,
                frontier_partitions=len(frontier),
            ),
        )
        store.realign(
            sink_txn=position.txn or 0,
            frontier=frontier,
            summary=summary,
            expected_version=state.table_version,
            backfill_sequence=position.backfill or 0,
            streams=pins,
        )
        applied = True
        logger.warning(
            "pipeline %s: state realigned with its sink: next run_seq %d (was %d), backfill sequence %d (was %d), "
            "%d partitions checked against the sink by the next run",
            pipeline.id,
            next_run_seq,
            last + 1,
            max(state.backfill_sequence, position.backfill or 0),
            state.backfill_sequence,
            len(frontier),
        )
    return Realignment(
        pipeline_id=pipeline.id,
        state_run_seq=last,
        sink_txn=position.txn,
        state_backfill=state.backfill_sequence,
        sink_backfill=position.backfill,
        needed=needed,
        applied=applied,
        next_run_seq=next_run_seq,
        frontier=shown,
    )
