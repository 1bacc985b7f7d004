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
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError
from pydantic import ValidationError

from dynamic_kafka.errors import ConfigError, DynamicKafkaError, ObjectStoreError, RunInProgressError, StateError
from dynamic_kafka.plan.model import Plan, TopicPartition
from dynamic_kafka.plan.snapshots import PartitionState, RunRecord, StateSnapshot
from dynamic_kafka.state import rows as _rows
from dynamic_kafka.storage import StorageConfig, object_store_failure, parse_location

logger = logging.getLogger(__name__)

_COMMIT_ID_KEY = "dynamic_kafka.commit_id"
_CURRENT = "kind IN ('partition', 'head')"
_LOADED = "kind IN ('partition', 'head', 'backfill')"
# History files smaller than this are compacted by maintain(); bigger ones are left alone.
_SMALL_FILE_BYTES = 32 * 1024 * 1024
_MIN_VACUUM_AGE = timedelta(hours=1)
_FOREIGN_ERRORS = (DeltaError, OSError, pa.ArrowException)


class _LostRaceError(Exception):
    """A state write that belongs to no run (a backfill frontier) lost the race for its version."""


class StateStore:
    """The committed state of one pipeline, kept in a Delta table at ``path`` that belongs to it alone.

    Example:
        >>> store = StateStore("data/_state/orders", "orders")
        >>> snapshot = store.load()
        >>> version = store.begin_run(plan, expected_version=snapshot.table_version)
        >>> ...  # read the plan's ranges, write the sink
        >>> version = store.commit_run(plan, summary_json=summary, expected_version=version)
        >>> store.maintain()

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
        self._storage_options = dict(storage_options) if storage_options else None
        self._checkpoint_interval = checkpoint_interval
        self._maintain_every = maintain_every
        self._log_retention = log_retention
        self._deleted_file_retention = deleted_file_retention
        self._clock = clock or (lambda: datetime.now(UTC))

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
        dt = self._open()
        if dt is None:
            return StateSnapshot(pipeline_id=self.pipeline_id)
        head, partitions, backfilled = self._read_rows(dt, _LOADED)
        snapshot = StateSnapshot(
            pipeline_id=self.pipeline_id,
            table_version=dt.version(),
            last_run=head,
            partitions=partitions,
            backfilled=backfilled,
        )
        logger.debug(
            "loaded state of %s at version %d: %d partitions in %.1f ms",
            self.pipeline_id,
            dt.version(),
            len(partitions),
            1000 * (time.perf_counter() - started),
        )
        return snapshot

    def removed_partitions(self) -> list[PartitionState]:
        """The partitions marked removed; their offsets are kept so a re-added topic resumes where it stopped."""
        return [p for p in self.load().partitions.values() if p.status == "removed"]

    def run_history(self, limit: int = 20) -> list[RunRecord]:
        """The last ``limit`` runs, newest first: the planned head run if any, then committed runs."""
        if limit <= 0:
            return []
        dt = self._open()
        if dt is None:
            return []
        head, _ = self._read_current(dt, predicate="kind = 'head'")
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
        except (*_FOREIGN_ERRORS, ValidationError) as e:
            raise self._unreadable(e) from e
        return records

    # ---------------------------------------------------------------------------------------------- writes

    def begin_run(self, plan: Plan, *, expected_version: int | None) -> int:
        """Write ``plan`` ahead as the "planned" head run, in one commit against ``expected_version``.

        Args:
            plan: the run's plan; ``plan.run_seq`` must be the state's next run_seq.
            expected_version: the table version the plan was made from (``StateSnapshot.table_version``);
                None when the state table does not exist yet.

        Returns:
            The new table version (``expected_version + 1``, or 0 for a new table).

        Raises:
            RunInProgressError: something else committed after ``expected_version`` (another run planned
                first); nothing was written. Not retried here.
            StateError: the state is unreadable, or ``plan`` is not the next run of this state.
        """
        self._check_pipeline(plan)
        rows = [_rows.run_row("head", plan, "planned")]
        if expected_version is None:
            self._check_next(None, plan)
            return self._create(rows, plan, "begin_run")
        dt = self._open_at(expected_version, plan)
        head, _ = self._read_current(dt, predicate="kind = 'head'")
        self._check_next(head, plan)
        return self._overwrite(dt, rows, "kind = 'head'", plan, "begin_run")

    def commit_run(self, plan: Plan, *, summary_json: str, expected_version: int) -> int:
        """Commit a planned run: new offsets, removals, head "committed" and a history row, in ONE commit.

        Every split (empty ranges included) sets its partition's ``next_offset`` to the split's stop offset
        and makes it active; every removal marks its partition removed, keeping its offset (the drained stop
        when the same run drained it). Partitions the plan does not mention keep their rows.

        Args:
            plan: exactly the plan written by ``begin_run`` (or read back from ``load().last_run`` to recover).
            summary_json: the run summary, stored in the head and history rows.
            expected_version: the version returned by ``begin_run`` (or loaded when recovering).

        Returns:
            The new table version.

        Raises:
            RunInProgressError: the table changed since ``expected_version``; nothing was written.
            StateError: the head run at ``expected_version`` is not this plan, planned.
        """
        self._check_pipeline(plan)
        dt = self._open_at(expected_version, plan)
        head, partitions = self._read_current(dt)
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
        rows = self._commit_rows(plan, partitions, summary_json)
        return self._overwrite(dt, rows, self._commit_predicate(plan), plan, "commit_run")

    def commit_empty_run(self, plan: Plan, *, summary_json: str, expected_version: int | None) -> int:
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
            return self._create(self._commit_rows(plan, {}, summary_json), plan, "commit_empty_run")
        dt = self._open_at(expected_version, plan)
        head, partitions = self._read_current(dt)
        self._check_next(head, plan)
        rows = self._commit_rows(plan, partitions, summary_json)
        return self._overwrite(dt, rows, self._commit_predicate(plan), plan, "commit_empty_run")

    def record_backfill(
        self, frontier: Mapping[TopicPartition, int], *, attempts: int = 5, retry_delay: float = 0.5
    ) -> int | None:
        """Raise the backfill frontier of every partition in ``frontier`` (to the highest stop offset a backfill
        covers) in one commit. Call it BEFORE the backfill writes the sink: a run planned after this commit
        dedupes against the sink, and one planned before it has committed (see below), so no incremental run
        can blind-append a record the backfill merges.

        Only ``backfill`` rows change (the maximum of the old and new frontier): the incremental offsets, the
        head run and the history are untouched. The commit uses the exact-version guard; losing the race to
        another commit is retried (a max-merge is safe to redo). A planned run is waited for (it may be in
        flight, and moving the table under it would fail its commit): this is also retried.

        Args:
            frontier: per partition, the stop offset (exclusive) of the backfill's range.
            attempts: how many times to try before giving up.
            retry_delay: the first wait between attempts, in seconds; doubled after each.

        Returns:
            The table version holding the frontier; None when ``frontier`` is empty and no state exists.

        Raises:
            RunInProgressError: a run was still planned after the last attempt (in flight, or crashed: the next
                incremental run recovers it); nothing was written. Retry the backfill.
            StateError: the table is unreadable, or every attempt lost the race to another commit.
        """
        delay = retry_delay
        for attempt in range(1, attempts + 1):
            last = attempt == attempts
            dt = self._open()
            head, _, recorded = self._read_rows(dt, "kind IN ('head', 'backfill')") if dt else (None, {}, {})
            if head is not None and head.status == "planned":
                if last:
                    raise RunInProgressError(self.pipeline_id, head.run_seq)
                logger.info("backfill frontier of %s waits for planned run %d", self.pipeline_id, head.run_seq)
            else:
                merged = dict(recorded)
                for key, offset in frontier.items():
                    merged[key] = max(offset, merged.get(key, 0))
                if merged == recorded:
                    return None if dt is None else dt.version()
                now = self._clock()
                rows = [_rows.backfill_row(self.pipeline_id, k, v, now) for k, v in sorted(merged.items(), key=str)]
                try:
                    if dt is None:
                        return self._create(rows, None, "record_backfill")
                    return self._overwrite(dt, rows, "kind = 'backfill'", None, "record_backfill")
                except _LostRaceError:
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

    # ------------------------------------------------------------------------------------------ maintenance

    def maintain(self, *, force: bool = False) -> None:
        """Keep reads bounded; call after each commit (cheap when there is nothing to do).

        Once ``maintain_every`` small history files exist (or with ``force``): compact the history into one
        file, vacuum files removed longer than ``deleted_file_retention`` ago (and orphans of crashed writers),
        write a checkpoint and delete expired log entries. The current rows need no compaction (every commit
        rewrites them as one file) and delta-rs checkpoints every ``checkpoint_interval`` versions by itself.

        Maintenance commits use the same exact-version guard as runs and are skipped while a run is planned,
        so they never invalidate a run in flight; a run that began at the same moment may fail with
        ``RunInProgressError`` (nothing written, retry). A maintenance commit that loses a race is skipped.

        Raises:
            StateError: the table is unreadable or a maintenance step failed for another reason than a race
                (the state itself is intact; callers may log it as a warning).
        """
        dt = self._open()
        if dt is None:
            return
        head, _ = self._read_current(dt, predicate="kind = 'head'")
        if head is not None and head.status == "planned":
            logger.debug("state maintenance of %s skipped: run %d is in flight", self.pipeline_id, head.run_seq)
            return
        try:
            actions = pa.table(dt.get_add_actions(flatten=True))
            is_small = pc.and_(
                pc.equal(actions.column("partition.kind"), "run"),
                pc.less(actions.column("size_bytes"), _SMALL_FILE_BYTES),
            )
            small = pc.sum(is_small.cast(pa.int64())).as_py() or 0
            if small < self._maintain_every and not force:
                return
            started, version = time.perf_counter(), dt.version()
            if small > 1:
                metrics = dt.optimize.compact(
                    partition_filters=[("kind", "=", "run")], commit_properties=self._props("maintain", None)
                )
                # compact() moves dt to the latest version: if a run began meanwhile, stop here rather than
                # commit a vacuum on top of it (which would invalidate that run's expected_version).
                if dt.version() != version + (1 if metrics.get("numFilesRemoved") else 0):
                    logger.info("state maintenance of %s stopped: a run began during it", self.pipeline_id)
                    return
            dt.vacuum(
                retention_hours=math.ceil(max(self._deleted_file_retention, _MIN_VACUUM_AGE).total_seconds() / 3600),
                dry_run=False,
                enforce_retention_duration=False,
                full=True,
                commit_properties=self._props("maintain", None),
            )
            dt.update_incremental()
            dt.create_checkpoint()
            dt.cleanup_metadata()
        except CommitFailedError as e:
            logger.info("state maintenance of %s skipped: the table changed meanwhile (%s)", self.pipeline_id, e)
            return
        except _FOREIGN_ERRORS as e:
            raise StateError(
                f"maintenance of the state table at {self.path} failed: {e}",
                hint="The committed state is intact; the next maintain() retries.",
            ) from e
        logger.info(
            "state maintenance of %s: %d history files compacted, versions %d..%d, checkpoint written, %.0f ms",
            self.pipeline_id,
            small,
            version,
            dt.version(),
            1000 * (time.perf_counter() - started),
        )

    # ------------------------------------------------------------------------------------------- internals

    def _open(self, version: int | None = None) -> DeltaTable | None:
        try:
            dt = DeltaTable(self.path, version=version, storage_options=self._storage_options)
        except TableNotFoundError:
            return None
        except _FOREIGN_ERRORS as e:
            raise self._unreadable(e) from e
        name = dt.metadata().name
        if name != self.pipeline_id:
            raise StateError(
                f"the state table at {self.path} belongs to pipeline {name!r}, not {self.pipeline_id!r}.",
                hint="Give every pipeline its own state path.",
            )
        return dt

    def _open_at(self, expected_version: int, plan: Plan) -> DeltaTable:
        """The table at exactly ``expected_version``; a version that is gone or superseded is a lost race."""
        try:
            dt = self._open(expected_version)
        except StateError as e:
            latest = self._latest_version()
            if latest is not None and latest > expected_version:
                raise RunInProgressError(self.pipeline_id, plan.run_seq) from e
            raise
        if dt is None:
            raise StateError(
                f"no state table at {self.path}, but the caller read version {expected_version} of it.",
                hint="Pass expected_version=None for a pipeline without state; was the table deleted?",
            )
        return dt

    def _latest_version(self) -> int | None:
        try:
            dt = self._open()
        except StateError:
            return None
        return None if dt is None else dt.version()

    def _read_current(
        self, dt: DeltaTable, predicate: str = _CURRENT
    ) -> tuple[RunRecord | None, dict[TopicPartition, PartitionState]]:
        head, partitions, _ = self._read_rows(dt, predicate)
        return head, partitions

    def _read_rows(
        self, dt: DeltaTable, predicate: str
    ) -> tuple[RunRecord | None, dict[TopicPartition, PartitionState], dict[TopicPartition, int]]:
        backfilled: dict[TopicPartition, int] = {}
        try:
            table = dt.to_pyarrow_dataset(file_pruning_predicate=predicate).to_table()
            head: RunRecord | None = None
            found: list[PartitionState] = []
            for row in table.to_pylist():
                if row["pipeline_id"] != self.pipeline_id:
                    raise ValueError(f"row of pipeline {row['pipeline_id']!r}")
                if row["kind"] == "partition":
                    found.append(_rows.partition_from_row(row))
                elif row["kind"] == "backfill":
                    key, offset = _rows.backfill_from_row(row)
                    backfilled[key] = offset
                elif head is not None:
                    raise ValueError("more than one head row")
                else:
                    head = _rows.run_from_row(row)
        except (*_FOREIGN_ERRORS, ValidationError, ValueError, KeyError) as e:
            raise self._unreadable(e) from e
        found.sort(key=lambda p: (p.cluster_id, p.topic, p.partition))
        return head, {p.key: p for p in found}, backfilled

    def _unreadable(self, e: Exception) -> DynamicKafkaError:
        stored = self._object_store_failure(e, "reading the state")
        if stored is not None:
            return stored
        return StateError(
            f"the state table at {self.path} (pipeline {self.pipeline_id!r}) is unreadable or corrupt: {e}",
            hint="Check the path and its permissions; restore the table from a backup or an earlier Delta "
            "version if it was damaged. Nothing was written.",
        )

    def _object_store_failure(self, e: Exception, doing: str) -> ObjectStoreError | None:
        """A missing bucket, refused credentials or an unreachable store, said plainly (endpoint, no secret)."""
        options = self._storage_options or {}
        endpoint = options.get("AWS_ENDPOINT_URL")
        storage = StorageConfig(endpoint=endpoint) if endpoint else None
        try:
            location = parse_location(self.path)
        except ConfigError:
            return None
        return object_store_failure(e, location, storage, f"{doing} of pipeline {self.pipeline_id!r}")

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
        expected = head.run_seq + 1 if head is not None else 1
        if plan.run_seq != expected:
            raise StateError(
                f"plan has run_seq {plan.run_seq} but the next run of pipeline {self.pipeline_id!r} in the state "
                f"table at {self.path} is {expected}.",
                hint="Plan from the StateSnapshot of the version you pass as expected_version.",
            )

    def _commit_rows(
        self, plan: Plan, partitions: dict[TopicPartition, PartitionState], summary_json: str
    ) -> list[dict[str, Any]]:
        now = self._clock()
        committed = _rows.apply_plan(plan, partitions, now)
        return [
            *(_rows.partition_row(self.pipeline_id, p) for p in committed),
            _rows.run_row("head", plan, "committed", committed_at=now, summary_json=summary_json),
            _rows.run_row("run", plan, "committed", committed_at=now, summary_json=summary_json),
        ]

    @staticmethod
    def _commit_predicate(plan: Plan) -> str:
        # Replaces every current row and inserts (or, were it ever re-committed, replaces) this run's history
        # row. The history files hold older run_seqs only, so their statistics exclude them from the rewrite.
        return f"kind = 'partition' OR kind = 'head' OR (kind = 'run' AND run_seq = {plan.run_seq})"

    def _props(self, action: str, plan: Plan | None, commit_id: str | None = None) -> CommitProperties:
        metadata: dict[str, Any] = {"dynamic_kafka.action": action, "dynamic_kafka.pipeline_id": self.pipeline_id}
        if plan is not None:
            metadata["dynamic_kafka.run_seq"] = plan.run_seq
        if commit_id is not None:
            metadata[_COMMIT_ID_KEY] = commit_id
        # 0 retries: the commit lands at exactly read version + 1 or fails. delta-rs never runs its conflict
        # checker, never rebases onto a newer version.
        return CommitProperties(max_commit_retries=0, custom_metadata=metadata)

    def _table_config(self) -> dict[str, str | None]:
        return {
            "delta.checkpointInterval": str(self._checkpoint_interval),
            "delta.logRetentionDuration": f"interval {int(self._log_retention.total_seconds())} seconds",
            "delta.deletedFileRetentionDuration": (
                f"interval {int(self._deleted_file_retention.total_seconds())} seconds"
            ),
            "delta.dataSkippingStatsColumns": _rows.STATS_COLUMNS,
        }

    def _create(self, rows: list[dict[str, Any]], plan: Plan | None, action: str) -> int:
        commit_id = uuid.uuid4().hex
        try:
            write_deltalake(
                self.path,
                _rows.to_table(rows),
                mode="error",
                partition_by=_rows.PARTITION_BY,
                name=self.pipeline_id,
                description=f"dynamic-kafka state of pipeline {self.pipeline_id}",
                configuration=self._table_config(),
                storage_options=self._storage_options,
                commit_properties=self._props(action, plan, commit_id),
            )
        except _FOREIGN_ERRORS as e:
            return self._after_failed_commit(e, 0, commit_id, plan, action)
        logger.info("created the state table of %s at %s (%s)", self.pipeline_id, self.path, _what(action, plan))
        return 0

    def _overwrite(
        self, dt: DeltaTable, rows: list[dict[str, Any]], predicate: str, plan: Plan | None, action: str
    ) -> int:
        target = dt.version() + 1
        commit_id = uuid.uuid4().hex
        try:
            write_deltalake(
                dt,
                _rows.to_table(rows),
                mode="overwrite",
                predicate=predicate,
                commit_properties=self._props(action, plan, commit_id),
            )
        except _FOREIGN_ERRORS as e:
            return self._after_failed_commit(e, target, commit_id, plan, action)
        logger.info("state of %s: %s at version %d", self.pipeline_id, _what(action, plan), target)
        return target

    def _after_failed_commit(self, e: Exception, target: int, commit_id: str, plan: Plan | None, action: str) -> int:
        """Tell a lost race (``RunInProgressError``; ``_LostRaceError`` without a plan) from a failure (``StateError``)
        after a failed write.

        delta-rs can raise after publishing the commit (its post-commit checkpoint or log cleanup failed); the
        commit id in the commit info at ``target`` tells whether the commit there is ours.
        """
        latest = self._latest_version()
        if latest is not None and latest >= target:
            if self._commit_id_at(target) == commit_id:
                logger.warning(
                    "state of %s: %s committed version %d, then failed: %s", self.pipeline_id, action, target, e
                )
                return target
            logger.info("state of %s: %s lost the race for version %d", self.pipeline_id, _what(action, plan), target)
            if plan is None:
                raise _LostRaceError() from e
            raise RunInProgressError(self.pipeline_id, plan.run_seq) from e
        stored = self._object_store_failure(e, f"writing the state ({action.replace('_', ' ')})")
        if stored is not None:
            raise stored from e
        raise StateError(
            f"could not {action.replace('_', ' ')}{'' if plan is None else f' {plan.run_seq}'} of pipeline "
            f"{self.pipeline_id!r} in the state "
            f"table at {self.path}: {e}",
            hint="Nothing was committed. Check that the path is writable and has space, then run again.",
        ) from e

    def _commit_id_at(self, version: int) -> str | None:
        try:
            history = DeltaTable(self.path, version=version, storage_options=self._storage_options).history(1)
        except _FOREIGN_ERRORS:
            return None
        found = history[0].get(_COMMIT_ID_KEY) if history else None
        return found if isinstance(found, str) else None


def _what(action: str, plan: Plan | None) -> str:
    """``action`` and its run for messages: "begin_run run 3", "record_backfill"."""
    return action if plan is None else f"{action} run {plan.run_seq}"
