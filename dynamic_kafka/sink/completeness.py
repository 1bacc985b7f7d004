"""Counting a run's records per planned range, for its completeness (``model.summary.Completeness``).

Two counts from two sources, so that a mismatch means something:

- **read**: per read range, the records the Spark read returned with an offset in ``[start, stop)``, from
  aggregates observed in the pass that writes (:func:`read_count_columns`): no second Kafka read, no extra job;
- **landed**: per range, the rows of the run in the sink and the dead-letter table (with a table per stream, each
  stream's), read from exactly the data files the commits holding the run added (:func:`landed_counts`): the
  write found those commits in the log and parsed their ``add`` actions, so counting opens neither the log nor
  any other file, and costs the same for a table's first run as for its thousandth. Only the coordinate columns
  are read, with pyarrow through delta-rs's object store (the tables' storage options: S3 works with the same
  credentials). Only inside the ranges a backfill may have landed before are the rows landed by others counted,
  from the whole table by delta-rs (its file statistics skip the files outside those ranges). JVM-free.

The offsets a range has beyond the records read are what Kafka legitimately skips (transaction markers, aborted
records under read_committed, compacted records); they are reported, never an error.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from dynamic_kafka.errors import SparkJobError
from dynamic_kafka.model.plan import TopicPartition
from dynamic_kafka.model.summary import Completeness
from dynamic_kafka.sink.commits import table_filesystem
from dynamic_kafka.sink.tables import open_delta_rs, safe_text
from dynamic_kafka.spark.schema import RUN_SEQ

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    import pyarrow.dataset as ds
    from pyspark.sql import Column

    from dynamic_kafka.model.plan import Split
    from dynamic_kafka.sink.commits import AddedFile, RunFiles
    from dynamic_kafka.storage import TableRef

MAX_COUNTED_RANGES = 1000
"""A run reading more ranges is not counted per range: each range is one conditional sum over every record read."""

# The columns counted, typed as the tables hold them (Spark's Kafka source: partition INT, offset BIGINT).
_COORDINATE_SCHEMA = pa.schema(
    [
        ("cluster", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        (RUN_SEQ, pa.int64()),
    ]
)
_COORDINATES = _COORDINATE_SCHEMA.names
_BATCH_ROWS = 65_536
"""Rows counted at a time (~2.5 MB of coordinates)."""
_BUFFER_BYTES = 1 << 20
"""How much of a column a file's reader holds at a time (0 would read a column's whole chunk in a row group)."""


def counted(splits: Sequence[Split]) -> tuple[Split, ...]:
    """The ranges a run counts: all it reads, unless they are more than :data:`MAX_COUNTED_RANGES` (then none)."""
    return tuple(splits) if len(splits) <= MAX_COUNTED_RANGES else ()


def read_count_columns(splits: Sequence[Split]) -> list[Column]:
    """Aggregates for the write's pass: per range ``i``, the records with its coordinates and an offset in it
    (``read_<i>``).

    Every record is tested against every range: the integer tests come first, so that for all but the ranges of
    the record's partition number the test stops before reading (and copying) the string columns, which a
    profile of a 1,000,000-record write showed among its largest costs (bench/RESULTS.md, "1M records through
    Connect, profiled"; docs/decisions/0045-small-runs-are-small-jobs.md).
    """
    from pyspark.sql import functions as sf

    return [
        sf.sum(
            sf.when(
                (sf.col("partition") == sf.lit(s.partition))
                & (sf.col("offset") >= sf.lit(s.start_offset))
                & (sf.col("offset") < sf.lit(s.stop_offset))
                & (sf.col("cluster") == sf.lit(s.cluster_id))
                & (sf.col("topic") == sf.lit(s.topic)),
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
    landed_files: Sequence[RunFiles],
) -> Completeness:
    """The run's completeness: ``read`` (per range, from the write's pass) against the rows the run's commits added.

    Args:
        tables: the run's tables: the sink and the dead-letter table (with a table per stream, each stream's).
        run_seq: the run.
        splits: the ranges the run read (and counted).
        read: per range, the records the read returned in it.
        overlaps: the parts of the ranges a backfill (or an earlier landing) may hold rows of.
        landed_files: per table the run landed in, the files of the commit holding the run (``WriteResult``).
    """
    started = time.monotonic()
    landed, before = landed_counts(tables, run_seq, splits, overlaps, landed_files)
    keyed = {(s.cluster_id, s.topic, s.partition): _key(s) for s in splits}
    return Completeness.compare(
        {_key(s): s.stop_offset - s.start_offset for s in splits},
        {keyed[k]: v for k, v in read.items() if k in keyed},
        landed,
        before,
        seconds=time.monotonic() - started,
    )


def landed_counts(
    tables: Sequence[TableRef],
    run_seq: int,
    splits: Sequence[Split],
    overlaps: Sequence[Split],
    landed_files: Sequence[RunFiles],
) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
    """Per range, the rows of run ``run_seq`` inside it in the files of ``landed_files``, and the rows of others
    (other runs, backfills) inside ``overlaps`` in ``tables``. JVM-free.

    Raises:
        LookupError: a ``landed_files`` entry names a table not among ``tables``.
        ValueError: a file is named by an absolute path, or holds a coordinate column of a type that does not cast
            (pyarrow's ArrowInvalid).
        ObjectStoreError: the table's object store cannot be used.
        SparkJobError: a file or a log cannot be read for another reason.
    """
    by_location = {str(table): table for table in tables}
    landed: dict[TopicPartition, int] = {}
    ours = pc.field(RUN_SEQ) == run_seq
    for files in landed_files:
        table = by_location.get(files.table)
        if table is None:
            raise LookupError(f"run {run_seq} landed files in {files.table}, which is not one of its tables")
        if not files.files:
            continue
        doing = f"counting the rows of run {run_seq} in the files of version {files.version} of {table}"
        try:
            _count(_added_files(table, files.files), ours & _within(splits), landed)
        except OSError as e:
            raise table.failure(e, doing) or SparkJobError(f"{doing} failed: {safe_text(e)}") from e
    before: dict[TopicPartition, int] = {}
    if overlaps:
        theirs = ~ours | pc.field(RUN_SEQ).is_null()
        for table in tables:
            opened = open_delta_rs(table, doing=f"counting the rows landed before run {run_seq} in {table}")
            if opened is not None:
                _count(opened.to_pyarrow_dataset(), theirs & _within(overlaps), before)
    return landed, before


def _added_files(table: TableRef, files: Sequence[AddedFile]) -> ds.Dataset:
    """The coordinate columns of ``files`` of ``table`` as one dataset; a partition column's value comes from the
    file's entry in the log (a partitioned table's files do not hold it), as Delta readers take it.
    """
    import pyarrow.dataset as ds

    paths = [_relative(table, f.path) for f in files]
    sizes = {path: f.size for path, f in zip(paths, files, strict=True) if f.size is not None}
    filesystem = table_filesystem(table, sizes)
    parquet = ds.ParquetFileFormat()
    fragments = [
        parquet.make_fragment(path, filesystem=filesystem, partition_expression=_partition_expression(f))
        for path, f in zip(paths, files, strict=True)
    ]
    return ds.FileSystemDataset(fragments, _COORDINATE_SCHEMA, parquet, filesystem)


def _partition_expression(file: AddedFile) -> pc.Expression:
    """What the file's partition values say of the coordinate columns (true when it has none of them)."""
    known = pc.scalar(True)
    for name, value in file.partition_values.items():
        if name not in _COORDINATES:
            continue
        field = _COORDINATE_SCHEMA.field(name)
        if value is None:
            known = known & pc.field(name).is_null()
        else:
            typed = value if pa.types.is_string(field.type) else int(value)
            known = known & (pc.field(name) == pa.scalar(typed, field.type))
    return known


def _relative(table: TableRef, path: str) -> str:
    """A file's path inside the table's folder, as the adds of the commits this package makes give it."""
    if "://" in path or path.startswith(("/", "file:")):
        # The Delta protocol allows an absolute path; neither delta-spark's appends nor delta-rs's write one.
        raise ValueError(f"the log of {table} names the file {path} by an absolute path; only relative ones are read")
    return path


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


def _count(dataset: ds.FileSystemDataset, selected: pc.Expression, into: dict[TopicPartition, int]) -> None:
    """Adds the rows ``selected`` in ``dataset`` to ``into`` per partition, one batch of one file at a time.

    Read whole, a run's coordinates grew its process with the run (343 MB at 1M records, 979 MB at 10M); so did a
    dataset scan's batches (pyarrow reads ahead across files and decodes a row group, up to 128 MB of a Spark
    task's file, whole) and one row group at a time (437 MB at 10M). A file's reader streams its pages instead.
    """
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    for file in dataset.get_fragments(filter=selected):
        # A partitioned table's files do not hold their partition columns: the log's values are the fragment's.
        known = ds.get_partition_keys(file.partition_expression)
        with dataset.filesystem.open_input_file(file.path) as handle:
            reader = pq.ParquetFile(handle, buffer_size=_BUFFER_BYTES)
            present = [name for name in _COORDINATES if name in reader.schema_arrow.names]
            for batch in reader.iter_batches(batch_size=_BATCH_ROWS, columns=present, use_threads=False):
                rows = _coordinates(batch, known).filter(selected)
                if rows.num_rows == 0:
                    continue
                grouped = rows.group_by(["cluster", "topic", "partition"]).aggregate([("offset", "count")])
                for cluster, topic, partition, count in zip(
                    *(grouped.column(c).to_pylist() for c in ("cluster", "topic", "partition", "offset_count")),
                    strict=True,
                ):
                    key = TopicPartition(cluster_id=cluster, topic=topic, partition=int(partition))
                    into[key] = into.get(key, 0) + int(count)


def _coordinates(batch: pa.RecordBatch, known: Mapping[str, object]) -> pa.Table:
    """``batch``'s coordinate columns typed as :data:`_COORDINATE_SCHEMA`; a column the file lacks is its partition
    value from ``known``, else null (as a dataset scan fills it).
    """
    names = batch.schema.names
    columns = [
        batch.column(field.name)
        if field.name in names
        else pa.repeat(pa.scalar(known.get(field.name), field.type), batch.num_rows)
        for field in _COORDINATE_SCHEMA
    ]
    return pa.Table.from_arrays(
        [c.cast(f.type) for c, f in zip(columns, _COORDINATE_SCHEMA, strict=True)], schema=_COORDINATE_SCHEMA
    )


def _key(split: Split) -> TopicPartition:
    return TopicPartition(cluster_id=split.cluster_id, topic=split.topic, partition=split.partition)
