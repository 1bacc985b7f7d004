"""Incremental runs: append one run's records to the pipeline's Delta sink (and dead-letter table), idempotently.

Invariants:

- Incremental runs append with the Delta transaction ``(app id, version)`` = (pipeline id, ``run_seq``): a write
  whose transaction the table's log already holds is skipped, so re-executing a run after a crash never
  duplicates rows. A blind append is staged (Spark writes the files, delta-rs commits them with the txn:
  :mod:`~dynamic_kafka.sink.staged_append`); a first write, a new column or a dedupe against a backfill uses
  delta-spark's ``txnAppId``/``txnVersion`` write options.
- Where a run's ranges overlap what a backfill covered (``overlaps``, from the state's backfill frontier), the
  run's rows are left-anti-joined with the sink's (and dead-letter table's) rows in those ranges only, inside the
  same job and each table's own write transaction (so Delta also checks that read against a concurrent MERGE).
  Without overlaps the append is blind: no sink read at all.
- The dead-letter table is written first, the sink last (both with the same txn), so "the sink holds txn
  ``run_seq``" means the whole run's data is in (:func:`~dynamic_kafka.sink.tables.committed_txn_version`,
  JVM-free, is the recovery check). A run without undecodable records writes the sink only.
- Undecodable records never vanish: they go to the dead-letter table (``on_decode_error: dead_letter``) or the
  run fails with nothing written to the sink (``fail``).
- Statistics come from ``DataFrame.observe`` in the pass that commits the run, never from a separate job. Under
  ``dead_letter`` a run first makes the one-pass append of ``fail`` (so a run without undecodable records, the
  common case, is one job over Kafka, as a blind append is); only when that job stops at an undecodable record,
  having committed nothing, is Kafka read again, the decoded frame persisted (memory, spilling to disk) and
  written to both tables.

One writer per decode policy (:func:`_writer`): bytes only (nothing can fail), fail on the first undecodable
record, or route undecodable records to the dead-letter table.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from dynamic_kafka.config.models import PipelineConfig
from dynamic_kafka.decoding.prepared import PreparedDecoding, value_column_decoding
from dynamic_kafka.errors import (
    CommitLostError,
    CommitOverwrittenError,
    DynamicKafkaError,
    StateBehindSinkError,
    StateError,
    UndecodableRecordError,
)
from dynamic_kafka.faults import CrashPoint, crash_point
from dynamic_kafka.model.plan import Split
from dynamic_kafka.sink.commits import Commit, new_commit_id, recent_foreign_commits
from dynamic_kafka.sink.completeness import read_count_columns, read_counts
from dynamic_kafka.sink.fence import is_fence
from dynamic_kafka.sink.leftovers import remove_unlanded_attempts
from dynamic_kafka.sink.metrics import WriteResult, metric_columns, observed, write_result
from dynamic_kafka.sink.schema_check import sink_schema
from dynamic_kafka.sink.tables import (
    append_idempotent,
    committed_txn_and_files,
    committed_txn_version,
    dead_letter_rows,
    latest_version,
    run_commit,
    safe_text,
    sink_rows,
    sink_rows_schema,
    spark_failures,
    table_exists,
)
from dynamic_kafka.spark.schema import DECODE_ERROR, MERGE_KEYS
from dynamic_kafka.spark.session import codegen_settings, log_replay_settings, session_settings

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, Observation
    from pyspark.sql.types import StructType

    from dynamic_kafka.config.models import PipelineConfig
    from dynamic_kafka.model.plan import Split
    from dynamic_kafka.storage import TableRef

logger = logging.getLogger(__name__)

_READ = "read"
"""The observed count of the rows read before those a backfill landed were left out (a deduplicating write's)."""
_DECODE_MARKER = "dynamic-kafka-undecodable"
_DECODE_MARKER_RE = re.compile(_DECODE_MARKER + r"\[(?P<json>\{.*?\})\]" + _DECODE_MARKER)


@dataclass(frozen=True)
class RunTarget:
    """Where and as what one run is written."""

    sink_path: TableRef
    dead_letter_path: TableRef
    app_id: str
    run_seq: int
    overlaps: Sequence[Split]
    before_commit: Callable[[], None] | None = None
    partition_by: Sequence[str] = ()
    sink_rows_schema: StructType | None = None
    """The schema of the run's sink rows, known once per write: every frame a writer appends to the sink is
    derived from the same decoded rows (filtered, observed, deduplicated), so it has that schema, and its columns
    are not asked of Spark again."""

    @classmethod
    def of(
        cls,
        pipeline: PipelineConfig,
        run_seq: int,
        overlaps: Sequence[Split],
        before_commit: Callable[[], None] | None,
    ) -> RunTarget:
        """Run ``run_seq`` of ``pipeline`` (a stream's view with a table per stream)."""
        return cls(
            sink_path=pipeline.sink_table,
            dead_letter_path=pipeline.dead_letter_table,
            app_id=pipeline.id,
            run_seq=run_seq,
            overlaps=overlaps,
            before_commit=before_commit,
            partition_by=pipeline.sink.partition_by,
        )

    @property
    def blind(self) -> bool:
        """Whether the run's appends read nothing of the tables (no backfill overlap to dedupe against)."""
        return not self.overlaps


@dataclass(frozen=True)
class Observing:
    """The rows a writer writes, with fresh observations (an observation is filled by one job only): ``written``
    of the rows written, ``read`` of the rows read before records a backfill landed were left out (the same
    observation as ``written`` when nothing is left out).
    """

    rows: DataFrame
    written: Observation
    read: Observation


@dataclass(frozen=True)
class Landed:
    """What a writer landed: the observations of the pass that wrote, and the commits holding the run's txn in the
    sink and (None: not written) the dead-letter table, each ours or another writer's of the same run.
    """

    observed: Observing
    sink: Found
    dead_letters: Found | None = None


@dataclass(frozen=True)
class Found:
    """The commit holding a run's txn in one table, and whether this write made it (its commit id)."""

    commit: Commit
    ours: bool


# The decoded rows with fresh observations of the write's metrics.
Observed = Callable[[], Observing]

_Writer = Callable[["RunTables", Observed, RunTarget], Landed]


def write_incremental(
    df: DataFrame,
    pipeline: PipelineConfig,
    run_seq: int,
    planned_pairs: Sequence[tuple[str, str]],
    overlaps: Sequence[Split] = (),
    prepared: PreparedDecoding | None = None,
    *,
    before_commit: Callable[[], None] | None = None,
    counted_ranges: Sequence[Split] = (),
    event_time: str | None = None,
    planned_records: int | None = None,
    rows_schema: StructType | None = None,
) -> WriteResult:
    """Lands one incremental run's records: decoded rows to the sink, undecodable ones per policy.

    Args:
        df: the reader's output (:func:`dynamic_kafka.spark.reader.read_splits`).
        pipeline: formats, policy and table paths.
        run_seq: the run; becomes the Delta ``txnVersion`` and the ``_run_seq`` column.
        planned_pairs: the ``(cluster_id, topic)`` pairs of the plan; the result has stats for each of them.
        overlaps: the ranges (parts of the read splits) a backfill may already have landed
            (:meth:`~dynamic_kafka.model.snapshots.StateSnapshot.backfill_overlaps`); records the sink or the
            dead-letter table already holds there are skipped. Empty (the common case): a blind append.
        prepared: the run's decoding (:func:`~dynamic_kafka.decoding.prepared.prepare_decoding`); None: the
            pipeline's streams all land in the ``value`` column.
        before_commit: called before each table's commit of the run's rows (the dead-letter table's, the sink's);
            raising stops the write with that commit not made. For a staged append it runs once the rows were read
            and written as files; for delta-spark's own write (a first write, a new column, a dedupe against a
            backfill), just before that write's job, which reads and commits in one step.
        counted_ranges: the ranges whose records the pass counts as it reads them (``read_per_range``), for
            the run's completeness (:mod:`~dynamic_kafka.sink.completeness`).
        event_time: the expression the event-time range measures (the plan's); None: the Kafka timestamp.
        planned_records: how many records ``df`` holds at most (the planned offsets); a small write runs without
            code generation (:func:`~dynamic_kafka.spark.session.codegen_settings`). None: unknown.
        rows_schema: the schema of ``df``'s sink rows when the caller knows it (the run's schema check analysed the
            same decoding over an empty frame of the reader's schema,
            :func:`~dynamic_kafka.sink.schema_check.written_schema`); None: ``df``'s decoded rows are analysed.

    Returns:
        Counts, bytes, event-time range and the Delta versions. ``already_committed`` when the sink already held
        ``run_seq`` for this pipeline (then nothing was read or written).

    Raises:
        StateBehindSinkError: the sink holds a later run of this pipeline than ``run_seq`` (Delta would skip the
            append and lose the run's records); nothing was written.

        UndecodableRecordError: (a DecodeError) ``on_decode_error: fail`` and a record did not decode; the sink
            and the dead-letter table were not written.
        SchemaIncompatibleError: records of a schema version that cannot land with the others, or a column
            whose type changes against the table; nothing was written.
        SparkJobError: the Kafka read or a Delta write failed (retriable: the next run recovers).

    Example:
        >>> df = read_splits(spark, plan.read_splits, clusters, isolation_level="read_committed",
        ...                  min_partitions=None)  # doctest: +SKIP
        >>> write_incremental(df, pipeline, plan.run_seq, [("east", "orders")]).records  # doctest: +SKIP
    """
    from pyspark.sql import Observation
    from pyspark.sql import functions as sf

    target = RunTarget.of(pipeline, run_seq, overlaps, before_commit)
    decoding = prepared or value_column_decoding(pipeline)
    writer = _writer(pipeline, decoding)
    with spark_failures(f"writing run {run_seq} of pipeline {target.app_id!r} to {target.sink_path}", target.sink_path):
        prior, files = committed_txn_and_files(target.sink_path, target.app_id)
        if holds_run(prior, target):
            return _already_committed(target, run_seq)
        # The write's session settings are made around each Spark step that plans or runs a job (persist, append),
        # not around the whole write: through Spark Connect each block costs round trips, and a staged append
        # makes them together with its own.
        tables = _SparkTables({**log_replay_settings(files), **codegen_settings(planned_records)})
        decoded_frame = decoding.decode(df)
        written = rows_schema if rows_schema is not None else sink_rows_schema(decoded_frame.schema, run_seq)
        decoding.check_table(written, sink_schema(target.sink_path), str(target.sink_path))
        target = replace(target, sink_rows_schema=written)
        counts = [column.alias(name) for name, column in decoding.count_columns()]
        reading = read_count_columns(counted_ranges)

        def observed_rows() -> Observing:
            name = f"dynamic_kafka_{target.app_id}_{run_seq}_{uuid.uuid4().hex[:8]}"
            metrics = [*metric_columns(planned_pairs, event_time=event_time), *counts]
            if target.blind:
                # Nothing is left out, so the rows read are the rows written: one observation holds both, and
                # its ``records`` is the count read (each observed node, and each aggregate, costs every row a
                # pass through its accumulator).
                both = Observation(name)
                return Observing(decoded_frame.observe(both, *reading, *metrics), both, both)
            read, written = Observation(f"{name}_read"), Observation(name)
            counted = [sf.count(sf.lit(1)).alias(_READ), *reading]
            kept = skip_backfilled(tables, decoded_frame.observe(read, *counted), target)
            return Observing(kept.observe(written, *metrics), written, read)

        try:
            landed = writer(tables, observed_rows, target)
        except CommitLostError:
            # Another writer committed a txn of this pipeline between our check and our commit.
            latest = committed_txn_version(target.sink_path, target.app_id)
            if latest == run_seq:
                return _already_committed(target, latest)
            raise
        except Exception as e:
            incompatible = decoding.incompatible_error(e)
            if incompatible is not None:
                raise incompatible from e
            raise
        result = _outcome(target, planned_pairs, landed, counted_ranges)
    logger.info(
        "run %d of pipeline %r: %d records (%d bytes) landed in %s at version %s, %d dead letters, %d already there "
        "from a backfill (%d ranges checked)",
        run_seq,
        target.app_id,
        result.sink_records,
        result.bytes,
        target.sink_path,
        result.sink_version,
        result.dead_letters,
        result.deduplicated,
        len(overlaps),
    )
    return result


def holds_run(prior: int | None, target: RunTarget) -> bool:
    """Whether the sink, whose transaction of the pipeline is ``prior``, already holds the run: then nothing is
    written (the run is reported from the log, :func:`_already_committed`).

    Raises:
        StateBehindSinkError: the sink holds a later run than this one; nothing was written.
    """
    if prior == target.run_seq:
        return True
    if prior is not None and prior > target.run_seq:
        # Delta would skip this append as "already done" although this run's records are not in the sink.
        raise StateBehindSinkError(
            target.app_id,
            table=str(target.sink_path),
            sink_txn=prior,
            state_run_seq=target.run_seq - 1,
            state_path="(the state this run was planned from)",
        )
    return False


# --- one writer per decode policy -------------------------------------------------------------------------------


class RunTables(Protocol):
    """What a run's writers do to rows and tables: Spark's (:class:`_SparkTables`: DataFrames, Delta appends), or
    the protocol model's (``tests/model``). The writers below decide which rows go where, in which order, with
    which checks; this only carries each step out. Rows are lazy, as DataFrames: a filter is read when the job
    that uses the rows runs (an append's own filter inside its transaction), or once at :meth:`persist`.
    """

    def decoded(self, rows: Any, undecodable: bool) -> Any:
        """The rows that do not decode (``undecodable``), or those that do."""
        ...

    def failing_on_undecodable(self, rows: Any) -> Any:
        """``rows``, whose job fails on the first one that does not decode, committing nothing (the append raises
        an error :func:`_decode_error_from` reads, or :class:`UndecodableRecordError` itself).
        """
        ...

    def without_present(self, rows: Any, paths: Sequence[TableRef], overlaps: Sequence[Split]) -> Any:
        """``rows`` minus those whose coordinates a table at ``paths`` holds inside ``overlaps``."""
        ...

    def persist(self, rows: Any) -> Any:
        """``rows`` computed once for the jobs that follow (until :meth:`unpersist`)."""
        ...

    def unpersist(self, rows: Any) -> None:
        """Frees what :meth:`persist` kept."""
        ...

    def append(self, rows: Any, table: TableRef, target: RunTarget, *, dead_letters: bool) -> Found:
        """Appends ``rows`` (as sink rows, or as dead letters) with the run's transaction, and finds the commit
        holding the run in the table's log.
        """
        ...


def _writer(pipeline: PipelineConfig, decoding: PreparedDecoding) -> _Writer:
    return writer_for(pipeline, can_fail=decoding.can_fail)


def writer_for(pipeline: PipelineConfig, *, can_fail: bool) -> _Writer:
    """The writer of the pipeline's decode policy (``can_fail``: some value may not decode)."""
    if not can_fail:
        return _write_all
    return _write_or_fail if pipeline.on_decode_error == "fail" else _write_with_dead_letters


def _write_all(tables: RunTables, observed_rows: Observed, target: RunTarget) -> Landed:
    """Bytes keys and values: every record decodes, so one append to the sink."""
    observing = observed_rows()
    return Landed(observing, tables.append(observing.rows, target.sink_path, target, dead_letters=False))


def _write_or_fail(tables: RunTables, observed_rows: Observed, target: RunTarget) -> Landed:
    """``on_decode_error: fail``: the append's own tasks fail on an undecodable record, so nothing is committed."""
    observing = observed_rows()
    checked = tables.failing_on_undecodable(observing.rows)
    try:
        found = tables.append(checked, target.sink_path, target, dead_letters=False)
    except Exception as e:
        decode_error = _decode_error_from(e)
        if decode_error is not None:
            raise decode_error from e
        raise
    return Landed(observing, found)


def _write_with_dead_letters(tables: RunTables, observed_rows: Observed, target: RunTarget) -> Landed:
    """``on_decode_error: dead_letter``: first the one-pass append of ``fail``; if a record does not decode
    (that job committed nothing), the persisted two-table write.

    Skipping the dead-letter table when the run has no dead letters keeps the recovery rule: the sink holding the
    run's txn still means the whole run is in (there was nothing else to land), and a run that crashed before
    that commit is executed again from its plan, as after any crash. A run without a dead-letter txn is what
    ``fail`` and bytes pipelines always leave, so nothing reads that txn as a sign of a run.
    """
    try:
        return _write_or_fail(tables, observed_rows, target)
    except UndecodableRecordError as e:
        logger.info(
            "run %d of pipeline %r: %s does not decode: writing dead letters", target.run_seq, target.app_id, e.where
        )
    return _write_both(tables, observed_rows, target)


def _write_both(tables: RunTables, observed_rows: Observed, target: RunTarget) -> Landed:
    """One read, persisted; dead letters first, then the sink (same txn)."""
    observing = observed_rows()
    cached = tables.persist(observing.rows)
    try:
        bad = tables.decoded(cached, undecodable=True)
        if target.overlaps:
            # As the sink's rows below: deduped again inside the dead-letter append's own transaction, so a
            # backfill MERGE (an orphaned one outlives its lease) landing after the first anti-join is either
            # seen or fails the append on Delta's conflict check, never appended over.
            bad = tables.without_present(bad, [target.dead_letter_path], target.overlaps)
        # Confirmed before the sink is written: the sink holding the run means the whole run is in.
        dead_letters = tables.append(bad, target.dead_letter_path, target, dead_letters=True)
        crash_point(CrashPoint.AFTER_DEAD_LETTER)
        good = tables.decoded(cached, undecodable=False)
        if target.overlaps:
            # The cached rows were deduped before the sink's transaction began: dedupe again inside it, so
            # Delta checks that read against a concurrent backfill MERGE (a MERGE committed in between
            # is skipped here, though then the counts still include its rows).
            good = tables.without_present(good, [target.sink_path], target.overlaps)
        found = tables.append(good, target.sink_path, target, dead_letters=False)
    finally:
        tables.unpersist(cached)
    return Landed(observing, found, dead_letters)


class _SparkTables:
    """:class:`RunTables` by Spark: DataFrames, and Delta appends that find their commit (:func:`_append`), each
    step that plans or runs a job under the write's session ``settings``.
    """

    def __init__(self, settings: Mapping[str, str]) -> None:
        self.settings = settings

    def decoded(self, rows: DataFrame, undecodable: bool) -> DataFrame:
        from pyspark.sql import functions as sf

        error = sf.col(DECODE_ERROR)
        return rows.where(error.isNotNull() if undecodable else error.isNull())

    def failing_on_undecodable(self, rows: DataFrame) -> DataFrame:
        from pyspark.sql import functions as sf

        return rows.where(sf.coalesce(_raise_if_undecodable(), sf.lit(True)))

    def without_present(self, rows: DataFrame, paths: Sequence[TableRef], overlaps: Sequence[Split]) -> DataFrame:
        return _without_present(rows, paths, overlaps)

    def persist(self, rows: DataFrame) -> DataFrame:
        from pyspark import StorageLevel

        # Persisting plans the cached rows' job now (whole-stage code generation decided), so under the settings.
        with session_settings(rows.sparkSession, self.settings):
            return rows.persist(StorageLevel.MEMORY_AND_DISK)

    def unpersist(self, rows: DataFrame) -> None:
        rows.unpersist()

    def append(self, rows: DataFrame, table: TableRef, target: RunTarget, *, dead_letters: bool) -> Found:
        if dead_letters:
            return _append(dead_letter_rows(rows, target.run_seq), table, target, settings=self.settings)
        sinking = sink_rows(rows, target.run_seq, target.sink_rows_schema)
        return _append(sinking, table, target, schema=target.sink_rows_schema, settings=self.settings)


def _append(
    rows: DataFrame,
    table: TableRef,
    target: RunTarget,
    *,
    schema: StructType | None = None,
    settings: Mapping[str, str] | None = None,
) -> Found:
    """Appends ``rows`` with the run's txn and a fresh commit id, then finds the commit holding the run in the
    table's log: a run commits its offsets only on what the log says.

    An append that raised may have committed all the same (a Connect server's answer lost after the commit,
    delta-rs failing after publishing the entry): when the log holds this write's commit, the append stands.

    Raises:
        CommitOverwrittenError: the append reported success, but no version holds the run's txn: another
            process's commit replaced the entry (nothing of the run is visible; the next run writes it again).
    """
    commit_id = new_commit_id()
    try:
        append_idempotent(
            rows,
            table,
            target.app_id,
            target.run_seq,
            commit_id=commit_id,
            blind=target.blind,
            before_commit=target.before_commit,
            partition_by=target.partition_by if table is target.sink_path else (),
            schema=schema,
            settings=settings,
        )
    except CommitLostError:
        raise
    except Exception as e:
        try:
            commit = run_commit(table, target.app_id, target.run_seq)
        except DynamicKafkaError as unreadable:
            logger.warning("cannot tell whether the failed write to %s committed: %s", table, unreadable)
            raise e from None
        if commit is None or commit.commit_id != commit_id:
            raise
        logger.warning(
            "run %d of pipeline %r: the write to %s failed after its commit landed at version %d; the run goes on (%s)",
            target.run_seq,
            target.app_id,
            table,
            commit.version,
            safe_text(e),
        )
        return Found(commit, ours=True)
    commit = run_commit(table, target.app_id, target.run_seq)
    if commit is None:
        raise _overwritten(table, target)
    return Found(commit, ours=commit.commit_id == commit_id)


def _overwritten(table: TableRef, target: RunTarget) -> CommitOverwrittenError:
    """The error for a write whose commit no version holds, naming the commits that may have replaced it."""
    latest = latest_version(table)
    foreign = recent_foreign_commits(table, latest) if latest is not None else []
    suspects = "; ".join(c.describe() for c in foreign) or "no commit the log can name"
    return CommitOverwrittenError(
        f"run {target.run_seq} of pipeline {target.app_id!r}: the write to {table} reported success, but no version "
        f"of its log holds the run (transaction {target.app_id} {target.run_seq}): another process's commit replaced "
        f"the log entry. Recent commits of other writers: {suspects}. Nothing of the run is visible and its offsets "
        "were not committed.",
        table=str(table),
        hint="Run again: the next run writes the run once more. Do not run delta-spark commands that write the "
        "table (OPTIMIZE, DELETE, UPDATE, MERGE, VACUUM, RESTORE) from another Spark application while the "
        "pipeline runs (docs/object-storage.md, 'Who else may write a sink').",
    )


# --- outcome ----------------------------------------------------------------------------------------------------


def _outcome(
    target: RunTarget,
    planned_pairs: Sequence[tuple[str, str]],
    landed: Landed,
    counted_ranges: Sequence[Split],
) -> WriteResult:
    """The result from the write's observed metrics; from the log when the write committed but its metrics were
    lost with the failed call; already committed when another writer's commit holds the run.
    """
    if not landed.sink.ours:
        # Our write was skipped (or replaced by another writer of this run): that writer landed the run.
        return _already_committed(target, target.run_seq)
    dead_letter_version = landed.dead_letters.commit.version if landed.dead_letters is not None else None
    metrics = observed(landed.observed.written)
    if metrics is None:
        return _counted_from_log(target, landed)
    result = write_result(
        metrics,
        planned_pairs,
        sink_version=landed.sink.commit.version,
        dead_letter_version=dead_letter_version,
    )
    read = observed(landed.observed.read)
    if read is None:
        return result
    # The dead-letter commit may be an earlier attempt's of this run (it died before the sink's): it holds the
    # run's dead letters all the same.
    found = [(target.sink_path, landed.sink), (target.dead_letter_path, landed.dead_letters)]
    # A blind write observes once: its rows read are the rows written (no separate count).
    read_total = int(read[_READ]) if _READ in read else result.records
    return result.with_read(
        max(0, read_total - result.records),
        read_counts(read, counted_ranges) if counted_ranges else None,
        tuple(f.commit.files_in(table) for table, f in found if f is not None),
    )


def _counted_from_log(target: RunTarget, landed: Landed) -> WriteResult:
    """What a confirmed write landed, from the record counts of its commits' files (bytes and per-topic counts
    are not in the log).
    """
    sink_records = landed.sink.commit.added_records
    dead_letters = landed.dead_letters.commit.added_records if landed.dead_letters is not None else 0
    logger.warning(
        "run %d of pipeline %r: the write's metrics were lost; %d records and %d dead letters counted from the log",
        target.run_seq,
        target.app_id,
        sink_records,
        dead_letters,
    )
    return WriteResult(
        records=sink_records + dead_letters,
        bytes=0,
        sink_records=sink_records,
        dead_letters=dead_letters,
        sink_version=landed.sink.commit.version,
        dead_letter_version=landed.dead_letters.commit.version if landed.dead_letters is not None else None,
    )


def _already_committed(target: RunTarget, committed: int) -> WriteResult:
    if is_fence(target.sink_path, target.app_id, target.run_seq):
        raise StateError(
            f"run {target.run_seq} of pipeline {target.app_id!r} was abandoned: its transaction in "
            f"{target.sink_path} is a fence, so nothing of it may land; nothing of this write is visible.",
            hint="The state's run history says why it was abandoned; the next run plans its offsets again.",
        )
    logger.info(
        "sink %s already holds txn %d of pipeline %r (run %d): nothing to write",
        target.sink_path,
        committed,
        target.app_id,
        target.run_seq,
    )
    return landed_from_log(target.sink_path, target.dead_letter_path, target.app_id, target.run_seq)


def landed_from_log(sink: TableRef, dead_letters: TableRef, app_id: str, run_seq: int) -> WriteResult:
    """What run ``run_seq`` landed, as the tables' logs say (``already_committed``): the records of its commits to
    the sink and the dead-letter table, and their versions. Bytes and per-topic counts are not in the log; a
    commit without file statistics counts 0.

    For a run found complete in the sink (its recovery, or another writer of the run that committed first): its
    summary reports the records the run landed, not the nothing this process wrote. The run's staged attempts that
    did not land are removed (the attempt that landed it may have died before doing so).
    """
    for table in (sink, dead_letters):
        remove_unlanded_attempts(table, app_id, run_seq)
    sink_commit = run_commit(sink, app_id, run_seq)
    dead_commit = run_commit(dead_letters, app_id, run_seq) if table_exists(dead_letters) else None
    sink_records = sink_commit.added_records if sink_commit is not None else 0
    dead = dead_commit.added_records if dead_commit is not None else 0
    return WriteResult(
        records=sink_records + dead,
        bytes=0,
        sink_records=sink_records,
        dead_letters=dead,
        sink_version=sink_commit.version if sink_commit is not None else None,
        dead_letter_version=dead_commit.version if dead_commit is not None else None,
        already_committed=True,
    )


# --- ranges a backfill already landed ---------------------------------------------------------------------------


def skip_backfilled(tables: RunTables, decoded: Any, target: RunTarget) -> Any:
    """``decoded`` minus what the sink or the dead-letter table already holds in the overlaps; unchanged without
    overlaps.

    The dead-letter table is checked whatever the policy is now: a record landed there (by a backfill, or by an
    abandoned run before ``on_decode_error`` or a format was changed) must neither fail a ``fail`` run nor land in
    the sink as well. A pipeline that never had dead letters has no such table, and nothing more is read.
    """
    if not target.overlaps:
        return decoded
    return tables.without_present(decoded, [target.sink_path, target.dead_letter_path], target.overlaps)


def _without_present(rows: DataFrame, paths: Sequence[TableRef], overlaps: Sequence[Split]) -> DataFrame:
    """``rows`` minus those whose coordinates a table at ``paths`` already holds, looking only inside
    ``overlaps``: the tables are filtered on their coordinate columns, so Delta skips every file outside them.
    """
    from pyspark.sql import functions as sf

    if not overlaps:
        return rows
    in_ranges = _any_of(
        [
            (sf.col("cluster") == sf.lit(s.cluster_id))
            & (sf.col("topic") == sf.lit(s.topic))
            & (sf.col("partition") == sf.lit(s.partition))
            & (sf.col("offset") >= sf.lit(s.start_offset))
            & (sf.col("offset") < sf.lit(s.stop_offset))
            for s in overlaps
        ]
    )
    present: DataFrame | None = None
    for path in paths:
        if not table_exists(path):
            continue
        keys = rows.sparkSession.read.format("delta").load(path.spark_uri).where(in_ranges).select(*MERGE_KEYS)
        present = keys if present is None else present.unionByName(keys)
    return rows if present is None else rows.join(present, on=list(MERGE_KEYS), how="left_anti")


def _any_of(conditions: Sequence[Column]) -> Column:
    """The disjunction of ``conditions`` as a balanced tree (a left-deep chain of thousands overflows the stack)."""
    if len(conditions) == 1:
        return conditions[0]
    middle = len(conditions) // 2
    return _any_of(conditions[:middle]) | _any_of(conditions[middle:])


# --- undecodable records under on_decode_error: fail ------------------------------------------------------------


def _raise_if_undecodable() -> Column:
    """Null for decodable rows; fails the task with the record's coordinates for an undecodable one."""
    from pyspark.sql import functions as sf

    coordinates = sf.to_json(
        sf.struct(
            sf.col("cluster").alias("cluster_id"),
            "topic",
            "partition",
            "offset",
            sf.col(DECODE_ERROR).alias("reason"),
            sf.col("stream").alias("stream_id"),
            sf.date_format("timestamp", "yyyy-MM-dd'T'HH:mm:ss.SSSXXX").alias("timestamp"),
        )
    )
    message = sf.concat(sf.lit(_DECODE_MARKER + "["), coordinates, sf.lit("]" + _DECODE_MARKER))
    return sf.when(sf.col(DECODE_ERROR).isNotNull(), sf.raise_error(message)).cast("boolean")


def _decode_error_from(error: BaseException) -> UndecodableRecordError | None:
    match = _DECODE_MARKER_RE.search(str(error))
    if match is None:
        return None
    fields = json.loads(match.group("json"))
    # to_json leaves null fields out: an archive row has no topic, partition or offset of its own.
    return UndecodableRecordError(
        cluster_id=str(fields["cluster_id"]),
        topic=fields.get("topic"),
        partition=fields.get("partition"),
        offset=fields.get("offset"),
        reason=str(fields["reason"]),
        stream_id=fields.get("stream_id"),
        timestamp=fields.get("timestamp"),
    )
