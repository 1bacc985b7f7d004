"""``StateStore``: a pipeline's committed offsets and run history in one Delta table, written ahead of every read.

Invariants:

* Every write is ONE Delta commit made against exactly the table version the caller read (delta-rs
  ``CommitProperties(max_commit_retries=0)``): if anything else committed since, the write fails with
  ``RunInProgressError`` and leaves nothing visible. There is no automatic retry and no conflict resolution.
* Offsets and the head run change together: ``commit_run`` rewrites the partition rows and flips the head to
  "committed" in the same commit, so a reader sees either the old offsets with the run planned, or the new
  offsets with the run committed.
* ``load`` reads the partition, head and backfill rows only (partition pruning on ``kind``): O(partitions),
  whatever the number of runs. The history is read by ``run_history`` alone.
* The backfill frontier (``record_backfill``) lives in rows of its own that runs never rewrite; it is only
  raised, never while a run is planned, and never moves the incremental offsets.

Why a crash cannot leave a partial state: delta-rs first writes the new Parquet files (invisible: no log entry
references them), then publishes the commit as one log file ``_delta_log/<version>.json`` with an atomic
put-if-absent (on a local disk: a staged file hard-linked into place; on object stores: a conditional put).
A process killed before that step leaves orphan files that no version references (``maintain`` vacuums them
once they are an hour old); killed after it, the whole commit is visible. There is no third outcome.
``tests/unit/test_state.py`` kills writers at random points and checks it.

The store decides WHAT each write holds and checks it is the right next step; HOW a write commits at an exact
version is :mod:`dynamic_kafka.state.table` (the commit protocol), and housekeeping is
:mod:`dynamic_kafka.state.housekeeping`.

Why one module of this size: every state transition (plan, lease, commit, abandon, realign, backfill) is one
commit against one read version, and they sit next to the invariants above that each of them keeps.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import pyarrow.compute as pc
from pydantic import Field, ValidationError

from dynamic_kafka import clock as wall_clock
from dynamic_kafka.errors import DynamicKafkaError, RunInProgressError, StateError
from dynamic_kafka.frozen import FrozenModel, building_many
from dynamic_kafka.model.plan import Plan, TopicPartition
from dynamic_kafka.model.snapshots import PartitionState, RunRecord, StateSnapshot
from dynamic_kafka.model.summary import RunSummary
from dynamic_kafka.state import rows as _rows
from dynamic_kafka.state.housekeeping import maintain
from dynamic_kafka.state.owner import RunOwner
from dynamic_kafka.state.table import EMPTY_ROWS, FOREIGN_ERRORS, LostRaceError, StateTable

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from pathlib import Path

logger = logging.getLogger(__name__)


class RecordedBackfill(FrozenModel):
    """What ``StateStore.record_backfill`` wrote."""

    version: int | None = Field(description="The state version holding the frontier (None: no state exists).")
    sequence: int | None = Field(
        description="The backfill's sequence number, for its MERGEs' Delta transaction; None when every frontier "
        "was already as high (nothing was written, and the backfill lands nothing a run could append blind)."
    )


_LOADED = "kind IN ('partition', 'head', 'backfill')"


class StateStore:
    """The committed state of one pipeline, kept in a Delta table at ``path`` that belongs to it alone.

    Example:
        >>> store = StateStore("data/_state/orders", "orders")  # doctest: +SKIP
        >>> snapshot = store.load()  # doctest: +SKIP
        >>> version = store.begin_run(plan, expected_version=snapshot.table_version)  # doctest: +SKIP
        >>> ...  # read the plan's ranges, write the sink  # doctest: +SKIP
        >>> version = store.commit_run(plan, summary=summary, expected_version=version)  # doctest: +SKIP
        >>> store.maintain()  # doctest: +SKIP

    Args:
        path: local path or URI of the state table (one table per pipeline).
        pipeline_id: the pipeline this state belongs to; a table created for another pipeline is refused.
        storage_options: delta-rs storage options for object stores.
        checkpoint_interval: delta-rs writes a log checkpoint every this many versions (table property,
            applied when the table is created), so opening the table replays at most this many log entries.
        maintain_every: ``maintain`` compacts the history and vacuums once this many small history files exist
            (one per committed run).
        log_retention: log entries older than this (and older than the last checkpoint) are deleted
            (``delta.logRetentionDuration``, applied at creation). Bounds time travel, not correctness.
        deleted_file_retention: how long tombstones of removed files stay in checkpoints
            (``delta.deletedFileRetentionDuration``, applied at creation); every commit leaves two or three, so
            this bounds what opening the table reads. ``maintain`` deletes removed and orphaned files once they
            are this old, but never younger than ``_MIN_VACUUM_AGE``: a concurrent writer's new, not yet
            committed files must survive a vacuum.
        clock: returns "now" (UTC); for tests.
    """

    def __init__(
        self,
        path: Path | str,
        pipeline_id: str,
        *,
        storage_options: Mapping[str, str] | None = None,
        checkpoint_interval: int = 10,
        maintain_every: int = 20,
        log_retention: timedelta = timedelta(days=2),
        deleted_file_retention: timedelta = timedelta(hours=1),
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        if checkpoint_interval < 1 or maintain_every < 1:
            raise ValueError("checkpoint_interval and maintain_every must be >= 1")
        self.path = str(path)
        self.pipeline_id = pipeline_id
        self._table = StateTable(
            self.path,
            pipeline_id,
            storage_options=storage_options,
            checkpoint_interval=checkpoint_interval,
            log_retention=log_retention,
            deleted_file_retention=deleted_file_retention,
        )
        self._maintain_every = maintain_every
        self._clock = clock or (lambda: wall_clock.utc_now())

    def __repr__(self) -> str:
        return f"StateStore(path={self.path!r}, pipeline_id={self.pipeline_id!r})"

    # ----------------------------------------------------------------------------------------------- reads

    def load(self) -> StateSnapshot:
        """The current partition rows (active and removed), the last run and the backfill frontier, at the latest
        table version.

        Reads the log (bounded by checkpoints) and the ``partition``, ``head`` and ``backfill`` files only, never
        the history. A missing table gives an empty snapshot with ``table_version=None``.
        """
        started = time.perf_counter()
        dt, (head, partitions, backfilled, floors, sequence, lease) = self._table.read_latest(_LOADED)
        if dt is None:
            return StateSnapshot(pipeline_id=self.pipeline_id)
        operations, before = self._since_last_read(head) if head is not None and head.is_operation else ((), None)
        snapshot = StateSnapshot(
            pipeline_id=self.pipeline_id,
            table_version=dt.version(),
            last_run=head,
            operations=operations,
            before_operations=before,
            partitions=partitions,
            backfilled={k: f.offset for k, f in backfilled.items()},
            backfill_topic_ids={k: f.topic_id for k, f in backfilled.items() if f.topic_id is not None},
            backfill_streams={k: f.stream for k, f in backfilled.items() if f.stream is not None},
            backfill_floors={k: floor for k, (floor, _) in floors.items()},
            backfill_sequence=sequence,
            backfill_owner=lease.owner if lease is not None else None,
            backfill_lease_expires_at=lease.expires_at if lease is not None else None,
        )
        logger.debug(
            "loaded state of %s at version %d: %d partitions in %.1f ms",
            self.pipeline_id,
            dt.version(),
            len(partitions),
            1000 * (time.perf_counter() - started),
        )
        return snapshot

    def _since_last_read(self, head: RunRecord) -> tuple[tuple[RunRecord, ...], RunRecord | None]:
        """The operations recorded since the newest run that is not one (``head`` first), and that run (None if
        there is none). Read from the history only when ``head`` is an operation: operations are made by hand, so
        this reads a few runs, rarely, and ``load`` stays O(partitions) otherwise.
        """
        limit = 8
        while True:
            history = self.run_history(limit)
            operations: list[RunRecord] = []
            for record in (r for r in history if r.run_seq <= head.run_seq):  # not a run committed since the load
                if not record.is_operation:
                    return tuple(operations), record
                operations.append(record)
            if len(history) < limit:  # the whole history is operations
                return tuple(operations), None
            limit *= 8

    def run_history(self, limit: int = 20) -> list[RunRecord]:
        """The last ``limit`` runs, newest first: the planned head run if any, then committed runs."""
        if limit <= 0:
            return []
        return self._table.retry_vanished(lambda: self._run_history(limit))

    def _run_history(self, limit: int) -> list[RunRecord]:
        dt = self._table.open()
        if dt is None:
            return []
        head, _ = self._table.read_current(dt, predicate="kind = 'head'")
        records = [head] if head is not None and head.status == "planned" else []
        wanted = limit - len(records)
        if wanted == 0:
            return records
        try:
            history = dt.to_pyarrow_dataset(file_pruning_predicate="kind = 'run'")
            # run_seq alone first, then the plans of the newest runs only (min/max statistics prune older files).
            seqs = sorted(history.to_table(columns=["run_seq"]).column("run_seq").to_pylist(), reverse=True)
            if seqs:
                floor = seqs[:wanted][-1]
                rows = history.to_table(filter=pc.field("run_seq") >= floor).to_pylist()
                runs = sorted((_rows.run_from_row(r) for r in rows), key=lambda r: r.run_seq, reverse=True)
                records.extend(runs[:wanted])
        except (*FOREIGN_ERRORS, ValidationError) as e:
            raise self._table.unreadable(e) from e
        return records

    # ---------------------------------------------------------------------------------------------- writes

    def begin_run(
        self,
        plan: Plan,
        *,
        expected_version: int | None,
        owner: str | None = None,
        lease_expires_at: datetime | None = None,
    ) -> int:
        """Write ``plan`` ahead as the "planned" head run, in one commit against ``expected_version``.

        Args:
            plan: the run's plan; ``plan.run_seq`` must be the state's next run_seq.
            expected_version: the table version the plan was made from (``StateSnapshot.table_version``);
                None when the state table does not exist yet.
            owner: who runs it (host, pid, token), recorded in the head so others can tell it is alive.
            lease_expires_at: until when ``owner`` holds the run unless it renews the lease (:meth:`lease`).

        Returns:
            The new table version (``expected_version + 1``, or 0 for a new table).

        Raises:
            RunInProgressError: something else committed after ``expected_version`` (another run planned
                first); nothing was written. Not retried here.
            StateError: the state is unreadable, or ``plan`` is not the next run of this state.
        """
        self._check_pipeline(plan)
        rows = [_rows.run_row("head", plan, "planned", owner=owner, lease_expires_at=lease_expires_at)]
        if expected_version is None:
            self._check_next(None, plan)
            return self._table.create(rows, plan, "begin_run")
        dt = self._table.open_at(expected_version, plan)
        head, _, _, _, _, backfill = self._table.read_rows(dt, "kind IN ('head', 'backfill')")
        self._check_next(head, plan)
        self._refuse_live_backfill(backfill, plan.run_seq)
        return self._table.overwrite(dt, rows, "kind = 'head'", plan, "begin_run")

    def lease(self, plan: Plan, *, owner: str, lease_expires_at: datetime, expected_version: int) -> int:
        """Renew (same owner) or take over (a recovering process) the lease of the planned run ``plan``: the head
        row is rewritten with ``owner`` and ``lease_expires_at``, in one commit against ``expected_version``.

        Returns:
            The new table version (later writes of this run must expect it).

        Raises:
            RunInProgressError: the table changed since ``expected_version`` (another process committed, took the
                run over or recovered it); nothing was written.
            StateError: the head at ``expected_version`` is not ``plan``, planned.
        """
        self._check_pipeline(plan)
        dt = self._table.open_at(expected_version, plan)
        head, _, _, _, _, backfill = self._table.read_rows(dt, "kind IN ('head', 'backfill')")
        if head is None or head.status != "planned" or head.run_seq != plan.run_seq or head.plan != plan:
            found = "no run" if head is None else f"run {head.run_seq} {head.status}"
            raise StateError(
                f"cannot lease run {plan.run_seq} of pipeline {self.pipeline_id!r}: the state table at {self.path} "
                f"has {found} at version {expected_version}, not run {plan.run_seq} planned with this plan."
            )
        if head.owner != owner:  # a takeover (recovery) writes the sink next: never beside a backfill
            self._refuse_live_backfill(backfill, plan.run_seq)
        rows = [_rows.run_row("head", plan, "planned", owner=owner, lease_expires_at=lease_expires_at)]
        return self._table.overwrite(dt, rows, "kind = 'head'", plan, "lease")

    def realign(
        self,
        *,
        sink_txn: int,
        frontier: Mapping[TopicPartition, int],
        summary: RunSummary,
        expected_version: int | None,
        backfill_sequence: int = 0,
        streams: Mapping[TopicPartition, str] | None = None,
    ) -> int:
        """Realign a state that is behind its sink (restored from a backup or moved), in ONE commit.

        When the sink holds a later run (``sink_txn`` beyond the state's last run), the head becomes a committed,
        empty run ``sink_txn`` (so the next run_seq is ``sink_txn + 1``, never one Delta already holds). When it
        holds a later backfill (``backfill_sequence`` beyond the state's), the state's backfill sequence moves up
        to it (so the next backfill's transaction is one Delta has not seen). Either way the backfill frontier is
        raised to ``frontier`` (per partition, one past the highest offset the sink holds from what the state does
        not know), so the next run, which starts at the state's (older) offsets, skips the records already landed.
        The partition offsets are not moved. A planned head is replaced when the sink holds a later run (its run
        is in the sink or re-read); otherwise it stays, and its recovery dedupes against the raised frontier.
        ``streams`` (a table per stream): per partition of ``frontier``, the stream whose table holds its rows,
        recorded with the frontier (see :meth:`record_backfill`).

        Raises:
            RunInProgressError: the table changed since ``expected_version``; nothing was written.
            StateError: the sink holds neither a later run nor a later backfill than the state.
        """
        dt = None if expected_version is None else self._table.open(expected_version)
        head, partitions, recorded, floors, sequence, _ = (
            self._table.read_rows(dt, _LOADED) if dt is not None else EMPTY_ROWS
        )
        last = head.run_seq if head is not None else 0
        runs_behind = sink_txn > last
        if not runs_behind and backfill_sequence <= sequence:
            raise StateError(
                f"nothing to realign: the state of pipeline {self.pipeline_id!r} at {self.path} is at run {last} "
                f"and backfill {sequence}; the sink at run {sink_txn} and backfill {backfill_sequence}."
            )
        now = self._clock()
        streams = streams or {}
        merged = dict(recorded)
        for key, offset in frontier.items():
            # The sink's rows carry coordinates only: the frontier is for the incarnation the state's partition row
            # knows. A frontier recorded for another incarnation is replaced, not raised (as in record_backfill).
            row = partitions.get(key)
            current_id = row.topic_id if row is not None else None
            old = merged.get(key, _NO_FRONTIER)
            same = old.topic_id is None or current_id is None or old.topic_id == current_id
            merged[key] = _rows.Frontier(
                max(offset, old.offset) if same else offset, current_id or old.topic_id, streams.get(key, old.stream)
            )
        rows = [
            *_frontier_rows(self.pipeline_id, merged, now),
            *_floor_rows(self.pipeline_id, floors, max(sequence, backfill_sequence), now),
        ]
        predicate = "kind = 'backfill'"
        plan = None
        if runs_behind:
            plan = Plan(pipeline_id=self.pipeline_id, run_seq=sink_txn, splits=(), planned_at=now)
            rows += [
                _rows.run_row("head", plan, "committed", committed_at=now, summary=summary),
                _rows.run_row("run", plan, "committed", committed_at=now, summary=summary),
            ]
            predicate += f" OR kind = 'head' OR (kind = 'run' AND run_seq = {sink_txn})"
        try:
            if dt is None:
                return self._table.create(rows, plan, "realign")
            return self._table.overwrite(dt, rows, predicate, plan, "realign")
        except LostRaceError as e:
            raise RunInProgressError(self.pipeline_id, last + 1) from e

    def commit_run(self, plan: Plan, *, summary: RunSummary, expected_version: int) -> int:
        """Commit a planned run: new offsets, removals, head "committed" and a history row, in ONE commit.

        Every split (empty ranges included) sets its partition's ``next_offset`` to the split's stop offset
        and makes it active; every removal marks its partition removed, keeping its offset (the drained stop
        when the same run drained it). Partitions the plan does not mention keep their rows.

        Args:
            plan: exactly the plan written by ``begin_run`` (or read back from ``load().last_run`` to recover).
            summary: the run summary, stored in the head and history rows.
            expected_version: the version returned by ``begin_run`` (or loaded when recovering).

        Returns:
            The new table version.

        Raises:
            RunInProgressError: the table changed since ``expected_version``; nothing was written.
            StateError: the head run at ``expected_version`` is not this plan, planned.
        """
        self._check_pipeline(plan)
        dt = self._table.open_at(expected_version, plan)
        head, partitions = self._table.read_current(dt)
        if head is None or head.status != "planned" or head.run_seq != plan.run_seq:
            found = "no run" if head is None else f"run {head.run_seq} {head.status}"
            raise StateError(
                f"cannot commit run {plan.run_seq} of pipeline {self.pipeline_id!r}: the state table at "
                f"{self.path} has {found} at version {expected_version}, not run {plan.run_seq} planned.",
                hint="Commit only a run written ahead with begin_run, against the version begin_run returned.",
            )
        if head.plan != plan:
            raise StateError(
                f"cannot commit run {plan.run_seq} of pipeline {self.pipeline_id!r}: its plan differs from the "
                f"plan written ahead in the state table at {self.path}.",
                hint="A planned run is finished with exactly its recorded plan (load().last_run.plan).",
            )
        rows = self._commit_rows(plan, partitions, summary)
        predicate = self._commit_predicate(plan)
        stale = self._stale_frontier(dt, plan, partitions)
        if stale is not None:
            rows.extend(stale)
            predicate += " OR kind = 'backfill'"
        return self._table.overwrite(dt, rows, predicate, plan, "commit_run")

    def abandon_run(
        self,
        run_seq: int,
        *,
        reason: str,
        expected_version: int | None = None,
        landed: Mapping[TopicPartition, int] | None = None,
    ) -> int:
        """Marks the planned run ``run_seq`` abandoned: its offsets are NOT committed, the head and a history row
        record it with ``reason``, and the next run plans afresh (from the committed offsets) as run ``run_seq + 1``.

        For a planned run that cannot complete (its range was deleted, its topic recreated, its cluster is gone, or
        the config it was planned with changed). The caller must know the sink does not hold the run's transaction
        (else the run is complete and must be committed instead), and should have fenced it
        (:mod:`dynamic_kafka.sink.fence`) so that no late writer of it lands anything afterwards.

        Args:
            run_seq: the planned run to abandon (must be the head, planned).
            reason: why; recorded in the run's summary in the state's history.
            expected_version: the table version read; None reads the latest.
            landed: per partition, one past the highest offset of the records the run did land (its dead
                letters, committed before the crash). The backfill frontier is raised over them in this same
                commit, so the next run, re-reading those offsets, skips every record already landed (checked
                against the sink and dead-letter table), as after a backfill.

        Returns:
            The new table version.

        Raises:
            StateError: the head is not run ``run_seq`` planned.
            RunInProgressError: the table changed meanwhile; nothing was written.
        """
        dt = self._table.open(expected_version)
        head = self._table.read_current(dt, predicate="kind = 'head'")[0] if dt is not None else None
        if head is None or head.status != "planned" or head.run_seq != run_seq:
            found = "no run" if head is None else f"run {head.run_seq} {head.status}"
            raise StateError(
                f"cannot abandon run {run_seq} of pipeline {self.pipeline_id!r}: the state table at {self.path} has "
                f"{found}, not run {run_seq} planned.",
                hint="Only the planned head run can be abandoned; `dynamic-kafka status` shows it.",
            )
        assert dt is not None
        plan = head.plan
        summary = RunSummary.of_plan(plan, "abandoned", reason=reason)
        now = self._clock()
        rows = [
            _rows.run_row("head", plan, "abandoned", committed_at=now, summary=summary),
            _rows.run_row("run", plan, "abandoned", committed_at=now, summary=summary),
        ]
        predicate = f"kind = 'head' OR (kind = 'run' AND run_seq = {plan.run_seq})"
        if landed:
            _, _, recorded, floors, sequence, lease = self._table.read_rows(dt, "kind = 'backfill'")
            ids = {s.key: s.topic_id for s in plan.splits}
            rows += self._backfill_rows(_raised_frontier(recorded, landed, ids), floors, sequence, lease)
            predicate += " OR kind = 'backfill'"
        version = self._table.overwrite(dt, rows, predicate, plan, "abandon_run")
        logger.warning("pipeline %s: run %d abandoned (offsets not committed): %s", self.pipeline_id, run_seq, reason)
        return version

    def record_operation(
        self,
        summary: RunSummary,
        *,
        expected_version: int,
        offsets: Mapping[TopicPartition, int] | None = None,
        frontier: Mapping[TopicPartition, int] | None = None,
        owner: str | None = None,
    ) -> int:
        """Record an operation made between runs (an offsets reset, a dead-letter replay) as the next run of the
        history, in ONE commit against ``expected_version``: the head becomes ``summary``'s run, committed and
        empty (it read nothing), with a history row, so the history tells who did what, when and why.

        Args:
            summary: the operation's summary; its ``run_seq`` must be the state's next run_seq.
            expected_version: the table version the operation was decided from.
            offsets: per partition, the new committed next offset (a reset); the partition keeps its status
                (a removed partition keeps being removed, with the new kept offset), its leader epoch is
                forgotten (it was the old position's), and it records this run as the one that moved it.
            frontier: per partition, the backfill frontier to raise (only ever raised), so the next run, reading
                offsets again, skips every record the sink or dead-letter table already holds below it.
            owner: the process holding the backfill lease (a replay holds it while it writes); None holds none.

        Returns:
            The new table version.

        Raises:
            RunInProgressError: the table changed since ``expected_version``, a run is planned with a fresh lease,
                or a backfill (another process) holds the lease; nothing was written.
            StateError: a run is planned (crashed: recover or abandon it first), an offset names a partition the
                state does not have, or ``summary`` is not the next run.
        """
        dt = self._table.open(expected_version)
        if dt is None:
            raise StateError(
                f"pipeline {self.pipeline_id!r} has no state at {self.path}: it never ran, so it has no committed "
                "offsets or run history to change.",
                hint="Run the pipeline first (its first run starts at its starting_offsets).",
            )
        head, partitions, recorded, floors, sequence, lease = self._table.read_rows(dt, _LOADED)
        run_seq = (head.run_seq if head is not None else 0) + 1
        if head is not None and head.status == "planned":
            raise self.planned_error(head)
        if lease is not None and lease.owner != owner:
            self._refuse_live_backfill(lease, run_seq)
        if summary.run_seq != run_seq:
            raise StateError(
                f"operation recorded as run {summary.run_seq} but the next run of pipeline {self.pipeline_id!r} in "
                f"the state table at {self.path} is {run_seq}.",
                hint="Decide the operation from the StateSnapshot of the version you pass as expected_version.",
            )
        unknown = sorted(str(k) for k in (offsets or {}) if k not in partitions)
        if unknown:
            raise StateError(
                f"cannot move the offsets of {', '.join(unknown)}: the state of pipeline {self.pipeline_id!r} at "
                f"{self.path} has no committed offset there."
            )
        now = self._clock()
        plan = Plan(pipeline_id=self.pipeline_id, run_seq=run_seq, splits=(), planned_at=now)
        rows = [
            _rows.run_row("head", plan, "committed", committed_at=now, summary=summary),
            _rows.run_row("run", plan, "committed", committed_at=now, summary=summary),
        ]
        predicate = f"kind = 'head' OR (kind = 'run' AND run_seq = {run_seq})"
        if offsets:
            moved = {k: p.moved_to(offsets[k], run_seq) if k in offsets else p for k, p in partitions.items()}
            ordered = sorted(moved.items(), key=lambda kv: str(kv[0]))
            rows += [_rows.partition_row(self.pipeline_id, p) for _, p in ordered]
            predicate += " OR kind = 'partition'"
        if frontier:
            ids = {k: p.topic_id for k, p in partitions.items()}
            rows += self._backfill_rows(_raised_frontier(recorded, frontier, ids), floors, sequence, lease)
            predicate += " OR kind = 'backfill'"
        return self._table.overwrite(dt, rows, predicate, plan, f"record_{summary.status}")

    def planned_error(self, head: RunRecord) -> DynamicKafkaError:
        """Why nothing may change the offsets while ``head`` is planned: it is in flight (fresh lease), or it
        crashed and must be finished or given up first.
        """
        if head.lease_is_fresh(self._clock()):
            holder = RunOwner.parse(head.owner)
            if holder is None or not holder.is_gone():
                return RunInProgressError(
                    self.pipeline_id,
                    head.run_seq,
                    owner=holder.describe() if holder is not None else head.owner,
                    until=head.lease_expires_at.isoformat() if head.lease_expires_at else None,
                )
        return StateError(
            f"run {head.run_seq} of pipeline {self.pipeline_id!r} is planned but not committed (it crashed) in the "
            f"state table at {self.path}: its offsets are about to be committed by its recovery, so they cannot be "
            "changed now.",
            hint="Run the pipeline once (it finishes the crashed run), or give the run up with `dynamic-kafka "
            f"abandon --run-seq {head.run_seq} --reason ...`; then try again.",
        )

    def _stale_frontier(
        self, dt: Any, plan: Plan, partitions: Mapping[TopicPartition, PartitionState]
    ) -> list[dict[str, Any]] | None:
        """The backfill rows after ``plan`` when it resets recreated topics or resumes truncated partitions; None
        when it does neither (the common case: the backfill rows are not touched).

        A reset drops the old incarnation's frontier and records a floor per partition: the highest offset the old
        incarnation may have in the sink (its committed offset, or its frontier if higher); backfills and the
        runs' anti-joins never match below it, since the sink rows carry coordinates, not topic ids. A truncation
        lowers the frontier to where the run resumes: the offsets above are given to new records.
        """
        reset = {(f.cluster_id, f.topic) for f in plan.findings if f.kind == "topic_recreated"}
        truncated = {
            TopicPartition(cluster_id=f.cluster_id, topic=f.topic, partition=f.partition): f.from_offset
            for f in plan.findings
            if f.kind == "truncated"
            and f.cluster_id
            and f.topic
            and f.partition is not None
            and f.from_offset is not None
        }
        if not (reset or truncated):
            return None
        ids = {(s.cluster_id, s.topic): s.topic_id for s in plan.splits}
        _, _, recorded, floors, sequence, _ = self._table.read_rows(dt, "kind = 'backfill'")
        now = self._clock()
        kept = {
            k: f._replace(offset=min(f.offset, truncated.get(k, f.offset)))
            for k, f in recorded.items()
            if not ((k.cluster_id, k.topic) in reset and f.topic_id != ids.get((k.cluster_id, k.topic)))
        }
        new_floors = dict(floors)
        for key, row in partitions.items():
            new_id = ids.get((key.cluster_id, key.topic))
            if (key.cluster_id, key.topic) not in reset or row.topic_id == new_id:
                continue
            old = recorded.get(key, _NO_FRONTIER)
            high = max(
                row.next_offset, old.offset if old.topic_id in (None, row.topic_id) else 0, floors.get(key, (0,))[0]
            )
            new_floors[key] = (high, new_id)
        return _frontier_rows(self.pipeline_id, kept, now) + _floor_rows(self.pipeline_id, new_floors, sequence, now)

    def commit_empty_run(self, plan: Plan, *, summary: RunSummary, expected_version: int | None) -> int:
        """Plan and commit a run with nothing to read in ONE commit (positions, removals and the run recorded).

        Same guard and errors as ``begin_run``; refuses a plan that has ranges to read.
        """
        self._check_pipeline(plan)
        if not plan.is_empty:
            raise StateError(
                f"refusing to commit run {plan.run_seq} of pipeline {self.pipeline_id!r} without reading it: "
                f"{len(plan.read_splits)} of its ranges have records.",
                hint="Use begin_run, read and write the sink, then commit_run.",
            )
        if expected_version is None:
            self._check_next(None, plan)
            return self._table.create(self._commit_rows(plan, {}, summary), plan, "commit_empty_run")
        dt = self._table.open_at(expected_version, plan)
        head, partitions = self._table.read_current(dt)
        self._check_next(head, plan)
        rows = self._commit_rows(plan, partitions, summary)
        return self._table.overwrite(dt, rows, self._commit_predicate(plan), plan, "commit_empty_run")

    def record_backfill(
        self,
        frontier: Mapping[TopicPartition, int],
        *,
        topic_ids: Mapping[TopicPartition, str | None] | None = None,
        streams: Mapping[TopicPartition, str] | None = None,
        attempts: int = 5,
        retry_delay: float = 0.5,
        owner: str | None = None,
        lease_expires_at: datetime | None = None,
    ) -> RecordedBackfill:
        """Raise the backfill frontier of every partition in ``frontier`` (to the highest stop offset a backfill
        covers) in one commit. Call it BEFORE the backfill writes the sink: a run planned after this commit
        dedupes against the sink, and one planned before it has committed (see below), so no incremental run
        can blind-append a record the backfill merges.

        Only ``backfill`` rows change (the maximum of the old and new frontier): the incremental offsets, the
        head run and the history are untouched. The commit uses the exact-version guard; losing the race to
        another commit is retried (a max-merge is safe to redo). A planned run is waited for (it may be in
        flight, and moving the table under it would fail its commit): this is also retried.

        A frontier belongs to one incarnation of its topic (``topic_ids``): a frontier recorded for another topic id
        (the topic was recreated since) is replaced, not raised.

        With a table per stream, each frontier also records the stream whose table the backfill merges its
        partition into (``streams``): a partition no run has committed yet is pinned to that table by it
        (:func:`~dynamic_kafka.plan.tables.pinned_to_tables`), so a later change of the topic's first stream does
        not make its first run land the same records in another table.

        A commit that raises a frontier also takes the next backfill sequence number, which the backfill's MERGEs
        then record as their Delta transaction (``dynamic_kafka.sink.merge``): a sink holding a higher number than
        the state tells a state restored from before the backfill (``dynamic_kafka.protocol.realign``).

        With an ``owner``, the same commit takes the backfill lease (made even when no frontier rises): until it
        expires or is released (:meth:`release_backfill_lease`), no run is planned or taken over, on any host, and
        no other backfill starts. The owner renews it (:meth:`renew_backfill_lease`) while it merges.

        Args:
            frontier: per partition, the stop offset (exclusive) of the backfill's range.
            topic_ids: per partition, the topic id the backfill read (from its broker snapshot).
            streams: per partition, the stream whose table the backfill merges it into (a table per stream).
            attempts: how many times to try before giving up.
            retry_delay: the first wait between attempts, in seconds; doubled after each.
            owner: the backfill's process (``RunOwner.text``), to take the backfill lease; None takes none.
            lease_expires_at: until when ``owner`` holds the lease unless it renews it.

        Returns:
            The table version holding the frontier (None when ``frontier`` is empty and no state exists) and the
            backfill's sequence number (None when every frontier was already as high).

        Raises:
            RunInProgressError: a run was still planned after the last attempt (in flight, or crashed: the next
                incremental run recovers it), or another backfill holds a fresh lease; nothing was written. Retry
                the backfill.
            StateError: the table is unreadable, or every attempt lost the race to another commit.
        """
        delay = retry_delay
        for attempt in range(1, attempts + 1):
            last = attempt == attempts
            dt, (head, _, recorded, floors, sequence, lease) = self._table.read_latest("kind IN ('head', 'backfill')")
            if lease is not None and lease.owner != owner:
                self._refuse_live_backfill(lease, head.run_seq + 1 if head is not None else 1)
            if head is not None and head.status == "planned":
                if last:
                    raise RunInProgressError(self.pipeline_id, head.run_seq)
                logger.info("backfill frontier of %s waits for planned run %d", self.pipeline_id, head.run_seq)
            else:
                merged = _raised_frontier(recorded, frontier, topic_ids or {}, streams)
                raised = merged != recorded
                if not raised and owner is None:
                    return RecordedBackfill(version=None if dt is None else dt.version(), sequence=None)
                taken = sequence + 1 if raised else sequence
                lease = None if owner is None else _rows.BackfillLease(owner, lease_expires_at)
                rows = self._backfill_rows(merged, floors, taken, lease)
                try:
                    if dt is None:
                        version = self._table.create(rows, None, "record_backfill")
                    else:
                        version = self._table.overwrite(dt, rows, "kind = 'backfill'", None, "record_backfill")
                    return RecordedBackfill(version=version, sequence=taken if raised else None)
                except LostRaceError:
                    if last:
                        break
                    logger.info("backfill frontier of %s lost a race (attempt %d), retrying", self.pipeline_id, attempt)
            time.sleep(delay)
            delay *= 2
        raise StateError(
            f"could not record the backfill frontier of pipeline {self.pipeline_id!r} in the state table at "
            f"{self.path}: other commits won the race {attempts} times.",
            hint="Nothing was recorded and the sink was not written; retry the backfill.",
        )

    def take_writer_lease(self, *, owner: str, lease_expires_at: datetime, attempts: int = 5) -> int:
        """Take the pipeline's writer lease (the backfill lease row, with no frontier raised) for ``owner``, for a
        writer that records no frontier (a dead-letter replay, a maintenance); as :meth:`record_backfill` takes it.

        Returns:
            The table version holding the lease.

        Raises:
            RunInProgressError: a run stayed planned through every attempt, or another writer holds a fresh lease;
                nothing was written.
            StateError: the table is unreadable, or every attempt lost the race to another commit.
        """
        recorded = self.record_backfill({}, attempts=attempts, owner=owner, lease_expires_at=lease_expires_at)
        assert recorded.version is not None  # taking the lease always commits
        return recorded.version

    def renew_backfill_lease(self, *, owner: str, lease_expires_at: datetime, expected_version: int) -> int:
        """Renew the backfill lease ``owner`` holds, in one commit against ``expected_version``.

        Returns:
            The new table version.

        Raises:
            StateError: the state at ``expected_version`` names another holder (or none), or the table changed
                since (the caller reads it again to tell which); nothing was written.
        """
        return self._rewrite_backfill_lease(owner, lease_expires_at, expected_version, "renew_backfill_lease")

    def release_backfill_lease(self, *, owner: str, attempts: int = 5) -> int | None:
        """Give up the backfill lease ``owner`` holds (the backfill ended), at the latest version.

        Returns:
            The new table version; None when ``owner`` held no lease (it expired and was taken, or was released).

        Raises:
            StateError: every attempt lost the race to another commit, or the state cannot be written; the lease
                then expires by itself.
        """
        for _ in range(attempts):
            version = self._table.latest_version()
            if version is None:
                return None
            try:
                return self._rewrite_backfill_lease(owner, None, version, "release_backfill_lease")
            except _NotHolderError:
                return None
            except _LostLeaseRaceError:
                continue
        raise StateError(
            f"could not release the backfill lease of pipeline {self.pipeline_id!r} in the state table at "
            f"{self.path}: other commits won the race {attempts} times.",
            hint="It expires by itself; runs are refused until then.",
        )

    def _rewrite_backfill_lease(
        self, owner: str, lease_expires_at: datetime | None, expected_version: int, action: str
    ) -> int:
        """The backfill rows as they are, with the lease renewed (``lease_expires_at``) or released (None)."""
        dt = self._table.open(expected_version)
        _, _, recorded, floors, sequence, lease = (
            self._table.read_rows(dt, "kind = 'backfill'") if dt is not None else EMPTY_ROWS
        )
        if dt is None or lease is None or lease.owner != owner:
            holder = "none" if lease is None else (_owner_text(lease.owner))
            raise _NotHolderError(
                f"cannot {action.replace('_', ' ')} of pipeline {self.pipeline_id!r}: the state table at {self.path} "
                f"names {holder} as the backfill in progress at version {expected_version}, not this process."
            )
        renewed = None if lease_expires_at is None else _rows.BackfillLease(owner, lease_expires_at)
        try:
            return self._table.overwrite(
                dt, self._backfill_rows(recorded, floors, sequence, renewed), "kind = 'backfill'", None, action
            )
        except LostRaceError as e:
            raise _LostLeaseRaceError(
                f"could not {action.replace('_', ' ')} of pipeline {self.pipeline_id!r}: the state table at "
                f"{self.path} changed after version {expected_version}."
            ) from e

    def _backfill_rows(
        self,
        frontiers: Mapping[TopicPartition, _rows.Frontier],
        floors: Mapping[TopicPartition, tuple[int, str | None]],
        sequence: int,
        lease: _rows.BackfillLease | None,
    ) -> list[dict[str, Any]]:
        now = self._clock()
        return _frontier_rows(self.pipeline_id, frontiers, now) + _floor_rows(
            self.pipeline_id, floors, sequence, now, lease
        )

    def _refuse_live_backfill(self, lease: _rows.BackfillLease | None, run_seq: int) -> None:
        """Raise when a backfill holds a fresh lease (its process not provably gone from this machine).

        Raises:
            RunInProgressError: the backfill is alive; nothing was written.
        """
        if lease is None or lease.expires_at is None or lease.expires_at <= self._clock():
            return
        holder = RunOwner.parse(lease.owner)
        if holder is not None and holder.is_gone():
            return
        raise RunInProgressError(
            self.pipeline_id,
            run_seq,
            owner=holder.describe() if holder is not None else lease.owner,
            until=lease.expires_at.isoformat(),
            backfill=True,
            operation=holder.operation if holder is not None else None,
        )

    # ------------------------------------------------------------------------------------------ maintenance

    def maintain(self, *, force: bool = False) -> None:
        """Keep reads bounded; call after each commit (cheap when there is nothing to do). See
        :func:`dynamic_kafka.state.housekeeping.maintain`.

        Raises:
            StateError: the table is unreadable or a maintenance step failed for another reason than a race
                (the state itself is intact; callers may log it as a warning).
        """
        maintain(self._table, maintain_every=self._maintain_every, force=force)

    # ------------------------------------------------------------------------------------------- checks

    def _check_pipeline(self, plan: Plan) -> None:
        if plan.pipeline_id != self.pipeline_id:
            raise StateError(
                f"plan of pipeline {plan.pipeline_id!r} given to the state store of {self.pipeline_id!r} "
                f"at {self.path}."
            )

    def _check_next(self, head: RunRecord | None, plan: Plan) -> None:
        """``plan`` must be the run after the head, and the head must be committed."""
        if head is not None and head.status == "planned":
            if head.run_seq == plan.run_seq:
                raise RunInProgressError(self.pipeline_id, plan.run_seq)
            raise StateError(
                f"run {head.run_seq} of pipeline {self.pipeline_id!r} is planned but not committed in the state "
                f"table at {self.path}; refusing to plan run {plan.run_seq}.",
                hint="Recover the planned run first (finish exactly its plan), then plan the next one.",
            )
        expected = head.run_seq + 1 if head is not None else 1  # an abandoned head's run_seq is used up too
        if plan.run_seq != expected:
            raise StateError(
                f"plan has run_seq {plan.run_seq} but the next run of pipeline {self.pipeline_id!r} in the state "
                f"table at {self.path} is {expected}.",
                hint="Plan from the StateSnapshot of the version you pass as expected_version.",
            )

    def _commit_rows(
        self, plan: Plan, partitions: dict[TopicPartition, PartitionState], summary: RunSummary
    ) -> list[dict[str, Any]]:
        now = self._clock()
        with building_many():  # a new row and its dict per partition
            committed = _rows.apply_plan(plan, partitions, now)
            return [
                *(_rows.partition_row(self.pipeline_id, p) for p in committed),
                _rows.run_row("head", plan, "committed", committed_at=now, summary=summary),
                _rows.run_row("run", plan, "committed", committed_at=now, summary=summary),
            ]

    @staticmethod
    def _commit_predicate(plan: Plan) -> str:
        # Replaces every current row and inserts (or, were it ever re-committed, replaces) this run's history
        # row. The history files hold older run_seqs only, so their statistics exclude them from the rewrite.
        return f"kind = 'partition' OR kind = 'head' OR (kind = 'run' AND run_seq = {plan.run_seq})"


_NO_FRONTIER = _rows.Frontier(0, None)


def _raised_frontier(
    recorded: Mapping[TopicPartition, _rows.Frontier],
    frontier: Mapping[TopicPartition, int],
    ids: Mapping[TopicPartition, str | None],
    streams: Mapping[TopicPartition, str] | None = None,
) -> dict[TopicPartition, _rows.Frontier]:
    """``recorded`` raised to ``frontier``. A frontier belongs to one incarnation of its topic: one recorded for
    another topic id than ``ids`` gives is replaced, not raised. ``streams``: per partition, the stream whose table
    the backfill merges it into (a table per stream), else the one recorded stays.
    """
    merged = dict(recorded)
    for key, offset in frontier.items():
        old = merged.get(key, _NO_FRONTIER)
        same = old.topic_id is None or ids.get(key) is None or old.topic_id == ids.get(key)
        stream = (streams or {}).get(key) or old.stream
        merged[key] = _rows.Frontier(max(offset, old.offset) if same else offset, ids.get(key) or old.topic_id, stream)
    return merged


def _frontier_rows(
    pipeline_id: str, frontiers: Mapping[TopicPartition, _rows.Frontier], now: datetime
) -> list[dict[str, Any]]:
    return [
        _rows.backfill_row(pipeline_id, k, f.offset, now, topic_id=f.topic_id, stream=f.stream)
        for k, f in sorted(frontiers.items(), key=lambda kv: str(kv[0]))
    ]


def _floor_rows(
    pipeline_id: str,
    floors: Mapping[TopicPartition, tuple[int, str | None]],
    sequence: int,
    now: datetime,
    lease: _rows.BackfillLease | None = None,
) -> list[dict[str, Any]]:
    """The backfill rows every rewrite of them keeps besides the frontiers: the floors and the backfill sequence
    (with the backfill lease, when one is held).
    """
    kept = [
        _rows.backfill_row(pipeline_id, k, offset, now, topic_id=tid, floor=True)
        for k, (offset, tid) in sorted(floors.items(), key=lambda kv: str(kv[0]))
    ]
    if not (sequence or lease):
        return kept
    owner, until = lease if lease is not None else (None, None)
    return [*kept, _rows.backfill_sequence_row(pipeline_id, sequence, now, owner=owner, lease_expires_at=until)]


def _owner_text(owner: str) -> str:
    holder = RunOwner.parse(owner)
    return holder.describe() if holder is not None else repr(owner)


class _NotHolderError(StateError):
    """The backfill lease is not held by the caller (expired and taken, released, or never taken)."""


class _LostLeaseRaceError(StateError):
    """A renewal or release of the backfill lease lost the race for its version to another commit."""
