"""A table per stream (``sink.path: data/{stream}``): one run, one Kafka read, one Delta transaction per table.

Each stream's rows go to its own table (and undecodable ones to its own dead-letter table), each appended as an
incremental run appends a sink (:func:`~dynamic_kafka.sink.incremental.write_incremental`), with the same
transaction ``(pipeline id, run_seq)``: each table's log says on its own whether it holds the run. So the
recovery rule of one sink becomes, per table: a run is committed to the state only once every table of the run
holds its transaction, and a recovery writes only the tables that lack it (the runner asks each table's log).

Which table a row lands in is its ``stream`` column, which the reader fills from the row's own split: the split's
first stream, the one a topic shared by two subscribed streams is attributed to when it first lands (the project's
shared-topic rule), kept for the partition afterwards (:mod:`dynamic_kafka.plan.tables`). The tables of a run are those
of the streams it reads (:func:`run_streams`); a stream that appears later gets its table from the run that first
lands it, created by that run's first append.

The Kafka ranges are read once: the reader's rows are persisted (memory, spilling to disk) and every table's append
filters them, so the first append's job reads Kafka and the others read the persisted rows. A backfill goes through
the stream tables the same way (:func:`for_each_stream`), one MERGE per table.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from dynamic_kafka.faults import CrashPoint, crash_point
from dynamic_kafka.model.summary import StreamTable
from dynamic_kafka.sink.metrics import WriteResult

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

    from pyspark.sql import DataFrame

    from dynamic_kafka.config import PipelineConfig
    from dynamic_kafka.model.plan import Split
    from dynamic_kafka.model.snapshots import StateSnapshot
    from dynamic_kafka.spark.decoding import PreparedDecoding

logger = logging.getLogger(__name__)


def run_streams(splits: Iterable[Split]) -> list[str]:
    """The streams whose tables a run with these read splits writes, sorted."""
    return sorted({s.stream_id for s in splits})


def known_streams(state: StateSnapshot) -> list[str]:
    """Every stream the state knows a table of: its partitions' streams (committed, or merged by a backfill) and the
    planned head's, sorted.
    """
    streams = {p.stream_ids[0] for p in state.partitions.values() if p.stream_ids}
    streams.update(state.backfill_streams.values())
    if state.last_run is not None:
        streams.update(run_streams(state.last_run.plan.read_splits))
    return sorted(streams)


def table_views(pipeline: PipelineConfig, state: StateSnapshot, streams: Iterable[str] = ()) -> list[PipelineConfig]:
    """The pipeline as each of its tables sees it: one view per stream the state knows and per stream of
    ``streams`` (a table per stream), else the pipeline itself.
    """
    return list(stream_views(pipeline, state, streams).values())


def stream_views(
    pipeline: PipelineConfig, state: StateSnapshot, streams: Iterable[str] = ()
) -> dict[str | None, PipelineConfig]:
    """:func:`table_views` by the stream of each table (None: the pipeline's one sink)."""
    if not pipeline.sink.per_stream:
        return {None: pipeline}
    return {stream: pipeline.for_stream(stream) for stream in sorted({*known_streams(state), *streams})}


def write_per_stream(
    df: DataFrame,
    pipeline: PipelineConfig,
    run_seq: int,
    splits: Sequence[Split],
    overlaps: Sequence[Split],
    prepared: PreparedDecoding | None,
    *,
    before_commit: Callable[[], None] | None = None,
    counted_ranges: Sequence[Split] = (),
    event_time: str | None = None,
    planned_records: int | None = None,
) -> tuple[WriteResult, tuple[StreamTable, ...]]:
    """Lands a run's records, each stream's into its own table, in stream order; returns the whole run's result
    and what each table got. ``counted_ranges``: as for one sink, each stream's counted by its table's write.
    ``event_time``: the expression every table's event-time range measures (the plan's); None: the Kafka
    timestamp. ``planned_records``: the run's planned records (None: unknown); each table's write is sized by its own.

    A table already holding the run (a recovery, or another writer of it) is not written again: its part is
    reported from its log. The crash point ``between_tables`` follows every table but the last.

    Raises:
        As :func:`~dynamic_kafka.sink.incremental.write_incremental`, for the first table whose write fails; the
        tables before it hold the run, the others do not (the next run's recovery writes those).
    """
    from dynamic_kafka.sink.incremental import write_incremental

    def write(rows: DataFrame, stream: str, own: Sequence[Split]) -> WriteResult:
        keys = {(s.cluster_id, s.topic, s.partition) for s in own}
        return write_incremental(
            rows,
            pipeline.for_stream(stream),
            run_seq,
            stream_pairs(own),
            [o for o in overlaps if (o.cluster_id, o.topic, o.partition) in keys],
            prepared,
            before_commit=before_commit,
            counted_ranges=[s for s in counted_ranges if s.stream_id == stream],
            event_time=event_time,
            planned_records=None if planned_records is None else sum(s.record_count for s in own),
        )

    results = for_each_stream(df, splits, write)
    return combined(results), stream_tables(pipeline, results)


def for_each_stream(
    df: DataFrame, splits: Sequence[Split], write: Callable[[DataFrame, str, Sequence[Split]], WriteResult]
) -> dict[str, WriteResult]:
    """Calls ``write`` once per stream of ``splits``, in stream order, with the rows of ``df`` whose ``stream``
    column is that stream and the stream's own splits; returns each stream's result. ``df`` is read once: with
    more than one stream it is persisted (memory, spilling to disk) for the writes. The crash point
    ``between_tables`` follows every stream but the last.

    Raises:
        What ``write`` raises, for the first stream whose write fails; the streams before it were written.
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as sf

    by_stream: dict[str, list[Split]] = {}
    for split in splits:
        by_stream.setdefault(split.stream_id, []).append(split)
    streams = sorted(by_stream)
    rows = df.persist(StorageLevel.MEMORY_AND_DISK) if len(streams) > 1 else df
    results: dict[str, WriteResult] = {}
    try:
        for index, stream in enumerate(streams):
            results[stream] = write(rows.where(sf.col("stream") == sf.lit(stream)), stream, by_stream[stream])
            if index < len(streams) - 1:
                crash_point(CrashPoint.BETWEEN_TABLES)
    finally:
        if rows is not df:
            rows.unpersist()
    return results


def stream_pairs(splits: Iterable[Split]) -> list[tuple[str, str]]:
    """The ``(cluster_id, topic)`` pairs of ``splits``, sorted (what one table's write reports statistics for)."""
    return sorted({(s.cluster_id, s.topic) for s in splits})


def landed_per_stream(
    pipeline: PipelineConfig, splits: Sequence[Split], run_seq: int
) -> tuple[WriteResult, tuple[StreamTable, ...]]:
    """What run ``run_seq`` landed in its tables, as their logs say (a run found complete: its recovery)."""
    from dynamic_kafka.sink.incremental import landed_from_log

    results = {}
    for stream in run_streams(splits):
        view = pipeline.for_stream(stream)
        results[stream] = landed_from_log(view.sink_table, view.dead_letter_table, pipeline.id, run_seq)
    return combined(results), stream_tables(pipeline, results)


def stream_tables(pipeline: PipelineConfig, results: Mapping[str, WriteResult]) -> tuple[StreamTable, ...]:
    """What each stream's table got, for the run's summary."""
    return tuple(
        StreamTable(
            stream_id=stream,
            path=str(pipeline.for_stream(stream).sink_table),
            records=result.records,
            dead_letters=result.dead_letters,
            sink_version=result.sink_version,
        )
        for stream, result in sorted(results.items())
    )


def combined(results: Mapping[str, WriteResult]) -> WriteResult:
    """One run's result from its tables' results: counts summed, event-time range widened; the sink version is
    the last table's (each table's own is in the run's ``stream_tables``). ``already_committed`` only when every
    table already held the run. The ranges are counted (``read_per_range``) only when every table's write counted
    its own: a table found holding the run read nothing.
    """
    parts = list(results.values())
    per_topic: dict[tuple[str, str], tuple[int, int]] = {}
    schema_counts: dict[str, int] = {}
    for part in parts:
        per_topic.update(part.per_topic)  # a (cluster, topic) belongs to one stream's table
        for key, count in part.schema_counts.items():
            schema_counts[key] = schema_counts.get(key, 0) + count
    starts = [p.min_event_time for p in parts if p.min_event_time is not None]
    ends = [p.max_event_time for p in parts if p.max_event_time is not None]
    return WriteResult(
        records=sum(p.records for p in parts),
        bytes=sum(p.bytes for p in parts),
        per_topic=per_topic,
        sink_records=sum(p.sink_records for p in parts),
        dead_letters=sum(p.dead_letters for p in parts),
        min_event_time=min(starts) if starts else None,
        max_event_time=max(ends) if ends else None,
        sink_version=parts[-1].sink_version if parts else None,
        dead_letter_version=parts[-1].dead_letter_version if parts else None,
        already_committed=bool(parts) and all(p.already_committed for p in parts),
        deduplicated=sum(p.deduplicated for p in parts),
        schema_counts=schema_counts,
        read_per_range=_read_per_range(parts),
        landed_files=tuple(files for p in parts for files in p.landed_files),
    )


def _read_per_range(parts: Sequence[WriteResult]) -> dict[tuple[str, str, int], int] | None:
    """The tables' range counts together; None unless every table's write counted its ranges."""
    merged: dict[tuple[str, str, int], int] = {}
    for part in parts:
        if part.read_per_range is None:
            return None
        merged.update(part.read_per_range)  # a range belongs to one stream's table
    return merged if parts else None
