"""Writes read records into the pipeline's Delta sink (and dead-letter table), idempotently.

Invariants:

- Incremental runs append with Delta's idempotent-write options ``txnAppId`` = pipeline id and ``txnVersion`` =
  ``run_seq``: Delta skips a write whose ``(app id, version)`` its log already holds, so re-executing a run after
  a crash never duplicates rows.
- Where a run's ranges overlap what a backfill covered (``overlaps``, from the state's backfill frontier), the
  run's rows are left-anti-joined with the sink's (and dead-letter table's) rows in those ranges only, inside the
  same job and the sink's own write transaction (so Delta also checks that read against a concurrent MERGE).
  Without overlaps the append is blind: no sink read at all.
- The dead-letter table is written first, the sink last (both with the same txn), so "the sink holds txn
  ``run_seq``" means the whole run's data is in (:func:`committed_txn_version`, JVM-free, is the recovery check).
- Undecodable records never vanish: they go to the dead-letter table (``on_decode_error: dead_letter``) or the
  run fails with nothing written to the sink (``fail``).
- Kafka is read once per write: with two outputs the decoded frame is persisted (memory, spilling to disk) and
  unpersisted after; statistics come from ``DataFrame.observe`` during that same pass, never from a second job.
- Time-window backfills MERGE on ``(cluster, topic, partition, offset)``, inserting only unseen records, so
  overlapping backfills and incremental runs never duplicate.

Sink schema (Spark's Kafka column names): ``key`` (binary, or string per ``key_format``), ``value`` (binary,
string, or a struct per ``value_schema``), ``topic``, ``partition``, ``offset``, ``timestamp``, ``timestampType``,
``headers``, ``cluster``, ``stream``, ``_run_seq`` (bigint; null for backfill rows unless the caller gives one).
Dead-letter schema: ``cluster, stream, topic, partition, offset, timestamp, timestampType, key, value`` (raw
bytes), ``headers, error, _run_seq``.

Layout: tables are not partitioned (a partition column would multiply small files per run; runs are bounded and
readers filter on ``cluster``/``topic``/``timestamp`` through file statistics). Tables this module creates collect
statistics on the coordinate columns only (``delta.dataSkippingStatsColumns``), so MERGE and coordinate lookups
skip files however wide a JSON ``value`` struct is.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from dynamic_kafka.config import PipelineConfig
from dynamic_kafka.errors import DecodeError, SparkJobError
from dynamic_kafka.plan.model import Split
from dynamic_kafka.secrets import mask_secrets
from dynamic_kafka.spark.decode import DECODE_ERROR, RAW_KEY, RAW_VALUE, UndecodableRecordError, can_fail, decode

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, Observation, SparkSession

logger = logging.getLogger(__name__)

SINK_COLUMNS = (
    "key",
    "value",
    "topic",
    "partition",
    "offset",
    "timestamp",
    "timestampType",
    "headers",
    "cluster",
    "stream",
    "_run_seq",
)
DEAD_LETTER_COLUMNS = (
    "cluster",
    "stream",
    "topic",
    "partition",
    "offset",
    "timestamp",
    "timestampType",
    "key",
    "value",
    "headers",
    "error",
    "_run_seq",
)
_STATS_PROPERTY = "delta.dataSkippingStatsColumns"
STATS_COLUMNS = "cluster,stream,topic,partition,offset,timestamp,timestampType,_run_seq"
MERGE_KEYS = ("cluster", "topic", "partition", "offset")

# How long an observation may lag behind the action that fills it (it is normally set before the action returns).
_OBSERVATION_WAIT_S = 30.0
_DECODE_MARKER = "dynamic-kafka-undecodable"
_DECODE_MARKER_RE = re.compile(_DECODE_MARKER + r"\[(?P<json>\{.*?\})\]" + _DECODE_MARKER)


class WriteResult(BaseModel):
    """What one write did. For an incremental write, counts are records landed (``records = sink_records +
    dead_letters``); ``deduplicated`` more were read but already in the sink (or dead-letter table) from a backfill,
    and were not written again. For a merge, ``records``, ``bytes`` and ``per_topic`` count the records read and
    ``sink_records`` / ``dead_letters`` the rows inserted."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    records: int = Field(ge=0, description="Records read from Kafka (an incremental write: and landed).")
    bytes: int = Field(ge=0, description="Key plus value bytes of those records.")
    per_topic: dict[tuple[str, str], tuple[int, int]] = Field(
        default_factory=dict,
        description="(records, bytes) landed per planned (cluster_id, topic), zeros included; bytes are key + value.",
    )
    sink_records: int = Field(ge=0, description="Rows appended to (or, for a merge, inserted into) the sink.")
    dead_letters: int = Field(ge=0, description="Undecodable records written to the dead-letter table.")
    min_event_time: datetime | None = Field(None, description="Smallest Kafka timestamp read (UTC).")
    max_event_time: datetime | None = Field(None, description="Largest Kafka timestamp read (UTC).")
    sink_version: int | None = Field(None, description="Sink Delta version holding this write.")
    dead_letter_version: int | None = Field(None, description="Dead-letter table version holding this write.")
    already_committed: bool = Field(
        False, description="The sink already held this run (txn); nothing was written and the counts are zero."
    )
    deduplicated: int = Field(
        0, ge=0, description="Records read that a backfill had already landed; not written again, not counted above."
    )


def committed_txn_version(sink_path: str | Path, app_id: str) -> int | None:
    """The last ``txnVersion`` the Delta table at ``sink_path`` recorded for ``app_id`` (JVM-free, via delta-rs).

    Returns:
        The version, or None when the table does not exist or never saw ``app_id``.

    Raises:
        SparkJobError: the table exists but its log cannot be read (retriable).

    Example:
        >>> committed_txn_version("data/orders", "orders")  # doctest: +SKIP
        7
    """
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError, TableNotFoundError

    try:
        return DeltaTable(str(sink_path)).transaction_version(app_id)
    except TableNotFoundError:
        return None
    except (DeltaError, OSError) as e:
        raise SparkJobError(f"cannot read the Delta log of {sink_path}: {_safe_text(e)}") from e


def write_incremental(
    df: DataFrame,
    pipeline: PipelineConfig,
    run_seq: int,
    planned_pairs: Sequence[tuple[str, str]],
    overlaps: Sequence[Split] = (),
) -> WriteResult:
    """Lands one incremental run's records: decoded rows to the sink, undecodable ones per policy.

    Args:
        df: the reader's output (:func:`dynamic_kafka.spark.reader.read_splits`).
        pipeline: formats, policy and table paths.
        run_seq: the run; becomes the Delta ``txnVersion`` and the ``_run_seq`` column.
        planned_pairs: the ``(cluster_id, topic)`` pairs of the plan; the result has stats for each of them.
        overlaps: the ranges (parts of the read splits) a backfill may already have landed
            (:meth:`~dynamic_kafka.plan.snapshots.StateSnapshot.backfill_overlaps`); records the sink or the
            dead-letter table already holds there are skipped. Empty (the common case): a blind append.

    Returns:
        Counts, bytes, event-time range and the Delta versions. ``already_committed`` when the sink already held
        ``run_seq`` for this pipeline (then nothing was read or written).

    Raises:
        UndecodableRecordError: (a DecodeError) ``on_decode_error: fail`` and a record did not decode; the sink
            and the dead-letter table were not written.
        SparkJobError: the Kafka read or a Delta write failed (retriable: the next run recovers).

    Example:
        >>> df = read_splits(spark, plan.read_splits, clusters, isolation_level="read_committed",
        ...                  min_partitions=None)  # doctest: +SKIP
        >>> write_incremental(df, pipeline, plan.run_seq, [("east", "orders")]).records  # doctest: +SKIP
    """
    from pyspark import StorageLevel
    from pyspark.sql import Observation
    from pyspark.sql import functions as sf

    sink_path = str(pipeline.sink.path)
    dead_letter_path = str(pipeline.sink.resolved_dead_letter_path)
    app_id = pipeline.id
    with _wrapped(f"writing run {run_seq} of pipeline {app_id!r} to {sink_path}"):
        prior = committed_txn_version(sink_path, app_id)
        if prior is not None and prior >= run_seq:
            return _already_committed(sink_path, app_id, run_seq, prior)
        decoded = decode(df, pipeline)
        read_count = None
        if overlaps:
            read_count = Observation(f"dynamic_kafka_{app_id}_{run_seq}_read_{uuid.uuid4().hex[:8]}")
            decoded = decoded.observe(read_count, sf.count(sf.lit(1)).alias("read"))
            dead_lettering = can_fail(pipeline) and pipeline.on_decode_error == "dead_letter"
            decoded = _without_present(decoded, [sink_path, *([dead_letter_path] if dead_lettering else [])], overlaps)
        observation = Observation(f"dynamic_kafka_{app_id}_{run_seq}_{uuid.uuid4().hex[:8]}")
        observed = decoded.observe(observation, *_metrics(planned_pairs))
        dead_letter_version = None
        if not can_fail(pipeline):
            _append(_sink_rows(observed, run_seq), sink_path, app_id, run_seq)
        elif pipeline.on_decode_error == "fail":
            checked = observed.where(sf.coalesce(_raise_if_undecodable(), sf.lit(True)))
            try:
                _append(_sink_rows(checked, run_seq), sink_path, app_id, run_seq)
            except Exception as e:
                decode_error = _decode_error_from(e)
                if decode_error is not None:
                    raise decode_error from e
                raise
        else:
            cached = observed.persist(StorageLevel.MEMORY_AND_DISK)
            try:
                bad = cached.where(sf.col(DECODE_ERROR).isNotNull())
                _append(_dead_letter_rows(bad, run_seq), dead_letter_path, app_id, run_seq)
                good = cached.where(sf.col(DECODE_ERROR).isNull())
                if overlaps:
                    # The cached rows were deduped before the sink's transaction began: dedupe again inside it, so
                    # Delta checks that read against a concurrent backfill MERGE (a MERGE committed in between
                    # is skipped here, though then the counts still include its rows).
                    good = _without_present(good, [sink_path], overlaps)
                _append(_sink_rows(good, run_seq), sink_path, app_id, run_seq)
            finally:
                cached.unpersist()
            dead_letter_version = _txn_commit_version(dead_letter_path, app_id, run_seq)

        metrics = _observed(observation)
        if metrics is None:
            # Delta skipped the write: another writer committed this run_seq between our check and our commit.
            latest = committed_txn_version(sink_path, app_id)
            if latest is not None and latest >= run_seq:
                return _already_committed(sink_path, app_id, run_seq, latest)
            raise SparkJobError(f"the write of run {run_seq} to {sink_path} reported no metrics; it may be incomplete")
        result = _result(
            metrics,
            planned_pairs,
            sink_version=_txn_commit_version(sink_path, app_id, run_seq),
            dead_letter_version=dead_letter_version,
        )
        read = _observed(read_count) if read_count is not None else None
        if read is not None:
            result = result.model_copy(update={"deduplicated": max(0, int(read["read"]) - result.records)})
    logger.info(
        "run %d of pipeline %r: %d records (%d bytes) landed in %s at version %s, %d dead letters, %d already there "
        "from a backfill (%d ranges checked)",
        run_seq,
        app_id,
        result.sink_records,
        result.bytes,
        sink_path,
        result.sink_version,
        result.dead_letters,
        result.deduplicated,
        len(overlaps),
    )
    return result


def merge_backfill(
    df: DataFrame,
    pipeline: PipelineConfig,
    planned_pairs: Sequence[tuple[str, str]],
    *,
    start: datetime | None = None,
    end: datetime | None = None,
    run_seq: int | None = None,
) -> WriteResult:
    """Merges a backfill's records into the sink, inserting only records it does not hold yet.

    Matching is on ``(cluster, topic, partition, offset)``; undecodable records are merged the same way into the
    dead-letter table (or fail the backfill, per policy, before anything is written). The read is persisted once
    (memory, spilling to disk); one aggregate over the persisted copy gives the statistics and the bounds that
    keep the MERGE from scanning unrelated sink files (the read's event-time range and, per (cluster, topic), its
    offset range: a record already in the sink has the same coordinates and timestamp, so it is inside them).

    Args:
        df: the reader's output.
        pipeline: formats, policy and table paths.
        planned_pairs: the ``(cluster_id, topic)`` pairs of the backfill; the result has stats for each.
        start: the event-time window's start (for the log line; the planner turned it into offsets).
        end: the window's end (exclusive), likewise.
        run_seq: stored in ``_run_seq`` (null when None); backfills do not take part in the txn protocol.

    Returns:
        Counts read, rows inserted into the sink (``sink_records``), dead letters inserted, and versions.

    Raises:
        UndecodableRecordError: ``on_decode_error: fail`` and a record did not decode (the first one by
            coordinates is named); nothing was written.
        SparkJobError: the Kafka read or a Delta operation failed (retriable; merging again is harmless).

    Example:
        >>> merge_backfill(df, pipeline, [("east", "orders")], start=t0, end=t1).sink_records  # doctest: +SKIP
        0
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as sf

    sink_path = str(pipeline.sink.path)
    dead_letter_path = str(pipeline.sink.resolved_dead_letter_path)
    pairs = list(planned_pairs)
    window = f" for [{start.isoformat() if start else '...'}, {end.isoformat() if end else '...'})"
    with _wrapped(f"merging a backfill of pipeline {pipeline.id!r}{window} into {sink_path}"):
        spark = df.sparkSession
        decoded = decode(df, pipeline).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            # One row of aggregates (not data) over the persisted read, which this action materializes.
            metrics = decoded.agg(*_metrics(pairs, offsets=True)).collect()[0].asDict()
            bad_count = int(metrics["dead_letters"] or 0)
            if bad_count and pipeline.on_decode_error == "fail":
                first = (
                    decoded.where(sf.col(DECODE_ERROR).isNotNull())
                    .orderBy(*MERGE_KEYS)
                    .select(*MERGE_KEYS, DECODE_ERROR)
                    .first()
                )
                assert first is not None
                raise UndecodableRecordError(
                    cluster_id=first["cluster"],
                    topic=first["topic"],
                    partition=first["partition"],
                    offset=first["offset"],
                    reason=first[DECODE_ERROR],
                )
            scope = _merge_scope(metrics, pairs)
            dead_letter_version, dead_letters, inserted = None, 0, 0
            if bad_count:
                bad = _dead_letter_rows(decoded.where(sf.col(DECODE_ERROR).isNotNull()), run_seq)
                dead_letters = _merge(spark, bad, dead_letter_path, scope)
                dead_letter_version = _latest_version(dead_letter_path)
            if int(metrics["records"] or 0) > bad_count:
                good = _sink_rows(decoded.where(sf.col(DECODE_ERROR).isNull()), run_seq)
                inserted = _merge(spark, good, sink_path, scope)
        finally:
            decoded.unpersist()
        result = _result(
            metrics,
            pairs,
            sink_version=_latest_version(sink_path),
            dead_letter_version=dead_letter_version,
        ).model_copy(update={"sink_records": inserted, "dead_letters": dead_letters})
    logger.info(
        "backfill of pipeline %r%s: %d records read, %d new rows merged into %s (version %s), %d new dead letters",
        pipeline.id,
        window,
        result.records,
        inserted,
        sink_path,
        result.sink_version,
        dead_letters,
    )
    return result


# --- statistics -------------------------------------------------------------------------------------------------


def _metrics(pairs: Sequence[tuple[str, str]], *, offsets: bool = False) -> list[Column]:
    """Aggregates for one pass: totals, per-pair conditional sums (and offset ranges), event-time range, dead
    letters."""
    from pyspark.sql import functions as sf

    size = sf.coalesce(sf.octet_length(RAW_KEY), sf.lit(0)) + sf.coalesce(sf.octet_length(RAW_VALUE), sf.lit(0))
    columns = [
        sf.count(sf.lit(1)).alias("records"),
        sf.sum(size.cast("long")).alias("bytes"),
        sf.sum(sf.when(sf.col(DECODE_ERROR).isNotNull(), 1).otherwise(0)).alias("dead_letters"),
        sf.min(sf.unix_micros("timestamp")).alias("min_ts"),
        sf.max(sf.unix_micros("timestamp")).alias("max_ts"),
    ]
    for i, (cluster_id, topic) in enumerate(pairs):
        match = (sf.col("cluster") == sf.lit(cluster_id)) & (sf.col("topic") == sf.lit(topic))
        columns.append(sf.sum(sf.when(match, 1).otherwise(0)).alias(f"records_{i}"))
        columns.append(sf.sum(sf.when(match, size).otherwise(0).cast("long")).alias(f"bytes_{i}"))
        if offsets:
            columns.append(sf.min(sf.when(match, sf.col("offset"))).alias(f"min_offset_{i}"))
            columns.append(sf.max(sf.when(match, sf.col("offset"))).alias(f"max_offset_{i}"))
    return columns


def _observed(observation: Observation) -> dict[str, Any] | None:
    """The observation's metrics, or None if the observed plan never ran (Delta skipped the write)."""
    future = observation._jo.future() if observation._jo is not None else None
    deadline = time.monotonic() + _OBSERVATION_WAIT_S
    while future is not None and not future.isCompleted():
        if time.monotonic() > deadline:
            return None
        time.sleep(0.05)
    return observation.get if future is not None else None


def _result(
    metrics: dict[str, Any],
    pairs: Sequence[tuple[str, str]],
    *,
    sink_version: int | None,
    dead_letter_version: int | None,
) -> WriteResult:
    def number(name: str) -> int:
        return int(metrics.get(name) or 0)

    records, dead_letters = number("records"), number("dead_letters")
    return WriteResult(
        records=records,
        bytes=number("bytes"),
        per_topic={pair: (number(f"records_{i}"), number(f"bytes_{i}")) for i, pair in enumerate(pairs)},
        sink_records=records - dead_letters,
        dead_letters=dead_letters,
        min_event_time=_from_micros(metrics.get("min_ts")),
        max_event_time=_from_micros(metrics.get("max_ts")),
        sink_version=sink_version,
        dead_letter_version=dead_letter_version,
    )


def _from_micros(value: int | None) -> datetime | None:
    return None if value is None else datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=int(value))


def _already_committed(sink_path: str, app_id: str, run_seq: int, committed: int) -> WriteResult:
    logger.info(
        "sink %s already holds txn %d of pipeline %r (run %d): nothing to write", sink_path, committed, app_id, run_seq
    )
    return WriteResult(
        records=0,
        bytes=0,
        sink_records=0,
        dead_letters=0,
        sink_version=_txn_commit_version(sink_path, app_id, run_seq),
        already_committed=True,
    )


# --- rows and tables --------------------------------------------------------------------------------------------


def _sink_rows(decoded: DataFrame, run_seq: int | None) -> DataFrame:
    from pyspark.sql import functions as sf

    return decoded.select(*SINK_COLUMNS[:-1], sf.lit(run_seq).cast("long").alias("_run_seq"))


def _dead_letter_rows(decoded: DataFrame, run_seq: int | None) -> DataFrame:
    from pyspark.sql import functions as sf

    return decoded.select(
        "cluster",
        "stream",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        sf.col(RAW_KEY).alias("key"),
        sf.col(RAW_VALUE).alias("value"),
        "headers",
        sf.col(DECODE_ERROR).alias("error"),
        sf.lit(run_seq).cast("long").alias("_run_seq"),
    )


def _exists(path: str) -> bool:
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        DeltaTable(path)
    except TableNotFoundError:
        return False
    return True


def _ensure_table(spark: SparkSession, rows: DataFrame, path: str) -> None:
    """Creates the table (for a MERGE) with ``rows``' schema and coordinate-only statistics, unless it exists."""
    from delta.tables import DeltaTable

    if _exists(path):
        return
    (
        DeltaTable.createIfNotExists(spark)
        .location(path)
        .addColumns(_nullable(rows.schema))
        .property(_STATS_PROPERTY, STATS_COLUMNS)
        .execute()
    )


def _nullable(data_type: Any) -> Any:
    """``data_type`` with every field and element nullable: Delta enforces NOT NULL, and a column that happens
    to be non-null in one write (a literal ``_run_seq``) must accept nulls in another (a backfill's)."""
    from pyspark.sql.types import ArrayType, MapType, StructField, StructType

    if isinstance(data_type, StructType):
        return StructType([StructField(f.name, _nullable(f.dataType), True, f.metadata) for f in data_type.fields])
    if isinstance(data_type, ArrayType):
        return ArrayType(_nullable(data_type.elementType), True)
    if isinstance(data_type, MapType):
        return MapType(_nullable(data_type.keyType), _nullable(data_type.valueType), True)
    return data_type


def _append(rows: DataFrame, path: str, app_id: str, run_seq: int) -> None:
    """Appends with Delta's idempotent-write txn. A new table is created by this same commit (``delta.*`` write
    options become its properties), so a failed first write leaves no table behind."""
    writer = rows.write.format("delta").mode("append").option("txnAppId", app_id).option("txnVersion", run_seq)
    if not _exists(path):
        writer = writer.option(_STATS_PROPERTY, STATS_COLUMNS)
    writer.save(path)


def _merge(spark: SparkSession, rows: DataFrame, path: str, scope: str) -> int:
    """Inserts the rows of ``rows`` whose coordinates the table lacks; returns how many were inserted."""
    from delta.tables import DeltaTable

    _ensure_table(spark, rows, path)
    on = " AND ".join(f"t.`{k}` = s.`{k}`" for k in MERGE_KEYS)
    metrics = (
        DeltaTable.forPath(spark, path)
        .alias("t")
        .merge(rows.alias("s"), f"{on} AND ({scope})")
        .whenNotMatchedInsertAll()
        .execute()
        .collect()
    )
    return int(metrics[0]["num_inserted_rows"]) if metrics else 0


def _without_present(rows: DataFrame, paths: Sequence[str], overlaps: Sequence[Split]) -> DataFrame:
    """``rows`` minus those whose coordinates a table at ``paths`` already holds, looking only inside
    ``overlaps``: the tables are filtered on their coordinate columns, so Delta skips every file outside them."""
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
        if not _exists(path):
            continue
        keys = rows.sparkSession.read.format("delta").load(path).where(in_ranges).select(*MERGE_KEYS)
        present = keys if present is None else present.unionByName(keys)
    return rows if present is None else rows.join(present, on=list(MERGE_KEYS), how="left_anti")


def _any_of(conditions: Sequence[Column]) -> Column:
    """The disjunction of ``conditions`` as a balanced tree (a left-deep chain of thousands overflows the stack)."""
    if len(conditions) == 1:
        return conditions[0]
    middle = len(conditions) // 2
    return _any_of(conditions[:middle]) | _any_of(conditions[middle:])


def _merge_scope(metrics: dict[str, Any], pairs: Sequence[tuple[str, str]]) -> str:
    """A target-side predicate that holds for every sink row that can match a source row (same coordinates, so
    same timestamp), built from the source's own statistics; MERGE uses it to skip unrelated files."""
    if metrics.get("min_ts") is None:
        return "false"
    bounds = [f"t.`timestamp` BETWEEN timestamp_micros({metrics['min_ts']}) AND timestamp_micros({metrics['max_ts']})"]
    covered = sum(int(metrics.get(f"records_{i}") or 0) for i in range(len(pairs)))
    if covered == int(metrics["records"]):  # every source row belongs to a listed pair
        ranges = [
            f"(t.`cluster` = {_sql_string(c)} AND t.`topic` = {_sql_string(t)} AND t.`offset` BETWEEN "
            f"{metrics[f'min_offset_{i}']} AND {metrics[f'max_offset_{i}']})"
            for i, (c, t) in enumerate(pairs)
            if metrics.get(f"min_offset_{i}") is not None
        ]
        bounds.append("(" + " OR ".join(ranges) + ")")
    return " AND ".join(bounds)


def _sql_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _latest_version(path: str) -> int | None:
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return DeltaTable(path).version()
    except TableNotFoundError:
        return None


def _txn_commit_version(path: str, app_id: str, run_seq: int, *, max_steps: int = 50) -> int | None:
    """The table version whose commit recorded txn ``(app_id, run_seq)``; None if no version did.

    Walks back from the latest version while the txn is still visible, so a commit by another writer after ours
    does not shift the answer. Falls back to the latest version after ``max_steps`` versions.
    """
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        table = DeltaTable(path)
    except TableNotFoundError:
        return None
    version = table.version()
    if (table.transaction_version(app_id) or -1) < run_seq:
        return None
    for _ in range(max_steps):
        if version == 0:
            return 0
        table.load_as_version(version - 1)
        if (table.transaction_version(app_id) or -1) < run_seq:
            return version
        version -= 1
    return table.version()


# --- errors -----------------------------------------------------------------------------------------------------


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
        )
    )
    message = sf.concat(sf.lit(_DECODE_MARKER + "["), coordinates, sf.lit("]" + _DECODE_MARKER))
    return sf.when(sf.col(DECODE_ERROR).isNotNull(), sf.raise_error(message)).cast("boolean")


def _decode_error_from(error: BaseException) -> DecodeError | None:
    import json

    match = _DECODE_MARKER_RE.search(str(error))
    if match is None:
        return None
    fields = json.loads(match.group("json"))
    return UndecodableRecordError(
        cluster_id=str(fields["cluster_id"]),
        topic=str(fields["topic"]),
        partition=int(fields["partition"]),
        offset=int(fields["offset"]),
        reason=str(fields["reason"]),
    )


def _safe_text(error: BaseException, limit: int = 600) -> str:
    """A foreign error's first line, bounded, with anything that looks like a credential masked."""
    text = str(error).strip()
    first = text.splitlines()[0] if text else type(error).__name__
    first = mask_secrets(first)
    return first if len(first) <= limit else first[: limit - 3] + "..."


@contextmanager
def _wrapped(doing: str) -> Iterator[None]:
    """Turns py4j / Spark / Delta exceptions into SparkJobError naming what was being done (and the path)."""
    from py4j.protocol import Py4JError  # type: ignore[import-untyped]  # py4j ships no type information
    from pyspark.errors import PySparkException

    try:
        yield
    except (Py4JError, PySparkException) as e:
        raise SparkJobError(
            f"{doing} failed: {_safe_text(e)}",
            hint="Nothing was committed to the state; the next run recovers this one.",
        ) from e
