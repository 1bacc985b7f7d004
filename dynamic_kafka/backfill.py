"""Time-window backfills: re-read ``[start, end)`` of event time and merge it into the sink.

The window's offsets come from ``offsets_for_times`` (first offset with timestamp >= start, first with timestamp
>= end) through the same planner as incremental runs, over an empty state and without caps or per-cluster
overrides. Rows are also filtered on their timestamp, because timestamps inside a partition need not be ordered.
They are merged on (cluster, topic, partition, offset), so overlapping backfills never duplicate a record. A
backfill never reads or moves the incremental offsets: before it writes the sink it raises the state's backfill
frontier (``StateStore.record_backfill``: per partition, the highest stop offset a backfill covered), and the
incremental runs dedupe the part of their ranges below the frontier against the sink. Recorded first, the frontier
is seen by every run that can append after the merge (a run planned before it must commit before it is recorded);
a backfill that then fails leaves a frontier that only costs those runs a check.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from dynamic_kafka.context import PipelineContext
from dynamic_kafka.faults import crash_point
from dynamic_kafka.metadata.snapshot import MetadataSnapshot
from dynamic_kafka.offsets import TimestampOffsets, to_epoch_ms
from dynamic_kafka.plan.planner import plan_run
from dynamic_kafka.plan.snapshots import StateSnapshot
from dynamic_kafka.plan.summary import RunSummary, TopicStats, base_summary
from dynamic_kafka.realign import check_not_behind

if TYPE_CHECKING:
    from dynamic_kafka.context import PipelineContext
    from dynamic_kafka.metadata.snapshot import MetadataSnapshot
    from dynamic_kafka.plan.model import Plan, Split

logger = logging.getLogger(__name__)


def _without_overrides(metadata: MetadataSnapshot) -> MetadataSnapshot:
    streams = {
        sid: s.model_copy(
            update={
                "clusters": {
                    cid: c.model_copy(update={"starting_offsets": None, "stopping_offsets": None})
                    for cid, c in s.clusters.items()
                }
            }
        )
        for sid, s in metadata.streams.items()
    }
    return metadata.model_copy(update={"streams": streams})


def plan_backfill(context: PipelineContext, start: datetime, end: datetime) -> tuple[Plan, MetadataSnapshot]:
    """The splits covering event time ``[start, end)`` on every subscribed partition, and the metadata snapshot
    they were planned from (the read must use the same connections). Writes nothing.
    """
    if end <= start:
        raise ValueError(f"backfill window [{start}, {end}) is empty: give an end after the start.")
    window = context.pipeline.model_copy(
        update={
            "starting_offsets": TimestampOffsets(timestamp_ms=to_epoch_ms(start)),
            "stopping_offsets": TimestampOffsets(timestamp_ms=to_epoch_ms(end)),
            "max_records_per_partition": None,
            "max_records_per_run": None,
            "drain_removed": False,
        }
    )
    metadata = _without_overrides(context.resolve())
    empty = StateSnapshot(pipeline_id=window.id)
    brokers = context.broker_snapshot(metadata, empty, pipeline=window)
    plan = plan_run(pipeline=window, metadata=metadata, state=empty, brokers=brokers, run_seq=1, now=datetime.now(UTC))
    return _above_floors(plan, context.store.load()), metadata


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
            split = split.model_copy(update={"start_offset": start})
        clipped.append(split)
    return plan.model_copy(update={"splits": tuple(clipped)})


def record_frontier(context: PipelineContext, plan: Plan, *, attempts: int = 5) -> int | None:
    """Records the backfill's frontier in the state, before anything is merged; returns the backfill's sequence
    number for its MERGEs (None when the state's frontier already covered the plan).

    Raises:
        StateBehindSinkError: the state is behind its sink (restored or moved); nothing was recorded.
        RunInProgressError: a run stayed planned through every attempt; nothing was recorded.
    """
    check_not_behind(context.pipeline, context.store.load(), context.store.path)
    recorded = context.store.record_backfill(
        {s.key: s.stop_offset for s in plan.read_splits},
        topic_ids={s.key: s.topic_id for s in plan.read_splits},
        attempts=attempts,
    )
    return recorded.sequence


def run_backfill(context: PipelineContext, start: datetime, end: datetime) -> RunSummary:
    """Reads event time ``[start, end)`` from every subscribed partition and merges it into the sink."""
    from pyspark.sql import functions as sf

    from dynamic_kafka.sink import merge_backfill
    from dynamic_kafka.spark.reader import read_splits

    began = time.monotonic()
    plan, metadata = plan_backfill(context, start, end)
    planned = time.monotonic()
    if plan.is_empty:
        return RunSummary(**base_summary(plan, 0), status="empty", plan_seconds=planned - began)
    context.check_spark()  # a Spark Connect server that is down: fail before the frontier moves
    from dynamic_kafka.spark.registry_decode import prepare_decoding

    # Writer schemas first: a registry that is down fails the backfill before anything is recorded.
    prepared = prepare_decoding(context.pipeline, plan.read_splits, metadata.clusters())
    context.check_object_store()
    sequence = record_frontier(context, plan)
    crash_point("after_frontier")
    frame = read_splits(
        context.spark(),
        plan.read_splits,
        metadata.clusters(),
        isolation_level=context.pipeline.isolation_level,
        min_partitions=context.pipeline.min_partitions,
    )
    # The window's offsets bound the read; timestamps within a partition need not be ordered, so the rows are
    # also filtered on event time.
    in_window = frame.where((sf.col("timestamp") >= sf.lit(start)) & (sf.col("timestamp") < sf.lit(end)))
    pairs = sorted({(s.cluster_id, s.topic) for s in plan.read_splits})
    result = merge_backfill(
        in_window, context.pipeline, pairs, start=start, end=end, prepared=prepared, backfill_sequence=sequence
    )
    done = time.monotonic()
    return RunSummary(
        **base_summary(plan, 0),
        status="committed",
        records=result.records,
        bytes=result.bytes,
        dead_letters=result.dead_letters,
        topics=tuple(
            TopicStats(cluster_id=c, topic=t, records=r, bytes=b) for (c, t), (r, b) in sorted(result.per_topic.items())
        ),
        spark_started=True,
        min_event_time=result.min_event_time,
        max_event_time=result.max_event_time,
        sink_version=result.sink_version,
        plan_seconds=planned - began,
        spark_seconds=done - planned,
        total_seconds=done - began,
    )
