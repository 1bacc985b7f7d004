"""One pipeline run, end to end: recover, resolve, plan, read, write, commit.

The protocol (DESIGN.md section 5):

0. a sink (or dead-letter table) holding a later run than the state knows is refused before anything is planned
   (the state was restored or moved; ``dynamic-kafka realign`` repairs it);
1. a run left ``planned`` by a crash is finished first, with exactly its plan: if the sink already holds its data
   (Delta ``txn`` for this pipeline at exactly that run_seq) only its offsets are committed, else it is executed
   again; a fence of it there (:mod:`~dynamic_kafka.sink.fence`) is an interrupted abandon, which is finished. A
   planned run whose owner still holds a fresh lease (another host) is refused, not recovered;
2. the metadata is resolved once (bounded retries) and every cluster's offsets are snapshotted in one batch;
3. the pure planner makes the plan; an empty plan is committed without starting Spark;
4. for a plan with something to read, the checks every writer makes are made (:mod:`dynamic_kafka.protocol.prepare`:
   Spark, the writer schemas, ``value_schema`` and the sink's schema, the object store); the plan
   is written as ``planned``, with this process as owner and a lease renewed in the background, against the exact
   state version read (a concurrent run loses here);
5. Spark reads exactly the planned ranges and appends them to the sink idempotently (txnAppId/txnVersion),
   skipping records a backfill already landed below the state's backfill frontier;
6. the offsets and the run's ``committed`` status change in one Delta commit; the consumer-group commit that may
   follow is monitoring only.

Example:
    >>> from dynamic_kafka.config.models import load_project_config
    >>> runner = PipelineRunner(load_project_config("dynamic_kafka.yaml"), "orders")  # doctest: +SKIP
    >>> runner.run().records  # doctest: +SKIP
    1200

Why one module of this size: the steps above are one protocol whose order is the invariant, so they are read in
one class. What is not the protocol's order lives beside it: the checks before a write
(:mod:`dynamic_kafka.protocol.prepare`, shared with backfills), the deadline that cancels Spark jobs
(:mod:`dynamic_kafka.spark.deadline`) and the consumer-group fan-out (:mod:`dynamic_kafka.kafka.group_commit`).
"""

from __future__ import annotations

import logging
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from dynamic_kafka.errors import (
    ClusterUnreachableError,
    ConfigError,
    DataLossError,
    DynamicKafkaError,
    KafkaClientError,
    RunInProgressError,
    SparkJobError,
    StateError,
    TopicRecreatedError,
)
from dynamic_kafka.faults import CrashPoint, arm_timer, crash_point
from dynamic_kafka.kafka.group_commit import commit_consumer_group
from dynamic_kafka.model.plan import LostRange
from dynamic_kafka.model.summary import RunSummary
from dynamic_kafka.plan.planner import (
    FORMAT_PIN_PREFIX,
    bootstrap_due,
    config_pins,
    first_run_pipeline,
    plan_run,
)
from dynamic_kafka.progress import Tracker, tracking
from dynamic_kafka.protocol.context import PipelineContext
from dynamic_kafka.protocol.guard import WriterGuard
from dynamic_kafka.protocol.prepare import PreparedWrite, prepare_write
from dynamic_kafka.protocol.realign import check_not_behind, check_tables_not_behind, run_frontier
from dynamic_kafka.sink import committed_txn_version
from dynamic_kafka.sink.completeness import counted, measure
from dynamic_kafka.sink.fence import fence_run, is_fence
from dynamic_kafka.sink.per_stream import landed, run_streams, run_tables
from dynamic_kafka.sink.staged_append import remove_run_folder
from dynamic_kafka.sink.tables import table_exists
from dynamic_kafka.state.owner import RunOwner
from dynamic_kafka.state.table import FOREIGN_ERRORS

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from pyspark.sql import DataFrame, SparkSession

    from dynamic_kafka.config.models import PipelineConfig, ProjectConfig
    from dynamic_kafka.metadata.service import KafkaMetadataService
    from dynamic_kafka.metadata.snapshot import MetadataSnapshot
    from dynamic_kafka.model.plan import Plan, Split, TopicPartition
    from dynamic_kafka.model.snapshots import BrokerSnapshot, RunRecord, StateSnapshot
    from dynamic_kafka.model.summary import Completeness
    from dynamic_kafka.sink.metrics import WriteResult
    from dynamic_kafka.sink.per_stream import SinkTable

logger = logging.getLogger(__name__)

__all__ = ["PipelineRunner"]

_INTERRUPTED_ABANDON = (
    "abandoned: its transaction is fenced in the sink by an abandon that stopped before recording it (the sink's "
    "history has the reason, commitInfo.dynamicKafkaFence)"
)


class PipelineRunner:
    """Runs and plans one pipeline. Cheap to build: nothing is contacted until a method is called.

    Args:
        project: the project config.
        pipeline_id: which pipeline of the project.
        metadata_service: a service to use instead of the one the config names (programs and tests).
        spark: returns the Spark session; called only when a plan has something to read.
        hard_deadline: end the process (exit code 124) when a run past ``max_run_seconds`` does not stop within
            a minute of its Spark job's cancellation (for a process that runs one run: the CLI).
    """

    def __init__(
        self,
        project: ProjectConfig,
        pipeline_id: str,
        *,
        metadata_service: KafkaMetadataService | None = None,
        spark: Callable[[], SparkSession] | None = None,
        hard_deadline: bool = False,
    ) -> None:
        self.context = PipelineContext(project, pipeline_id, metadata_service=metadata_service, spark=spark)
        self.project = project
        self.pipeline: PipelineConfig = self.context.pipeline
        self.store = self.context.store
        self.owner = RunOwner.current()
        self.hard_deadline = hard_deadline
        # The clock is looked up at each call: the protocol model moves this module's `_now`.
        self._guard = WriterGuard(
            self.store, self.pipeline, "run", owner=self.owner, hard_exit=hard_deadline, clock=lambda: _now()
        )
        self._progress = Tracker("run", pipeline_id)  # each run() reports through its own

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
            now=_now(),
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
            SchemaMismatchError: ``value_schema`` is invalid or the sink's schema does not take the rows.
            RunTimeoutError: the run exceeded ``max_run_seconds`` (retriable; the next run recovers).
            DynamicKafkaError: any other failure; nothing is half written, and the next run recovers.
        """
        with (
            self._guard.entered(),
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
            recovered = self._recover(state)
            state = self.store.load()
        plan, brokers, metadata = self.plan(state)
        # A table per stream: a table the state never knew (first landed after the backup it was restored from)
        # may hold this very run_seq.
        check_tables_not_behind(self.pipeline, state, run_streams(plan.read_splits), self.store.path)
        planned = time.monotonic()
        lag = _lag_after(plan, brokers)
        self._guard.deadline.check()
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
        prepared = prepare_write(self.context, plan, self._guard.deadline, metadata=metadata)
        plan = prepared.plan
        version = self.store.begin_run(
            plan,
            expected_version=state.table_version,
            owner=self.owner.text(),
            lease_expires_at=self._guard.lease_end(),
        )
        crash_point(CrashPoint.AFTER_PLAN)
        self._guard.keep_lease(version, plan)
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
            part = part.model_copy(update={"abandoned_runs": abandoned})
            read = counted(self.context.spark(), part, self.pipeline.dead_letter_table)
        # The archive's verdicts split its rows between the sink and the dead letters like Kafka's: its stream's
        # format is pinned even when Kafka gives that stream no range.
        pins = {**plan.config_pins, **config_pins(self.pipeline, [read.stream])}
        return plan.model_copy(update={"bootstrap": read, "config_pins": pins})

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
            self._guard.deadline.attach(spark)
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
            self._guard.before_write()  # a run that lost its lease (taken over, or not renewed in time) must not write
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
                self._guard.stop_lease(quietly=True)
                raise
            version = self._guard.stop_lease()
            if recreated.retriable:
                self._give_up(plan, str(recreated), version)
            if recreated is e:
                raise
            raise recreated from e
        except BaseException:
            self._guard.stop_lease(quietly=True)
            raise
        finally:
            watching.close()
        version = self._guard.stop_lease()
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
            spark_seconds=committing - spark_started,
        ).model_copy(update={"stream_tables": stream_tables})
        self.store.commit_run(plan, summary=summary, expected_version=version)
        commits = commit_consumer_group(self.pipeline.consumer_group, plan, clusters)
        self._maintain()
        return summary.timed(commit_seconds=time.monotonic() - committing, group_commits=commits)

    def _recover(self, state: StateSnapshot) -> int | None:
        """Finishes the run a crash left planned, with exactly its plan.

        A planned run whose owner still holds a fresh lease is alive (on another host, or in a process using
        another lock folder) and is refused; an expired lease, or an owner provably gone from this host, means a
        crash. The recovering run first takes the lease over (one commit at the exact version read: of two
        recovering processes one wins).

        Before executing the plan again it is checked: the config must be the one it was planned with (checked
        before the lease is taken over, so a refusal writes nothing), and a fresh snapshot of its clusters must
        still hold its ranges under the same topic ids. A range deleted by retention or truncated is decided by
        ``on_data_loss`` and a recreated topic by ``on_topic_recreated``: ``fail`` raises, ``skip`` / ``reset``
        abandons the run (fenced first, see :meth:`_give_up`; its offsets are not committed, the history says why)
        so the next plan applies the policy to the committed offsets.

        Returns:
            The recovered run's run_seq, or None when its plan could no longer be executed and was abandoned by
            policy (the caller then plans afresh).

        Raises:
            RunInProgressError: the planned run's owner holds a fresh lease, or another process took it over first.
            ConfigError: the config's semantic settings differ from those the run was planned with.
            DataLossError: part of a range is gone and ``on_data_loss: fail``.
            TopicRecreatedError: a topic of the plan was recreated and ``on_topic_recreated: fail``.
            ClusterUnreachableError: a cluster of the plan cannot be queried.
        """
        head = state.last_run
        assert head is not None
        assert state.table_version is not None
        plan = head.plan
        owner = _refuse_live_owner(self.pipeline.id, head)
        # The sink's own txn, not the dead-letter table's: the dead letters are written first, so only the sink
        # holding the run means the whole run is in. A fence there means an abandon was interrupted after it.
        # Each table of the run: the run is in once every table holds it, and a fence in any of them is an
        # interrupted abandon.
        txns = self._txns(plan)
        lacking = [table for table, txn in txns if txn != plan.run_seq]
        in_sink = not lacking
        fenced = self._fenced(plan, [table for table, txn in txns if txn == plan.run_seq])
        logger.warning(
            "pipeline %s: run %d was planned but not committed (owner %s); %s",
            self.pipeline.id,
            plan.run_seq,
            owner.describe() if owner is not None else "unknown",
            "it is fenced, finishing its abandon"
            if fenced
            else "its data is in the sink, committing its offsets"
            if in_sink
            else "executing it again" + _for_streams(lacking),
        )
        if not in_sink and not fenced:
            self._check_config(plan)
        version = self.store.lease(
            plan,
            owner=self.owner.text(),
            lease_expires_at=self._guard.lease_end(),
            expected_version=state.table_version,
        )
        crash_point(CrashPoint.RECOVERING)
        if fenced:
            self._give_up(plan, _INTERRUPTED_ABANDON, version)
            return None
        if in_sink:
            found, stream_tables = landed(self.pipeline, plan.read_splits, plan.run_seq)
            summary = RunSummary.of_plan(plan, "committed", recovered_run_seq=plan.run_seq).model_copy(
                update={
                    "records": found.records,
                    "dead_letters": found.dead_letters,
                    "sink_version": found.sink_version,
                    "stream_tables": stream_tables,
                }
            )
            self.store.commit_run(plan, summary=summary, expected_version=version)
            commit_consumer_group(self.pipeline.consumer_group, plan, self.context.connections(plan))
            return plan.run_seq
        # Only the ranges still to be written must be on the brokers: a landed table's ranges may be gone by now.
        pending = [s for table in lacking for s in table.own(plan.read_splits)]
        void = self._stale_plan_reason(plan, pending)
        if void is not None:
            self._give_up(plan, void, version)
            return None
        prepared = prepare_write(self.context, plan, self._guard.deadline, written=True)
        self._guard.keep_lease(version, plan)
        self._progress.stage(f"recovering run {plan.run_seq}", planned_offsets=plan.planned_records)
        self._execute(
            prepared,
            lag=0,
            recovered=plan.run_seq,
            overlaps=state.backfill_overlaps(plan.read_splits),
            pending=pending,
        )
        return plan.run_seq

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

    def _txns(self, plan: Plan) -> list[tuple[SinkTable, int | None]]:
        """Per table of ``plan``'s run, the pipeline's last transaction there.

        The sink's own txn, not the dead-letter table's: the dead letters are written first, so only the sink
        holding the run means the whole run (its part of the run: a stream's table) is in.
        """
        return [
            (table, committed_txn_version(table.sink, self.pipeline.id))
            for table in run_tables(self.pipeline, plan.read_splits)
        ]

    def _fenced(self, plan: Plan, holding: Sequence[SinkTable]) -> bool:
        """Whether a table of the run holds its fence (an abandon of it was interrupted after fencing), looking only
        at the tables ``holding`` its transaction: a fence is one.
        """
        return any(is_fence(table.sink, self.pipeline.id, plan.run_seq) for table in holding)

    def abandon(self, run_seq: int, reason: str) -> int:
        """Give up the planned (crashed) run ``run_seq``: its offsets are not committed, the history records why.

        For a run no policy settles (its cluster is gone for good, its config was changed on purpose). The next run
        plans those offsets afresh under the current config. The run is fenced first (see :meth:`_give_up`): no
        late writer of it lands anything afterwards, and dead letters it already landed are not landed again.

        Args:
            run_seq: the planned head run to abandon.
            reason: why; recorded in the run history for whoever looks next.

        Returns:
            The new state table version.

        Raises:
            StateError: no reason, the sink already holds the run (it is complete: a run commits it), or the run
                is not the planned head.
            RunInProgressError: the run's owner is alive (its lease is fresh), or another process took the run
                over meanwhile.
        """
        reason = reason.strip()
        if not reason:
            raise StateError("abandon needs a --reason: it is recorded in the run history for whoever looks next.")
        state = self.store.load()
        head = state.last_run
        if head is None or head.status != "planned" or head.run_seq != run_seq:
            # Not the planned head: the store refuses it, naming what the state holds.
            return self.store.abandon_run(run_seq, reason=reason, expected_version=state.table_version)
        # A fence of this run there is an abandon that was interrupted: it may be finished. The run is complete once
        # every table holds it; a part of it landed (a stream's table) is kept by the abandon (_give_up).
        txns = self._txns(head.plan)
        fenced = self._fenced(head.plan, [table for table, txn in txns if txn == run_seq])
        if txns and all(txn is not None and txn >= run_seq for _, txn in txns) and not fenced:
            raise self._complete_error(run_seq)
        _refuse_live_owner(self.pipeline.id, head)
        assert state.table_version is not None  # a state with a planned head has a table
        # Taking the run over moves the state's version: an owner whose lease expired can no longer commit it.
        version = self.store.lease(
            head.plan,
            owner=self.owner.text(),
            lease_expires_at=self._guard.lease_end(),
            expected_version=state.table_version,
        )
        return self._give_up(head.plan, reason, version)

    def _give_up(self, plan: Plan, reason: str, version: int) -> int:
        """Abandons the planned run ``plan``, which this process holds (state ``version``), and returns the new
        state version.

        First its transaction is fenced (:mod:`dynamic_kafka.sink.fence`): in the sink, then in the dead-letter
        table, so no late writer of the run lands anything once the abandon is recorded. The sink goes first: a
        crash between the two leaves a fenced sink, which the next recovery reads as this abandon and finishes,
        never a fenced dead-letter table under a sink a recovery would still write. Then the dead letters the run
        landed before it crashed (its dead-letter transaction, final behind the fence) raise the backfill frontier
        in the abandon's own commit, so the next run, re-reading those offsets, does not land them again.

        Raises:
            StateError: the sink holds the run's data (a late writer of it landed first): the run is complete.
        """
        from dynamic_kafka.decoding.formats import can_fail

        tables = run_tables(self.pipeline, plan.read_splits)
        # A dead-letter table that is not there yet is created by its fence only if the run could have written
        # one: under the config's settings, or under the other settings it was planned with.
        may_have = (self.pipeline.on_decode_error == "dead_letter" and can_fail(self.pipeline)) or (
            bool(plan.config_pins) and plan.config_pins != config_pins(self.pipeline)
        )
        landed: dict[TopicPartition, int] = {}
        complete = 0
        for table in tables:
            sink, dead_letters = table.sink, table.dead_letters
            if fence_run(sink, "sink", self.pipeline.id, plan.run_seq, reason) == "landed":
                # A stream's table holding the run (a table per stream): its part stays, and its rows and dead
                # letters raise the frontier like a backfill's, so the next run re-reading them lands none again.
                complete += 1
                _raise_to(landed, run_frontier(sink, plan.run_seq))
                if table_exists(dead_letters):
                    _raise_to(landed, run_frontier(dead_letters, plan.run_seq))
                continue
            remove_run_folder(sink, self.pipeline.id, plan.run_seq)  # a killed staged write's files
            crash_point(CrashPoint.AFTER_FENCE)
            if may_have or table_exists(dead_letters):
                if fence_run(dead_letters, "dead_letter", self.pipeline.id, plan.run_seq, reason) == "landed":
                    _raise_to(landed, run_frontier(dead_letters, plan.run_seq))
                else:
                    remove_run_folder(dead_letters, self.pipeline.id, plan.run_seq)
        if tables and complete == len(tables):
            raise self._complete_error(plan.run_seq)
        return self.store.abandon_run(plan.run_seq, reason=reason, expected_version=version, landed=landed)

    def _complete_error(self, run_seq: int) -> StateError:
        return StateError(
            f"run {run_seq} of pipeline {self.pipeline.id!r} is complete in the sink (it holds its "
            "transaction); abandoning it would leave its records landed without their offsets.",
            hint="Run the pipeline: the recovery commits the run's offsets.",
        )

    def _check_config(self, plan: Plan) -> None:
        """Refuses to execute a planned run again under other semantic settings than it was planned with: a
        setting pinned in the plan whose value now hashes differently, or a pinned ``value_schema_file`` whose
        contents changed. Settings a plan did not pin (written by an older version) are not checked.
        """
        now = config_pins(self.pipeline, _decided_streams(plan))
        changed = [_pin_label(k) for k in sorted(plan.config_pins) if plan.config_pins[k] != now.get(k)]
        changed += _edited_schema_files(self.pipeline, plan)
        if changed:
            raise ConfigError(
                f"pipeline {self.pipeline.id!r}: run {plan.run_seq} was planned (and crashed) with other settings "
                f"than the config has now: {', '.join(changed)} changed. Executing it again would write its records "
                "differently from what it planned; nothing was written.",
                hint="Restore the settings until the run has finished, or give the run up with "
                f"`{_abandon_command(self, plan)}` (its offsets are not committed; the next run plans them again "
                "under the new settings).",
            )

    def _stale_plan_reason(self, plan: Plan, splits: Sequence[Split] | None = None) -> str | None:
        """Why ``plan`` can no longer be executed as planned, when its policy says to abandon it; None when it can.
        ``splits``: the ranges still to be read (default: all of the plan's).

        Raises:
            DataLossError: part of a range was deleted or truncated and ``on_data_loss: fail``.
            TopicRecreatedError: a topic was deleted or recreated and ``on_topic_recreated: fail``.
            ClusterUnreachableError: a cluster of the plan cannot be reached.
        """
        if plan.is_empty:
            return None
        try:
            brokers = self.context.plan_snapshot(plan)
        except KafkaClientError as e:
            raise ClusterUnreachableError(
                f"run {plan.run_seq} of pipeline {self.pipeline.id!r} was planned (and crashed) reading this cluster, "
                f"which cannot be queried now ({e}); the run cannot be finished and nothing was written.",
                cluster_id=e.cluster_id,
                hint="Restore access to the cluster (or its entry in the metadata service), or give the run up "
                f"with `{_abandon_command(self, plan)}`.",
            ) from e
        losses: list[LostRange] = []
        truncated: list[LostRange] = []
        for s in plan.read_splits if splits is None else splits:
            topic = brokers.clusters[s.cluster_id].topics.get(s.topic)
            offsets = topic.partitions.get(s.partition) if topic is not None and topic.exists else None
            if topic is None or offsets is None or (s.topic_id and topic.topic_id and s.topic_id != topic.topic_id):
                why = (
                    f"topic {s.topic!r} on cluster {s.cluster_id!r} was deleted or recreated since run "
                    f"{plan.run_seq} was planned"
                )
                if self.pipeline.on_topic_recreated == "fail":
                    raise TopicRecreatedError(s.cluster_id, s.topic, why)
                return why
            if s.start_offset < offsets.earliest:
                losses.append(LostRange(**s.key.model_dump(), from_offset=s.start_offset, to_offset=offsets.earliest))
            elif s.stop_offset > offsets.latest:
                truncated.append(LostRange(**s.key.model_dump(), from_offset=offsets.latest, to_offset=s.stop_offset))
        if not (losses or truncated):
            return None
        if self.pipeline.on_data_loss == "fail":
            raise DataLossError(losses, truncated=truncated)
        return "part of its ranges is gone from the brokers: " + "; ".join(
            [str(lost) for lost in losses]
            + [f"{t.cluster_id}/{t.topic}[{t.partition}] truncated to {t.from_offset}" for t in truncated]
        )

    def _maintain(self) -> None:
        """Compacts and checkpoints the state now and then. The run is already committed: a failure here (for
        example a concurrent run's commit winning the race) is a warning, and the next run tries again.
        """
        try:
            self.store.maintain()
        except DynamicKafkaError as e:
            logger.warning("pipeline %s: state maintenance skipped: %s", self.pipeline.id, e)


def _for_streams(tables: Sequence[SinkTable]) -> str:
    """`` for the tables of streams a, b`` naming stream tables, else nothing (the one sink)."""
    streams = [table.stream for table in tables if table.stream is not None]
    return f" for the tables of streams {', '.join(streams)}" if streams else ""


def _raise_to(frontier: dict[TopicPartition, int], more: dict[TopicPartition, int]) -> None:
    """Raises ``frontier`` to ``more`` where ``more`` is higher (a partition's sink rows and dead letters)."""
    for key, offset in more.items():
        frontier[key] = max(frontier.get(key, 0), offset)


def _decided_streams(plan: Plan) -> set[str]:
    """The streams whose formats decide what ``plan`` writes: its ranges' and its archive's."""
    streams = {s.stream_id for s in plan.read_splits}
    return streams if plan.bootstrap is None else {*streams, plan.bootstrap.stream}


def _pin_label(key: str) -> str:
    """How a config pin is named to the user: the setting's key, or a stream's resolved value format."""
    if key.startswith(FORMAT_PIN_PREFIX):
        return f"the value format of stream {key.removeprefix(FORMAT_PIN_PREFIX)!r}"
    return key


def _edited_schema_files(pipeline: PipelineConfig, plan: Plan) -> list[str]:
    """The pinned ``value_schema_file`` contents that differ now (or cannot be read), named by stream and path."""
    from dynamic_kafka.decoding.registry_formats import schema_digest

    edited: list[str] = []
    files = {(p.stream_id, p.schema_file_sha256) for p in plan.decoding if p.schema_file_sha256 is not None}
    for stream_id, pinned in sorted(files):
        path = pipeline.value_format_of(stream_id).value_schema_file
        if path is None:
            continue  # no file now: the stream's format pin names that change
        try:
            digest = schema_digest(path.read_text(encoding="utf-8"))
        except OSError as e:
            edited.append(f"value_schema_file {str(path)!r} of stream {stream_id!r} (unreadable: {e.strerror})")
            continue
        if digest != pinned:
            edited.append(f"the contents of value_schema_file {str(path)!r} of stream {stream_id!r}")
    return edited


def _abandon_command(runner: PipelineRunner, plan: Plan) -> str:
    config = str(runner.project.source) if runner.project.source else "dynamic_kafka.yaml"
    return (
        f"dynamic-kafka abandon --config {config} --pipeline {runner.pipeline.id} --run-seq {plan.run_seq} "
        "--reason '...'"
    )


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


def _now() -> datetime:
    return datetime.now(UTC)


def _refuse_live_owner(pipeline_id: str, head: RunRecord) -> RunOwner | None:
    """Raise when the planned ``head``'s owner is alive; else return its owner (None when it names none).

    A fresh lease means alive (on another host, or in a process using another lock folder), unless the owner is
    provably gone from this host; an expired lease means a crash.

    Raises:
        RunInProgressError: the owner holds a fresh lease.
    """
    owner = RunOwner.parse(head.owner)
    if head.lease_is_fresh(_now()) and not (owner is not None and owner.is_gone()):
        raise RunInProgressError(
            pipeline_id,
            head.run_seq,
            owner=owner.describe() if owner is not None else head.owner,
            until=head.lease_expires_at.isoformat() if head.lease_expires_at else None,
        )
    return owner


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
