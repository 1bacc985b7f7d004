"""Time-window backfills: re-read ``[start, end)`` of event time and merge it into the sink.

Event time is the pipeline's ``event_time`` expression when it has one (:mod:`dynamic_kafka.spark.event_time`),
else the Kafka timestamp. Offsets are found by Kafka timestamp only, so with an expression the window's offsets are
those of ``[start - slack, end + slack)`` (``event_time_slack_seconds``, :func:`offsets_window`) and the decoded
rows are kept by their event time (by their Kafka timestamp where it is null).

The window's offsets come from ``offsets_for_times`` (first offset with timestamp >= start, first with timestamp
>= end) through the same planner as incremental runs, over an empty state and without caps or per-cluster
overrides, but for a cluster's timestamp ``starting_offsets`` (a failover's handover) later than the start: that
cluster's window starts there, so a mirror's copies of the old cluster's records are not merged again. Rows are
also filtered on their timestamp, because timestamps inside a partition need not be ordered.
They are merged on (cluster, topic, partition, offset), so overlapping backfills never duplicate a record. A
backfill never reads or moves the incremental offsets: before it writes the sink it raises the state's backfill
frontier (``StateStore.record_backfill``: per partition, the highest stop offset a backfill covered), and the
incremental runs dedupe the part of their ranges below the frontier against the sink. Recorded first, the frontier
is seen by every run that can append after the merge (a run planned before it must commit before it is recorded);
a backfill that then fails leaves a frontier that only costs those runs a check.

A backfill is guarded like a run (:func:`run_backfill`): it holds the pipeline's run lock for its whole duration
(no run or backfill of the pipeline on this machine beside it), takes the state's backfill lease in the commit that
records its frontier (no run is planned or taken over beside it on any host, and it waits for none: a planned run
refuses it), renews the lease while it merges, is bounded by ``max_run_seconds``, and makes a run's checks before
anything is recorded (:func:`~dynamic_kafka.protocol.prepare.prepare_write`: Spark, the writer schemas, ``value.schema``
and the sink's schema, the object store). Before each MERGE it checks its lease, and that every topic it read is still
the incarnation it planned, as a run does before its commit.

With a table per stream (``sink.path: data/{stream}``) the window is still read once, and each stream's rows are
merged into that stream's table, one MERGE per table (:func:`~dynamic_kafka.sink.per_stream.for_each_table`), each
recording the backfill's sequence there. A partition lands in one stream's table, so the frontier recorded before
the first MERGE is per table too: a backfill stopped between two tables is finished by running it again (each MERGE
inserts only what its table lacks) or, for the offsets the incremental runs have still to read, by those runs.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from dynamic_kafka import clock as wall_clock
from dynamic_kafka.errors import ConfigError
from dynamic_kafka.faults import CrashPoint, crash_point
from dynamic_kafka.initializers import TimestampOffsets, to_epoch_ms
from dynamic_kafka.metadata.snapshot import MetadataSnapshot
from dynamic_kafka.model.snapshots import StateSnapshot
from dynamic_kafka.model.summary import RunSummary
from dynamic_kafka.plan.planner import plan_run
from dynamic_kafka.plan.tables import as_tables_take, tables_of_partitions
from dynamic_kafka.progress import Tracker, tracking
from dynamic_kafka.protocol.context import PipelineContext
from dynamic_kafka.protocol.guard import LEASE_ATTEMPTS, WriterGuard
from dynamic_kafka.protocol.prepare import PreparedWrite, prepare_write
from dynamic_kafka.protocol.realign import check_not_behind, check_tables_not_behind
from dynamic_kafka.sink.per_stream import run_streams
from dynamic_kafka.state.owner import RunOwner

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pyspark.sql import DataFrame

    from dynamic_kafka.config.models import PipelineConfig
    from dynamic_kafka.metadata.models import ClusterMetadata
    from dynamic_kafka.metadata.snapshot import MetadataSnapshot
    from dynamic_kafka.model.plan import Plan, Split
    from dynamic_kafka.protocol.context import PipelineContext
    from dynamic_kafka.sink.metrics import WriteResult
    from dynamic_kafka.sink.per_stream import SinkTable
    from dynamic_kafka.state.store import RecordedBackfill

logger = logging.getLogger(__name__)


def _window_metadata(metadata: MetadataSnapshot, start_ms: int) -> MetadataSnapshot:
    """``metadata`` with the clusters' own offsets overrides taken out, except a timestamp ``starting_offsets``
    later than the window's start, which stays: the window starts there on that cluster.

    A cluster's timestamp ``starting_offsets`` is a handover (a stream failed over to a mirror: records before it
    are copies of what the old cluster already delivered, with the same timestamps but other coordinates, so a
    MERGE on coordinates would insert them again). A backfill reads no more of that cluster's history than its
    incremental runs do. Other overrides (earliest, latest, offsets) say where a first run starts, not where the
    cluster's own records begin, and the window's bounds replace them.
    """

    def bounded(override: ClusterMetadata) -> ClusterMetadata:
        starting = override.starting_offsets
        handover = starting if isinstance(starting, TimestampOffsets) and starting.timestamp_ms > start_ms else None
        return override.with_offsets(handover, None)

    return metadata.map_clusters(bounded)


def offsets_window(pipeline: PipelineConfig, start: datetime, end: datetime) -> tuple[datetime, datetime]:
    """The Kafka timestamps whose offsets a backfill of event time ``[start, end)`` reads: the window itself, or,
    with an ``event_time`` expression, the window widened by ``event_time_slack_seconds`` on both sides (the rows
    are then kept by their event time). A record whose Kafka timestamp lies further from its event time than the
    slack is not read.
    """
    first, last = start, end
    if pipeline.event_time is not None:
        slack = timedelta(seconds=pipeline.event_time_slack_seconds)
        first, last = start - slack, end + slack
    return max(first, after_bootstrap(pipeline, start, end)), last


def after_bootstrap(pipeline: PipelineConfig, start: datetime, end: datetime) -> datetime:
    """The window's start, no earlier than the bootstrap archive's ``until`` when the pipeline has one: Kafka's
    records before it are the archive's, landed without Kafka coordinates, so a MERGE on coordinates would insert
    them again (as a mirror's copies before its handover, see :func:`_window_metadata`).

    Raises:
        ConfigError: the whole window lies before ``until`` (the archive landed that time).
    """
    if pipeline.bootstrap is None:
        return start
    until = pipeline.bootstrap.until
    if end <= until:
        raise ConfigError(
            f"pipeline {pipeline.id!r}: the backfill window [{start.isoformat()}, {end.isoformat()}) lies before "
            f"the bootstrap archive's until ({until.isoformat()}): that time was landed from the archive, and Kafka's "
            "records of it would land a second time. Nothing was written.",
            hint="Backfill a window ending after bootstrap.until; history before it is the archive's.",
        )
    if start < until:
        logger.warning(
            "backfill of %s: the window starts at the bootstrap archive's until %s, not at %s (the archive landed "
            "the time before it)",
            pipeline.id,
            until.isoformat(),
            start.isoformat(),
        )
    return max(start, until)


def plan_backfill(context: PipelineContext, start: datetime, end: datetime) -> tuple[Plan, MetadataSnapshot]:
    """The splits covering event time ``[start, end)`` on every subscribed partition, and the metadata snapshot
    they were planned from (the read must use the same connections). Writes nothing.
    """
    if end <= start:
        raise ValueError(f"backfill window [{start}, {end}) is empty: give an end after the start.")
    first, last = offsets_window(context.pipeline, start, end)
    window = context.pipeline.for_window(
        TimestampOffsets(timestamp_ms=to_epoch_ms(first)), TimestampOffsets(timestamp_ms=to_epoch_ms(last))
    )
    metadata = _window_metadata(context.resolve(), to_epoch_ms(first))
    empty = StateSnapshot(pipeline_id=window.id)
    brokers = context.broker_snapshot(metadata, empty, pipeline=window)
    plan = plan_run(
        pipeline=window, metadata=metadata, state=empty, brokers=brokers, run_seq=1, now=wall_clock.utc_now()
    )
    state = context.store.load()
    # Each partition's window merges into the table its incremental runs land it in.
    plan = plan.with_splits(as_tables_take(context.pipeline, plan.splits, state))
    return _above_floors(plan, state), metadata


def _above_floors(plan: Plan, state: StateSnapshot) -> Plan:
    """``plan`` with every split starting at or above its partition's backfill floor. Sink rows carry coordinates,
    not topic ids: below the floor, a recreated topic's offsets may match an earlier incarnation's rows, and the
    MERGE would take them for records already there. Those offsets were (or will be) read by the incremental run
    that resets the topic, from earliest.
    """
    clipped: list[Split] = []
    for split in plan.splits:
        floor = state.backfill_floor(split)
        if floor > split.start_offset:
            start = min(floor, split.stop_offset)
            logger.warning(
                "backfill of %s: offsets [%d, %d) skipped: below the floor %d of a recreated topic (an earlier "
                "incarnation's rows may be in the sink at the same offsets; the incremental runs read them)",
                split.key,
                split.start_offset,
                start,
                floor,
            )
            split = split.narrowed(start, split.stop_offset)
        clipped.append(split)
    return plan.with_splits(clipped)


def record_backfill_frontier(
    context: PipelineContext, plan: Plan, *, attempts: int, guard: WriterGuard | None
) -> RecordedBackfill:
    """Records the backfill's frontier in the state before anything is merged, taking the writer lease for
    ``guard``'s owner in the same commit (no lease when None); its ``sequence`` numbers the backfill's MERGEs (None
    when the state's frontier already covered the plan).

    Raises:
        StateBehindSinkError: the state is behind its sink (restored or moved); nothing was recorded.
        RunInProgressError: a run stayed planned through every attempt, or a backfill holds the lease; nothing
            was recorded.
    """
    state = context.store.load()
    check_not_behind(context.pipeline, state, context.store.path)
    check_tables_not_behind(context.pipeline, state, run_streams(plan.read_splits), context.store.path)
    return context.store.record_backfill(
        {s.key: s.stop_offset for s in plan.read_splits},
        topic_ids={s.key: s.topic_id for s in plan.read_splits},
        # Each partition's table, for its first run to land in when no run has landed it yet.
        streams=tables_of_partitions(context.pipeline, plan.read_splits),
        attempts=attempts,
        owner=guard.owner.text() if guard is not None else None,
        lease_expires_at=guard.lease_end() if guard is not None else None,
    )


def run_backfill(context: PipelineContext, start: datetime, end: datetime) -> RunSummary:
    """Reads event time ``[start, end)`` from every subscribed partition and merges it into the sink.

    Guarded like a run (see the module's docstring): never beside a run or another backfill of the pipeline.

    Raises:
        RunInProgressError: a run or backfill of the pipeline holds the run lock on this machine, a run is planned
            (in flight, or crashed: the next run recovers it), or another backfill holds the lease; nothing was
            written.
        SchemaMismatchError: ``value.schema`` is invalid or the sink's schema does not take the rows; nothing was
            written.
        StateBehindSinkError: the state is behind its sink (restored or moved); nothing was written.
        RunTimeoutError: the backfill exceeded ``max_run_seconds`` and was cancelled (retriable).
        LeaseLostError: the backfill lost its lease before a MERGE (retriable); it merged no further.
        TopicRecreatedError: a topic it read was deleted or recreated since the backfill was planned (retriable);
            it merged no further.
        DynamicKafkaError: any other failure; running the backfill again is harmless.
    """
    guard = WriterGuard(context.store, context.pipeline, "backfill", owner=RunOwner.current("backfill"))
    with guard.entered(), tracking("backfill", context.pipeline.id) as progress:
        return _run_backfill(context, start, end, guard, progress)


def _run_backfill(
    context: PipelineContext, start: datetime, end: datetime, guard: WriterGuard, progress: Tracker
) -> RunSummary:
    from pyspark.sql import functions as sf

    from dynamic_kafka.sink import merge_backfill
    from dynamic_kafka.sink.per_stream import for_each_table, stream_pairs
    from dynamic_kafka.spark.progress import watching_spark
    from dynamic_kafka.spark.reader import read_splits

    began = time.monotonic()
    progress.stage("planning")
    start = after_bootstrap(context.pipeline, start, end)  # the rows are filtered on the window too
    plan, metadata = plan_backfill(context, start, end)
    planned = time.monotonic()
    if plan.is_empty:
        return RunSummary.of_plan(plan, "empty", plan_seconds=planned - began)
    progress.stage("checking Spark and the sink", planned_offsets=plan.planned_records)
    prepared = prepare_write(context, plan, guard.deadline, metadata=metadata)
    recorded = record_backfill_frontier(context, plan, attempts=LEASE_ATTEMPTS, guard=guard)
    assert recorded.version is not None  # taking the lease always commits
    guard.keep_lease(recorded.version)
    crash_point(CrashPoint.AFTER_FRONTIER)
    spark = context.spark()
    guard.deadline.attach(spark)
    frame = read_splits(
        spark,
        plan.read_splits,
        prepared.connections,
        isolation_level=context.pipeline.isolation_level,
        min_partitions=context.pipeline.min_partitions,
    )
    # The window's offsets bound the read; timestamps within a partition need not be ordered, so the rows are
    # also filtered on event time: here on the Kafka timestamp, or, with an event_time expression, by the
    # MERGE once the rows are decoded.
    event_time = prepared.plan.event_time
    in_window = (
        frame
        if event_time is not None
        else frame.where((sf.col("timestamp") >= sf.lit(start)) & (sf.col("timestamp") < sf.lit(end)))
    )

    def merge(rows: DataFrame, table: SinkTable, splits: Sequence[Split]) -> WriteResult:
        # Each MERGE is idempotent on its own (see the module docstring).
        return merge_backfill(
            rows,
            table.pipeline,
            stream_pairs(splits),
            start=start,
            end=end,
            prepared=prepared.decoding,
            backfill_sequence=recorded.sequence,
            before_write=lambda: _before_merge(context, prepared, guard),
            event_time=event_time,
        )

    progress.stage("reading and merging", planned_offsets=plan.planned_records)
    with watching_spark(spark, progress):
        result, tables = for_each_table(in_window, context.pipeline, plan.read_splits, merge)
    done = time.monotonic()
    return RunSummary.committed(
        plan,
        result,
        stream_tables=tables,
        plan_seconds=planned - began,
        spark_seconds=done - planned,
        total_seconds=done - began,
    )


def _before_merge(context: PipelineContext, prepared: PreparedWrite, guard: WriterGuard) -> None:
    """What a backfill checks right before each MERGE (after its read): the guard's check (within its deadline,
    still holding its lease), and every topic it read is still the incarnation it planned (a recreated topic's
    records at the old offsets are never merged).
    """
    guard.before_write()
    prepared.check_topics_unchanged(context, backfill=True)
