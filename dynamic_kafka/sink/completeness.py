"""Counting a run's records per planned range, for its completeness (``model.summary.Completeness``).

Two counts from two sources, so that a mismatch means something:

- **read**: per read range, the records the Spark read returned with an offset in ``[start, stop)``, from
  aggregates observed in the pass that writes (:func:`read_count_columns`): no second Kafka read, no extra job;
- **landed**: per range, the rows of the run in the sink and the dead-letter table after their commits, and (only
  inside the ranges a backfill may have landed before) the rows landed by others, read from the tables by
  delta-rs (:func:`landed_counts`): only the files whose ``_run_seq`` statistics can hold the run are opened, and
  only the coordinate columns. JVM-free.

The offsets a range has beyond the records read are what Kafka legitimately skips (transaction markers, aborted
records under read_committed, compacted records); they are reported, never an error.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pyarrow.compute as pc

from dynamic_kafka.model.plan import TopicPartition
from dynamic_kafka.model.summary import Completeness
from dynamic_kafka.sink.tables import open_delta_rs

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    import pyarrow as pa
    from pyspark.sql import Column

    from dynamic_kafka.model.plan import Split
    from dynamic_kafka.storage import TableRef

MAX_COUNTED_RANGES = 1000
"""A run reading more ranges is not counted per range: each range is one conditional sum over every record read."""

_COORDINATES = ["cluster", "topic", "partition", "offset", "_run_seq"]


def counted(splits: Sequence[Split]) -> tuple[Split, ...]:
    """The ranges a run counts: all it reads, unless they are more than :data:`MAX_COUNTED_RANGES` (then none)."""
    return tuple(splits) if len(splits) <= MAX_COUNTED_RANGES else ()


def read_count_columns(splits: Sequence[Split]) -> list[Column]:
    """Aggregates for the write's pass: per range ``i``, the records with its coordinates and an offset in it
    (``read_<i>``).
    """
    from pyspark.sql import functions as sf

    return [
        sf.sum(
            sf.when(
                (sf.col("cluster") == sf.lit(s.cluster_id))
                & (sf.col("topic") == sf.lit(s.topic))
                & (sf.col("partition") == sf.lit(s.partition))
                & (sf.col("offset") >= sf.lit(s.start_offset))
                & (sf.col("offset") < sf.lit(s.stop_offset)),
                1,
            ).otherwise(0)
        ).alias(f"read_{i}")
        for i, s in enumerate(splits)
    ]


def read_counts(metrics: Mapping[str, object], splits: Sequence[Split]) -> dict[tuple[str, str, int], int]:
    """The per-range counts of :func:`read_count_columns` from the observed metrics."""
    return {(s.cluster_id, s.topic, s.partition): int(str(metrics.get(f"read_{i}") or 0)) for i, s in enumerate(splits)}


def measure(
    tables: Sequence[TableRef],
    run_seq: int,
    splits: Sequence[Split],
    read: Mapping[tuple[str, str, int], int],
    overlaps: Sequence[Split],
) -> Completeness:
    """The run's completeness: ``read`` (per range, from the write's pass) against the rows the tables hold.

    Args:
        tables: the sink and the dead-letter table.
        run_seq: the run.
        splits: the ranges the run read (and counted).
        read: per range, the records the read returned in it.
        overlaps: the parts of the ranges a backfill (or an earlier landing) may hold rows of.
    """
    started = time.monotonic()
    landed, before = landed_counts(tables, run_seq, splits, overlaps)
    keyed = {(s.cluster_id, s.topic, s.partition): _key(s) for s in splits}
    return Completeness.compare(
        {_key(s): s.stop_offset - s.start_offset for s in splits},
        {keyed[k]: v for k, v in read.items() if k in keyed},
        landed,
        before,
        seconds=time.monotonic() - started,
    )


def landed_counts(
    tables: Sequence[TableRef], run_seq: int, splits: Sequence[Split], overlaps: Sequence[Split]
) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
    """Per range, the rows of run ``run_seq`` in ``tables`` inside it, and the rows of others (other runs,
    backfills) inside ``overlaps``. JVM-free.
    """
    landed: dict[TopicPartition, int] = {}
    before: dict[TopicPartition, int] = {}
    ours = pc.field("_run_seq") == run_seq
    theirs = ~ours | pc.field("_run_seq").is_null()
    for table in tables:
        opened = open_delta_rs(table, doing=f"counting the rows of run {run_seq} in {table}")
        if opened is None:
            continue
        dataset = opened.to_pyarrow_dataset()
        _count(dataset.to_table(columns=_COORDINATES, filter=ours & _within(splits)), landed)
        if overlaps:
            _count(dataset.to_table(columns=_COORDINATES, filter=theirs & _within(overlaps)), before)
    return landed, before


def _within(ranges: Sequence[Split]) -> pc.Expression:
    """Rows whose coordinates lie in one of ``ranges`` (a balanced disjunction: thousands do not nest deeply)."""
    if len(ranges) == 1:
        s = ranges[0]
        return (
            (pc.field("cluster") == s.cluster_id)
            & (pc.field("topic") == s.topic)
            & (pc.field("partition") == s.partition)
            & (pc.field("offset") >= s.start_offset)
            & (pc.field("offset") < s.stop_offset)
        )
    middle = len(ranges) // 2
    return _within(ranges[:middle]) | _within(ranges[middle:])


def _count(rows: pa.Table, into: dict[TopicPartition, int]) -> None:
    if rows.num_rows == 0:
        return
    grouped = rows.group_by(["cluster", "topic", "partition"]).aggregate([("offset", "count")])
    for cluster, topic, partition, count in zip(
        *(grouped.column(c).to_pylist() for c in ("cluster", "topic", "partition", "offset_count")), strict=True
    ):
        key = TopicPartition(cluster_id=cluster, topic=topic, partition=int(partition))
        into[key] = into.get(key, 0) + int(count)


def _key(split: Split) -> TopicPartition:
    return TopicPartition(cluster_id=split.cluster_id, topic=split.topic, partition=split.partition)
