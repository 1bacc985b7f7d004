"""One pipeline run, end to end: recover, resolve, plan, read, write, commit.

The protocol (DESIGN.md section 5):

1. a run left ``planned`` by a crash is finished first, with exactly its plan: if the sink already holds its data
   (Delta ``txn`` for this pipeline at that run_seq) only its offsets are committed, else it is executed again;
2. the metadata is resolved once (bounded retries) and every cluster's offsets are snapshotted in one batch;
3. the pure planner makes the plan; an empty plan is committed without starting Spark;
4. the plan is written as ``planned`` against the exact state version read (a concurrent run loses here);
5. Spark reads exactly the planned ranges and appends them to the sink idempotently (txnAppId/txnVersion),
   skipping records a backfill already landed below the state's backfill frontier;
6. the offsets and the run's ``committed`` status change in one Delta commit; the consumer-group commit that may
   follow is monitoring only.

Example:
    >>> from dynamic_kafka.config import load_project_config
    >>> runner = PipelineRunner(load_project_config("dynamic_kafka.yaml"), "orders")  # doctest: +SKIP
    >>> runner.run().records  # doctest: +SKIP
    1200
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from dynamic_kafka._toolchain.filelock import try_exclusive_lock
from dynamic_kafka.config import PipelineConfig, ProjectConfig
from dynamic_kafka.context import PipelineContext
from dynamic_kafka.errors import DynamicKafkaError, RunInProgressError
from dynamic_kafka.faults import arm_timer, crash_point
from dynamic_kafka.kafka import KafkaAdmin
from dynamic_kafka.metadata.models import ClusterMetadata
from dynamic_kafka.metadata.service import KafkaMetadataService
from dynamic_kafka.metadata.snapshot import MetadataSnapshot
from dynamic_kafka.plan.model import Plan, Split
from dynamic_kafka.plan.planner import plan_run
from dynamic_kafka.plan.snapshots import BrokerSnapshot, StateSnapshot
from dynamic_kafka.plan.summary import RunSummary, TopicStats, base_summary
from dynamic_kafka.sink import committed_txn_version

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

# A scheme such as s3:/ or abfss:/ (pathlib keeps one slash of "://").
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+:/")


class PipelineRunner:
    """Runs and plans one pipeline. Cheap to build: nothing is contacted until a method is called.

    Args:
        project: the project config.
        pipeline_id: which pipeline of the project.
        metadata_service: a service to use instead of the one the config names (programs and tests).
        spark: returns the Spark session; called only when a plan has something to read.
    """

    def __init__(
        self,
        project: ProjectConfig,
        pipeline_id: str,
        *,
        metadata_service: KafkaMetadataService | None = None,
        spark: Callable[[], SparkSession] | None = None,
    ) -> None:
        self.context = PipelineContext(project, pipeline_id, metadata_service=metadata_service, spark=spark)
        self.project = project
        self.pipeline: PipelineConfig = self.context.pipeline
        self.store = self.context.store

    @property
    def service(self) -> KafkaMetadataService:
        return self.context.service

    def resolve(self) -> MetadataSnapshot:
        """The pipeline's subscribed streams as the metadata service describes them now."""
        return self.context.resolve()

    def plan(self, state: StateSnapshot | None = None) -> tuple[Plan, BrokerSnapshot, MetadataSnapshot]:
        """The plan the next run would execute. Reads metadata, state and offsets; writes nothing."""
        state = state or self.store.load()
        metadata = self.context.resolve()
        brokers = self.context.broker_snapshot(metadata, state)
        plan = plan_run(
            pipeline=self.pipeline,
            metadata=metadata,
            state=state,
            brokers=brokers,
            run_seq=state.next_run_seq,
            now=_now(),
        )
        return plan, brokers, metadata

    def run(self) -> RunSummary:
        """Executes one incremental run (finishing a crashed one first) and returns its summary.

        A run holds a lock file next to a local state table for its whole duration (the OS releases it even on
        ``kill -9``), so a run started meanwhile on the same machine stops at once instead of taking the first
        one's planned run for a crashed one and executing it again. Runs elsewhere lose at the state's
        exact-version commit.

        Raises:
            RunInProgressError: another run of this pipeline holds the lock or planned first; nothing written.
            DynamicKafkaError: any other failure; nothing is half written, and the next run recovers.
        """
        lock = _run_lock_path(self.pipeline.resolved_state_path)
        if lock is None:
            return self._run()
        with try_exclusive_lock(lock) as taken:
            if not taken:
                state = self.store.load()
                head = state.last_run
                in_flight = head.run_seq if head is not None and head.status == "planned" else state.next_run_seq
                raise RunInProgressError(self.pipeline.id, in_flight)
            return self._run()

    def _run(self) -> RunSummary:
        started = time.monotonic()
        state = self.store.load()
        recovered: int | None = None
        if state.last_run is not None and state.last_run.status == "planned":
            recovered = self._recover(state)
            state = self.store.load()
        plan, brokers, metadata = self.plan(state)
        planned = time.monotonic()
        lag = _lag_after(plan, brokers)
        if plan.is_empty:
            summary = RunSummary(
                **base_summary(plan, lag),
                status="empty",
                recovered_run_seq=recovered,
                plan_seconds=planned - started,
            )
            self.store.commit_empty_run(
                plan, summary_json=summary.model_dump_json(), expected_version=state.table_version
            )
            self._maintain()
            return summary.model_copy(update={"total_seconds": time.monotonic() - started})
        self.context.check_spark()  # a Spark Connect server that is down: fail before the plan is written
        version = self.store.begin_run(plan, expected_version=state.table_version)
        crash_point("after_plan")
        summary = self._execute(
            plan,
            version,
            self.context.connections(plan, metadata),
            lag=lag,
            recovered=recovered,
            overlaps=state.backfill_overlaps(plan.read_splits),
        )
        return summary.model_copy(
            update={"plan_seconds": planned - started, "total_seconds": time.monotonic() - started}
        )

    def _execute(
        self,
        plan: Plan,
        version: int,
        clusters: Mapping[str, ClusterMetadata],
        *,
        lag: int,
        recovered: int | None,
        overlaps: Sequence[Split],
    ) -> RunSummary:
        from dynamic_kafka.sink import write_incremental
        from dynamic_kafka.spark.reader import read_splits

        spark_started = time.monotonic()
        spark = self.context.spark()
        arm_timer("during_write")
        frame = read_splits(
            spark,
            plan.read_splits,
            clusters,
            isolation_level=self.pipeline.isolation_level,
            min_partitions=self.pipeline.min_partitions,
        )
        pairs = sorted({(s.cluster_id, s.topic) for s in plan.read_splits})
        result = write_incremental(frame, self.pipeline, plan.run_seq, pairs, overlaps)
        crash_point("after_sink")
        committing = time.monotonic()
        summary = RunSummary(
            **base_summary(plan, lag),
            status="committed",
            recovered_run_seq=recovered,
            records=result.records,
            bytes=result.bytes,
            dead_letters=result.dead_letters,
            deduplicated=result.deduplicated,
            topics=tuple(
                TopicStats(cluster_id=c, topic=t, records=r, bytes=b)
                for (c, t), (r, b) in sorted(result.per_topic.items())
            ),
            spark_started=True,
            min_event_time=result.min_event_time,
            max_event_time=result.max_event_time,
            sink_version=result.sink_version,
            spark_seconds=committing - spark_started,
        )
        self.store.commit_run(plan, summary_json=summary.model_dump_json(), expected_version=version)
        self._commit_consumer_group(plan, clusters)
        self._maintain()
        return summary.model_copy(update={"commit_seconds": time.monotonic() - committing})

    def _recover(self, state: StateSnapshot) -> int:
        """Finishes the run a crash left planned, with exactly its plan. Returns its run_seq."""
        assert state.last_run is not None
        assert state.table_version is not None
        plan = state.last_run.plan
        written = committed_txn_version(str(self.pipeline.sink.path), self.pipeline.id)
        log.warning(
            "pipeline %s: run %d was planned but not committed; %s",
            self.pipeline.id,
            plan.run_seq,
            "its data is in the sink, committing its offsets" if written == plan.run_seq else "executing it again",
        )
        if written is not None and written >= plan.run_seq:
            summary = RunSummary(**base_summary(plan, 0), status="committed", recovered_run_seq=plan.run_seq)
            self.store.commit_run(plan, summary_json=summary.model_dump_json(), expected_version=state.table_version)
            self._commit_consumer_group(plan, self.context.connections(plan))
        else:
            self._execute(
                plan,
                state.table_version,
                self.context.connections(plan),
                lag=0,
                recovered=plan.run_seq,
                overlaps=state.backfill_overlaps(plan.read_splits),
            )
        return plan.run_seq

    def _maintain(self) -> None:
        """Compacts and checkpoints the state now and then. The run is already committed: a failure here (for
        example a concurrent run's commit winning the race) is a warning, and the next run tries again."""
        try:
            self.store.maintain()
        except DynamicKafkaError as e:
            log.warning("pipeline %s: state maintenance skipped: %s", self.pipeline.id, e)

    def _commit_consumer_group(self, plan: Plan, clusters: Mapping[str, ClusterMetadata]) -> None:
        group = self.pipeline.consumer_group
        if group is None:
            return
        by_cluster: dict[str, dict[tuple[str, int], int]] = {}
        for s in plan.splits:
            by_cluster.setdefault(s.cluster_id, {})[(s.topic, s.partition)] = s.stop_offset
        for cluster_id, offsets in by_cluster.items():
            cluster = clusters.get(cluster_id)
            if cluster is None:
                continue
            try:
                with KafkaAdmin(cluster) as admin:
                    admin.commit_group_offsets(group, offsets)
            except DynamicKafkaError as e:
                log.warning(
                    "consumer group %r: offsets not committed on cluster %r (monitoring only): %s", group, cluster_id, e
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


def _run_lock_path(state_path: Path) -> Path | None:
    """The run lock of a local state table (a hidden file beside it); None for object-store URIs."""
    if _URI.match(str(state_path)):
        return None
    return state_path.with_name(f".{state_path.name}.run.lock")


def _now() -> datetime:
    return datetime.now(UTC)
