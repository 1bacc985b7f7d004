"""The tables a pipeline writes: its one sink, or a table per stream (``sink.path: data/{stream}``), each with its
dead-letter table beside it. Every verb loops over them (:class:`SinkTable`); one sink is the case of one table.

With a table per stream, one run makes one Kafka read and one Delta transaction per table: each stream's rows go to
its own table (and undecodable ones to its own dead-letter table), each appended as an incremental run appends a
sink (:func:`~dynamic_kafka.sink.incremental.write_incremental`), with the same transaction ``(pipeline id,
run_seq)``: each table's log says on its own whether it holds the run. So the recovery rule of one sink becomes, per
table: a run is committed to the state only once every table of the run holds its transaction, and a recovery
writes only the tables that lack it (the runner asks each table's log).

Which table a row lands in is its ``stream`` column, which the reader fills from the row's own split: the split's
first stream, the one a topic shared by two subscribed streams is attributed to when it first lands (the project's
shared-topic rule), kept for the partition afterwards (:mod:`dynamic_kafka.plan.tables`). The tables of a run are those
of the streams it reads (:func:`run_tables`); a stream that appears later gets its table from the run that first
lands it, created by that run's first append.

The Kafka ranges are read once: with more than one table the reader's rows are persisted (memory, spilling to disk)
and every table's write filters them, so the first write's job reads Kafka and the others read the persisted rows
(:func:`for_each_table`: a run's appends, a backfill's MERGEs).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dynamic_kafka.faults import CrashPoint, crash_point
from dynamic_kafka.model.summary import StreamTable
from dynamic_kafka.sink.metrics import WriteResult

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from pyspark.sql import DataFrame

    from dynamic_kafka.config.models import PipelineConfig
    from dynamic_kafka.model.plan import Split
    from dynamic_kafka.model.snapshots import StateSnapshot
    from dynamic_kafka.storage import TableRef

logger = logging.getLogger(__name__)


@dataclass(frozen=True, eq=False)
class SinkTable:
    """One table a pipeline lands records in, with its dead-letter table: the pipeline's one sink (every stream's
    records), or one stream's table.
    """

    stream: str | None
    """The stream whose records the table holds; None: the pipeline's one sink, which holds every stream's."""
    pipeline: PipelineConfig
    """The pipeline as this table sees it: for a stream's table, its paths filled in."""

    @property
    def sink(self) -> TableRef:
        """The table of records."""
        return self.pipeline.sink_table

    @property
    def dead_letters(self) -> TableRef:
        """The dead-letter table beside it."""
        return self.pipeline.dead_letter_table

    def own(self, splits: Iterable[Split]) -> list[Split]:
        """The splits of ``splits`` whose records land in this table."""
        return [s for s in splits if self.stream in (None, s.stream_id)]

    def rows(self, df: DataFrame) -> DataFrame:
        """The rows of ``df`` that land in this table, by their ``stream`` column."""
        if self.stream is None:
            return df
        from pyspark.sql import functions as sf

        return df.where(sf.col("stream") == sf.lit(self.stream))


def sink_tables(pipeline: PipelineConfig, streams: Iterable[str]) -> list[SinkTable]:
    """The tables holding the records of ``streams``: each stream's own, in stream order, or the one sink."""
    if not pipeline.sink.per_stream:
        return [SinkTable(None, pipeline)]
    return [SinkTable(stream, pipeline.for_stream(stream)) for stream in sorted(set(streams))]


def run_tables(pipeline: PipelineConfig, splits: Iterable[Split]) -> list[SinkTable]:
    """The tables a run (or backfill) reading ``splits`` writes."""
    return sink_tables(pipeline, run_streams(splits))


def known_tables(
    pipeline: PipelineConfig, state: StateSnapshot, also: Callable[[], Iterable[str]] | None = None
) -> list[SinkTable]:
    """Every table the state knows (:func:`known_streams`), and those of the streams ``also`` returns (asked only
    when each stream has its own table: the one sink holds every stream's records).
    """
    if not pipeline.sink.per_stream or also is None:
        return sink_tables(pipeline, known_streams(state))
    return sink_tables(pipeline, [*known_streams(state), *also()])


def unknown_tables(pipeline: PipelineConfig, state: StateSnapshot, streams: Iterable[str]) -> list[SinkTable]:
    """The tables of ``streams`` the state does not know: a stream's table first landed after the backup the state
    was restored from (the one sink is always known).
    """
    known = {table.stream for table in known_tables(pipeline, state)}
    return [table for table in sink_tables(pipeline, streams) if table.stream not in known]


def one_sink(pipeline: PipelineConfig) -> SinkTable | None:
    """The pipeline's one sink; None when each stream has its own table."""
    tables = sink_tables(pipeline, ())
    return tables[0] if tables else None


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


def for_each_table(
    df: DataFrame,
    pipeline: PipelineConfig,
    splits: Sequence[Split],
    write: Callable[[DataFrame, SinkTable, Sequence[Split]], WriteResult],
) -> tuple[WriteResult, tuple[StreamTable, ...]]:
    """Calls ``write`` once per table of a run reading ``splits``, in stream order, with the rows of ``df`` that
    land there and the table's own splits; returns the run's result (:func:`combined`) and what each stream's
    table got. ``df`` is read once: with more than one table it is persisted (memory, spilling to disk) for the
    writes. The crash point ``between_tables`` follows every table but the last.

    Raises:
        What ``write`` raises, for the first table whose write fails; the tables before it were written.
    """
    from pyspark import StorageLevel

    tables = run_tables(pipeline, splits)
    rows = df.persist(StorageLevel.MEMORY_AND_DISK) if len(tables) > 1 else df
    results: list[tuple[SinkTable, WriteResult]] = []
    try:
        for index, table in enumerate(tables):
            results.append((table, write(table.rows(rows), table, table.own(splits))))
            if index < len(tables) - 1:
                crash_point(CrashPoint.BETWEEN_TABLES)
    finally:
        if rows is not df:
            rows.unpersist()
    return _of_run(results)


def landed(
    pipeline: PipelineConfig, splits: Sequence[Split], run_seq: int
) -> tuple[WriteResult, tuple[StreamTable, ...]]:
    """What run ``run_seq`` landed in its tables, as their logs say (a run found complete: its recovery)."""
    from dynamic_kafka.sink.incremental import landed_from_log

    return _of_run(
        [
            (table, landed_from_log(table.sink, table.dead_letters, pipeline.id, run_seq))
            for table in run_tables(pipeline, splits)
        ]
    )


def stream_pairs(splits: Iterable[Split]) -> list[tuple[str, str]]:
    """The ``(cluster_id, topic)`` pairs of ``splits``, sorted (what one table's write reports statistics for)."""
    return sorted({(s.cluster_id, s.topic) for s in splits})


def _of_run(results: Sequence[tuple[SinkTable, WriteResult]]) -> tuple[WriteResult, tuple[StreamTable, ...]]:
    """The run's result from its tables' results, and what each stream's table got (for the run's summary)."""
    tables = tuple(
        StreamTable(
            stream_id=table.stream,
            path=str(table.sink),
            records=result.records,
            dead_letters=result.dead_letters,
            sink_version=result.sink_version,
        )
        for table, result in results
        if table.stream is not None
    )
    return combined([result for _, result in results]), tables


def combined(parts: Sequence[WriteResult]) -> WriteResult:
    """One run's result from its tables' results: counts summed, event-time range widened; the sink version is
    the last table's (each table's own is in the run's ``stream_tables``). ``already_committed`` only when every
    table already held the run. The ranges are counted (``read_per_range``) only when every table's write counted
    its own: a table found holding the run read nothing.
    """
    per_topic: dict[tuple[str, str], tuple[int, int]] = {}
    schema_counts: dict[str, int] = {}
    for part in parts:
        per_topic.update(part.per_topic)  # a (cluster, topic) belongs to one table
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
        merged.update(part.read_per_range)  # a range belongs to one table
    return merged if parts else None
