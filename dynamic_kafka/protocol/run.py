"""One pipeline run, end to end: recover, resolve, plan, read, write, commit.

The protocol (DESIGN.md section 5):

0. a sink (or dead-letter table) holding a later run than the state knows is refused before anything is planned
   (the state was restored or moved; ``dynamic-kafka realign`` repairs it);
1. a run left ``planned`` by a crash is finished first, with exactly its plan: if the sink already holds its data
   (Delta ``txn`` for this pipeline at exactly that run_seq) only its offsets are committed, else it is executed
   again; a fence of it there (:mod:`~dynamic_kafka.sink.fence`) is an interrupted abandon, which is finished. A
   planned run whose owner still holds a fresh lease (another host) is refused, not recovered
   (:mod:`dynamic_kafka.protocol.recovery`);
2. the metadata is resolved once (bounded retries) and every cluster's offsets are snapshotted in one batch;
3. the pure planner makes the plan; an empty plan is committed without starting Spark;
4. for a plan with something to read, the checks every writer makes are made (:mod:`dynamic_kafka.protocol.prepare`:
   Spark, the writer schemas, ``value.schema`` and the sink's schema, the object store); the plan
   is written as ``planned``, with this process as owner and a lease renewed in the background, against the exact
   state version read (a concurrent run loses here);
5. Spark reads exactly the planned ranges and appends them to the sink idempotently (txnAppId/txnVersion),
   skipping records a backfill already landed below the state's backfill frontier;
6. the offsets and the run's ``committed`` status change in one Delta commit; the consumer-group commit that may
   follow is monitoring only.

Example:
    >>> from dynamic_kafka.config.loader import load_project_config
    >>> context = PipelineContext(load_project_config("dynamic_kafka.yaml"), "orders")  # doctest: +SKIP
    >>> runner = PipelineRunner(context)  # doctest: +SKIP
    >>> runner.run().records  # doctest: +SKIP
    1200

The steps above are one protocol whose order is the invariant, so they are read in one class. What is not the
protocol's order lives beside it: the recovery of step 1 (:mod:`dynamic_kafka.protocol.recovery`), giving a run up
(:mod:`dynamic_kafka.protocol.abandon`), the checks before a write (:mod:`dynamic_kafka.protocol.prepare`, shared
with backfills), the deadline that cancels Spark jobs (:mod:`dynamic_kafka.spark.deadline`) and the consumer-group
fan-out (:mod:`dynamic_kafka.kafka.group_commit`).
"""

from __future__ import annotations

import logging
import time
from contextlib import ExitStack
from typing import TYPE_CHECKING

from dynamic_kafka import clock as wall_clock
from dynamic_kafka.errors import DynamicKafkaError, KafkaClientError, SparkJobError, TopicRecreatedError
from dynamic_kafka.faults import CrashPoint, arm_timer, crash_point
from dynamic_kafka.kafka.group_commit import commit_consumer_group
from dynamic_kafka.model.summary import RunSummary
from dynamic_kafka.plan.planner import bootstrap_due, config_pins, first_run_pipeline, plan_run
from dynamic_kafka.progress import Tracker, tracking
from dynamic_kafka.protocol.abandon import give_up
from dynamic_kafka.protocol.guard import WriterGuard
from dynamic_kafka.protocol.prepare import PreparedWrite, prepare_write
from dynamic_kafka.protocol.realign import check_not_behind, check_tables_not_behind
from dynamic_kafka.protocol.recovery import recover
from dynamic_kafka.sink.completeness import counted, measure
from dynamic_kafka.sink.per_stream import run_streams, run_tables
from dynamic_kafka.state.owner import RunOwner
from dynamic_kafka.state.table import FOREIGN_ERRORS

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pyspark.sql import DataFrame

    from dynamic_kafka.config.models import PipelineConfig
    from dynamic_kafka.metadata.snapshot import MetadataSnapshot
    from dynamic_kafka.model.plan import Plan, Split
    from dynamic_kafka.model.snapshots import BrokerSnapshot, StateSnapshot
    from dynamic_kafka.model.summary import Completeness
    from dynamic_kafka.protocol.context import PipelineContext
    from dynamic_kafka.sink.metrics import WriteResult
    from dynamic_kafka.sink.per_stream import SinkTable

logger = logging.getLogger(__name__)

__all__ = ["PipelineRunner"]


class PipelineRunner:
    """The run protocol over one pipeline's collaborators: plans and runs. Cheap to build: nothing is contacted
    until a method is called. Users and the integrations hold :class:`dynamic_kafka.pipeline.Pipeline`, which
    builds one; protocol-level code and tests use it directly.

    Args:
        context: the pipeline's collaborators (config, metadata service, state store, Spark session factory).
        hard_deadline: end the process (exit code 124) when a run past ``max_run_seconds`` does not stop within
            a minute of its Spark job's cancellation (for a process that runs one run: the CLI).

    Attributes:
        guard: the writer guard of this runner's runs (its owner and clock also take an abandon's lease).
    """

    def __init__(self, context: PipelineContext, *, hard_deadline: bool = False) -> None:
        self.context = context
        self.pipeline: PipelineConfig = context.pipeline
        self.store = context.store
        self.owner = RunOwner.current()
        self.guard = WriterGuard(self.store, self.pipeline, "run", owner=self.owner, hard_exit=hard_deadline)
        self._progress = Tracker("run", self.pipeline.id)  # each run() reports through its own

    def plan(self, state: StateSnapshot | None = None) -> tuple[Plan, BrokerSnapshot, MetadataSnapshot]:
        """The plan the next run would execute. Reads metadata, state and offsets; writes nothing."""
        self.pipeline.refuse_uncreatable_tables()
        state = state or self.store.load()
        metadata = self.context.resolve()
        pipeline = first_run_pipeline(self.pipeline, state)
        brokers = self.context.broker_snapshot(metadata, state, pipeline=pipeline)
        plan = plan_run(
            pipeline=pipeline,
            metadata=metadata,
            state=state,
            brokers=brokers,
            run_seq=state.next_run_seq,
            now=wall_clock.utc_now(),
        )
        return plan, brokers, metadata

    def run(self) -> RunSummary:
        """Executes one incremental run (finishing a crashed one first) and returns its summary.

        A run holds a lock file for its whole duration (the OS releases it even on ``kill -9``), in the machine's
        run-lock folder (``$DYNAMIC_KAFKA_RUN_LOCK_DIR``, else ``<cache>/run-locks``). So a run started meanwhile
        on the same machine stops at once instead of taking the first one's planned run for a crashed one and
        executing it again. Runs on other hosts are stopped by the planned run's owner and lease, and lose at the
        state's exact-version commit (on S3, delta-rs's conditional put of the next log entry). The whole run is
        bounded by ``max_run_seconds``.

        Raises:
            RunInProgressError: another run of this pipeline holds the lock, the lease, or planned first; nothing
                written.
            StateBehindSinkError: the sink holds a later run than the state (restored or moved); nothing written.
            SchemaMismatchError: ``value.schema`` is invalid or the sink's schema does not take the rows.
            RunTimeoutError: the run exceeded ``max_run_seconds`` (retriable; the next run recovers).
            DynamicKafkaError: any other failure; nothing is half written, and the next run recovers.
        """
        with (
            self.guard.entered(),
            self.context.shared_spark_session(),
            tracking("run", self.pipeline.id) as self._progress,
        ):
            return self._run()

    def _run(self) -> RunSummary:
        started = time.monotonic()
        self._progress.stage("planning")
        state = self.store.load()
        # Before anything is planned: a sink holding a run the state does not know means a restored or moved
        # state; running on would reuse run_seqs whose writes Delta silently skips.
        check_not_behind(self.pipeline, state, self.store.path)
        recovered: int | None = None
        if state.last_run is not None and state.last_run.status == "planned":
            recovered = recover(
                self.context,
                self.guard,
                state,
                owner=self.owner,
                progress=self._progress,
                execute=lambda prepared, pending: self._execute(
                    prepared,
                    lag=0,
                    recovered=prepared.plan.run_seq,
                    overlaps=state.backfill_overlaps(prepared.plan.read_splits),
                    pending=pending,
                ),
            )
            state = self.store.load()
        plan, brokers, metadata = self.plan(state)
        # A table per stream: a table the state never knew (first landed after the backup it was restored from)
        # may hold this very run_seq.
        check_tables_not_behind(self.pipeline, state, run_streams(plan.read_splits), self.store.path)
        planned = time.monotonic()
        lag = _lag_after(plan, brokers)
        self.guard.deadline.check()
        plan = self._with_archive(plan, state)  # a bootstrap run lands its archive whether Kafka has records or not
        if plan.is_empty:
            summary = RunSummary.of_plan(
                plan, "empty", lag_after=lag, recovered_run_seq=recovered, plan_seconds=planned - started
            )
            self.store.commit_empty_run(plan, summary=summary, expected_version=state.table_version)
            self._maintain()
            return summary.timed(total_seconds=time.monotonic() - started)
        # Before the plan is written: a Spark Connect server or a registry that is down, a sink that does not take
        # the rows, fail the run here with nothing written at all. The plan records the decoding's schema inputs.
        self._progress.stage("checking Spark and the sink", planned_offsets=plan.planned_records)
        prepared = prepare_write(self.context, plan, self.guard.deadline, metadata=metadata)
        plan = prepared.plan
        version = self.store.begin_run(
            plan,
            expected_version=state.table_version,
            owner=self.owner.text(),
            lease_expires_at=self.guard.lease_end(),
        )
        crash_point(CrashPoint.AFTER_PLAN)
        self.guard.keep_lease(version, plan)
        summary = self._execute(
            prepared,
            lag=lag,
            recovered=recovered,
            overlaps=state.backfill_overlaps(plan.read_splits),
        )
        return summary.timed(plan_seconds=planned - started, total_seconds=time.monotonic() - started)

    def _with_archive(self, plan: Plan, state: StateSnapshot) -> Plan:
        """``plan`` with the part of the bootstrap archive it lands, checked and pinned (before the plan is
        written): the first run's part, or the next part of an archive landed over several runs; else ``plan``.
        """
        from dynamic_kafka.spark.bootstrap_archive import (
            abandoned_archive_runs,
            counted,
            next_archive_part,
            plan_archive,
        )

        abandoned = abandoned_archive_runs(state)
        if bootstrap_due(self.pipeline, state):
            read = plan_archive(self.context.spark(), self.pipeline, abandoned)
        else:
            bootstrap = self.pipeline.bootstrap
            part = next_archive_part(state, bootstrap.max_files_per_run if bootstrap else None)
            if part is None:
                return plan
            part = part.with_abandoned_runs(abandoned)
            read = counted(self.context.spark(), part, self.pipeline.dead_letter_table)
        # The archive's verdicts split its rows between the sink and the dead letters like Kafka's: its stream's
        # format is pinned even when Kafka gives that stream no range.
        pins = {**plan.config_pins, **config_pins(self.pipeline, [read.stream])}
        return plan.with_bootstrap(read, pins)

    def _execute(
        self,
        prepared: PreparedWrite,
        *,
        lag: int,
        recovered: int | None,
        overlaps: Sequence[Split],
        pending: Sequence[Split] | None = None,
    ) -> RunSummary:
        """Reads and writes ``prepared``'s plan, then commits it. ``pending``: read only these ranges (a recovery:
        those of the tables lacking the run); the other tables are found holding it in their logs.
        """
        from dynamic_kafka.sink.incremental import write_incremental
        from dynamic_kafka.sink.per_stream import for_each_table, stream_pairs
        from dynamic_kafka.spark.progress import watching_spark
        from dynamic_kafka.spark.reader import read_splits

        plan, clusters = prepared.plan, prepared.connections
        spark_started = time.monotonic()
        watching = ExitStack()
        try:
            spark = self.context.spark()
            self.guard.deadline.attach(spark)
            arm_timer(CrashPoint.DURING_WRITE)
            frame = read_splits(
                spark,
                plan.read_splits if pending is None else pending,
                clusters,
                isolation_level=self.pipeline.isolation_level,
                min_partitions=self.pipeline.min_partitions,
            )
            if plan.bootstrap is not None:
                from dynamic_kafka.spark.bootstrap_archive import archive_rows, check_unchanged, kafka_side

                check_unchanged(spark, plan.bootstrap)  # a file rewritten since the plan: not the counted rows
                frame = kafka_side(frame, plan.bootstrap).unionByName(
                    archive_rows(spark, plan.bootstrap, self.pipeline.dead_letter_table)
                )
            crash_point(CrashPoint.BEFORE_READ)
            self.guard.before_write()  # a run that lost its lease (taken over, or not renewed in time) must not write
            ranges = counted(plan.read_splits)

            def write(rows: DataFrame, table: SinkTable, own: Sequence[Split]) -> WriteResult:
                # A table already holding the run (a recovery, or another writer of it) is not written again: its
                # part is reported from its log.
                keys = {s.key for s in own}
                return write_incremental(
                    rows,
                    table.pipeline,
                    plan.run_seq,
                    stream_pairs(own),
                    [o for o in overlaps if o.key in keys],
                    prepared.decoding,
                    before_commit=lambda: prepared.check_topics_unchanged(self.context),
                    counted_ranges=[s for s in ranges if s.key in keys],
                    event_time=plan.event_time,
                    # An archive's rows are not counted in the plan's offsets: such a write's size is unknown.
                    planned_records=None if plan.bootstrap is not None else sum(s.record_count for s in own),
                    # An archive's rows join Kafka's by a union, which the check did not analyse.
                    rows_schema=prepared.rows_schema if plan.bootstrap is None else None,
                )

            self._progress.stage("reading and writing", planned_offsets=plan.planned_records)
            watching.enter_context(watching_spark(spark, self._progress))
            result, stream_tables = for_each_table(frame, self.pipeline, plan.read_splits, write)
        except (TopicRecreatedError, SparkJobError) as e:
            # A topic recreated under the run: what it read may be the new topic's records at the old one's
            # offsets, and nothing of it was committed. Under reset the run is given up now, as its recovery would.
            # A read that failed may have failed on that recreation (a planned range past the new topic's end),
            # before the check after the read could tell: the same check tells now.
            recreated = e if isinstance(e, TopicRecreatedError) else _recreation_behind(prepared, self.context)
            if recreated is None:
                self.guard.stop_lease(quietly=True)
                raise
            version = self.guard.stop_lease()
            if recreated.retriable:
                give_up(self.pipeline, self.store, plan, str(recreated), version)
            if recreated is e:
                raise
            raise recreated from e
        except BaseException:
            self.guard.stop_lease(quietly=True)
            raise
        finally:
            watching.close()
        version = self.guard.stop_lease()
        crash_point(CrashPoint.RECOVERY_AFTER_SINK if recovered == plan.run_seq else CrashPoint.AFTER_SINK)
        committing = time.monotonic()
        self._progress.stage("committing")
        summary = RunSummary.committed(
            plan,
            result,
            lag_after=lag,
            recovered_run_seq=recovered,
            schemas=prepared.decoding.uses(result.schema_counts),
            completeness=self._completeness(plan, result, ranges, overlaps),
            stream_tables=stream_tables,
            spark_seconds=committing - spark_started,
        )
        self.store.commit_run(plan, summary=summary, expected_version=version)
        commits = commit_consumer_group(self.pipeline.consumer_group, plan, clusters)
        self._maintain()
        return summary.timed(commit_seconds=time.monotonic() - committing, group_commits=commits)

    def _completeness(
        self, plan: Plan, result: WriteResult, ranges: Sequence[Split], overlaps: Sequence[Split]
    ) -> Completeness | None:
        """The run's records accounted for per range (None when the write's pass did not count them: a run found
        landed by another attempt, or too many ranges). The run is landed: a failure to count is a warning.
        """
        if result.read_per_range is None:
            return None
        tables = [t for table in run_tables(self.pipeline, ranges) for t in (table.sink, table.dead_letters)]
        try:
            completeness = measure(tables, plan.run_seq, ranges, result.read_per_range, overlaps, result.landed_files)
        # A report on a landed run must not keep it from its commit: not a delta-rs or pyarrow error (a table
        # without the coordinate columns, a read that failed), nor one of ours.
        except (DynamicKafkaError, *FOREIGN_ERRORS, ValueError, LookupError) as e:
            logger.warning("pipeline %s: run %d's completeness not measured: %s", self.pipeline.id, plan.run_seq, e)
            return None
        for mismatch in completeness.mismatches:
            logger.error(
                "pipeline %s: run %d does not account for its records: %s", self.pipeline.id, plan.run_seq, mismatch
            )
        return completeness

    def _maintain(self) -> None:
        """Compacts and checkpoints the state now and then. The run is already committed: a failure here (for
        example a concurrent run's commit winning the race) is a warning, and the next run tries again.
        """
        try:
            self.store.maintain()
        except DynamicKafkaError as e:
            logger.warning("pipeline %s: state maintenance skipped: %s", self.pipeline.id, e)


def _lag_after(plan: Plan, brokers: BrokerSnapshot) -> int:
    """Records the broker had, at planning time, beyond what this run reads."""
    lag = 0
    for s in plan.splits:
        cluster = brokers.clusters.get(s.cluster_id)
        topic = cluster.topics.get(s.topic) if cluster else None
        offsets = topic.partitions.get(s.partition) if topic else None
        if offsets is not None:
            lag += max(0, offsets.latest - s.stop_offset)
    return lag


def _recreation_behind(prepared: PreparedWrite, context: PipelineContext) -> TopicRecreatedError | None:
    """The recreation of a topic of the plan since it was planned, if the brokers show one (a failed read's cause);
    None when they show none or cannot be asked (the read's own error stands).
    """
    try:
        prepared.check_topics_unchanged(context)
    except TopicRecreatedError as e:
        return e
    except KafkaClientError:
        return None
    return None
