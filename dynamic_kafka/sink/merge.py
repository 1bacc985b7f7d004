"""Backfills: MERGE a time window's records into the sink, inserting only records it does not hold yet.

Invariants:

- Time-window backfills MERGE on ``(cluster, topic, partition, offset)``
  (:data:`~dynamic_kafka.spark.schema.MERGE_KEYS`), inserting only unseen records, so overlapping backfills and
  incremental runs never duplicate.
- Undecodable records are merged the same way into the dead-letter table, or fail the backfill (per
  ``on_decode_error``) before anything is written.
- Each MERGE of a backfill that raised a frontier records the backfill's sequence number as a Delta transaction
  (app id ``<pipeline>/backfill``): the sink then tells which backfills landed, so a state restored from before
  one is refused until realigned (``dynamic_kafka.protocol.realign``).
- Kafka is read once: the read is persisted (memory, spilling to disk) and one aggregate over it gives both the
  statistics and the bounds that keep the MERGE from scanning unrelated sink files.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

from dynamic_kafka.decoding.prepared import PreparedDecoding, value_column_decoding
from dynamic_kafka.errors import UndecodableRecordError
from dynamic_kafka.sink.metrics import WriteResult, metric_columns, write_result
from dynamic_kafka.sink.schema_check import sink_schema
from dynamic_kafka.sink.tables import (
    backfill_app_id,
    dead_letter_rows,
    delta_path_identifier,
    ensure_table,
    latest_version,
    sink_rows,
    sink_rows_schema,
    spark_failures,
    sql_string,
)
from dynamic_kafka.spark.event_time import window_column
from dynamic_kafka.spark.schema import DECODE_ERROR, MERGE_KEYS
from dynamic_kafka.spark.session import session_settings

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from contextlib import AbstractContextManager
    from datetime import datetime

    from pyspark.sql import DataFrame, SparkSession

    from dynamic_kafka.config.models import PipelineConfig
    from dynamic_kafka.storage import TableRef

logger = logging.getLogger(__name__)

# Delta's session settings that make a DML command (MERGE, UPDATE, DELETE) record, and skip if already recorded,
# a transaction (app id, version), as the txnAppId / txnVersion write options do for appends.
_TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
_TXN_VERSION = "spark.databricks.delta.write.txnVersion"


def merge_backfill(
    df: DataFrame,
    pipeline: PipelineConfig,
    planned_pairs: Sequence[tuple[str, str]],
    *,
    start: datetime | None = None,
    end: datetime | None = None,
    run_seq: int | None = None,
    prepared: PreparedDecoding | None = None,
    backfill_sequence: int | None = None,
    before_write: Callable[[], None] | None = None,
    event_time: str | None = None,
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
        prepared: the backfill's decoding (:func:`~dynamic_kafka.decoding.prepared.prepare_decoding`); None: the
            pipeline's streams all land in the ``value`` column.
        backfill_sequence: the backfill's number from ``StateStore.record_backfill``; each MERGE records it as the
            Delta transaction ``backfill_app_id(pipeline.id)``, so a state restored from before this backfill is
            recognised (``dynamic_kafka.protocol.realign``). None: the backfill raised no frontier; nothing is recorded.
        before_write: called right before each MERGE; raises to stop the backfill there (its lease was lost).
        event_time: the pipeline's ``event_time`` expression. Set, the decoded rows are kept when their event time
            (else, when it is null, their Kafka timestamp) is in ``[start, end)``, and the event-time range measures
            it; None: the caller filtered on the Kafka timestamp.

    Returns:
        Counts read, rows inserted into the sink (``sink_records``), dead letters inserted, and versions.

    Raises:
        UndecodableRecordError: ``on_decode_error: fail`` and a record did not decode (the first one by
            coordinates is named); nothing was written.
        DynamicKafkaError: what ``before_write`` raised; the tables merged before stay merged.
        SparkJobError: the Kafka read or a Delta operation failed (retriable; merging again is harmless).

    Example:
        >>> merge_backfill(df, pipeline, [("east", "orders")], start=t0, end=t1).sink_records  # doctest: +SKIP
        0
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as sf

    sink_path = pipeline.sink_table
    dead_letter_path = pipeline.dead_letter_table
    pairs = list(planned_pairs)
    window = f" for [{start.isoformat() if start else '...'}, {end.isoformat() if end else '...'})"
    with spark_failures(f"merging a backfill of pipeline {pipeline.id!r}{window} into {sink_path}", sink_path):
        decoding = prepared or value_column_decoding(pipeline)
        decoded_frame = decoding.decode(df)
        if event_time is not None and start is not None and end is not None:
            moment = window_column(event_time)
            decoded_frame = decoded_frame.where((moment >= sf.lit(start)) & (moment < sf.lit(end)))
        written = sink_rows_schema(decoded_frame.schema, run_seq)
        decoding.check_table(written, sink_schema(sink_path), str(sink_path))
        decoded = decoded_frame.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            # One row of aggregates (not data) over the persisted read, which this action materializes.
            metrics = decoded.agg(*metric_columns(pairs, offsets=True, event_time=event_time)).collect()[0].asDict()
            bad_count = int(metrics["dead_letters"] or 0)
            merges = _SparkMerges(decoded, pipeline, _merge_scope(metrics, pairs), run_seq)
            dead_letters, inserted = merge_tables(
                merges,
                pipeline,
                records=int(metrics["records"] or 0),
                undecodable=bad_count,
                backfill_sequence=backfill_sequence,
                before_write=before_write,
            )
            dead_letter_version = latest_version(dead_letter_path) if bad_count else None
        finally:
            decoded.unpersist()
        result = write_result(
            metrics,
            pairs,
            sink_version=latest_version(sink_path),
            dead_letter_version=dead_letter_version,
        ).with_inserted(inserted, dead_letters)
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


class MergeTables(Protocol):
    """The MERGEs of one backfill's decoded rows into a pipeline's sink or dead-letter table: Spark's
    (:class:`_SparkMerges`), or the protocol model's tables (``tests/model``). :func:`merge_tables` decides which
    are made, in which order, and the checks before each.
    """

    def first_undecodable(self) -> UndecodableRecordError:
        """The error naming the first undecodable row (there is one)."""
        ...

    def merge(self, *, dead_letters: bool, marker: tuple[str, int] | None) -> int:
        """MERGEs the undecodable rows into the dead-letter table (``dead_letters``) or the others into the sink,
        inserting those whose coordinates the table lacks, with ``marker`` as the commit's Delta transaction;
        returns how many were inserted.
        """
        ...


def merge_tables(
    tables: MergeTables,
    pipeline: PipelineConfig,
    *,
    records: int,
    undecodable: int,
    backfill_sequence: int | None,
    before_write: Callable[[], None] | None,
) -> tuple[int, int]:
    """A backfill's MERGEs of ``records`` rows read, ``undecodable`` of them undecodable: the dead letters first,
    then the sink, each right after ``before_write``; under ``on_decode_error: fail`` an undecodable row fails the
    backfill before anything is merged. Each MERGE records the backfill's sequence (None: none). Returns (dead
    letters inserted, sink rows inserted).

    Raises:
        UndecodableRecordError: ``on_decode_error: fail`` and a row did not decode; nothing was merged.
        DynamicKafkaError: what ``before_write`` raised; the table merged before stays merged.
    """
    if undecodable and pipeline.on_decode_error == "fail":
        raise tables.first_undecodable()
    marker = None if backfill_sequence is None else (backfill_app_id(pipeline.id), backfill_sequence)
    dead_letters = inserted = 0
    if undecodable:
        if before_write is not None:
            before_write()
        dead_letters = tables.merge(dead_letters=True, marker=marker)
    if records > undecodable:
        if before_write is not None:
            before_write()
        inserted = tables.merge(dead_letters=False, marker=marker)
    return dead_letters, inserted


class _SparkMerges:
    """:class:`MergeTables` by Spark: Delta's MERGE of the persisted decoded read, bounded by ``scope``."""

    def __init__(self, decoded: DataFrame, pipeline: PipelineConfig, scope: str, run_seq: int | None) -> None:
        self.decoded, self.pipeline, self.scope, self.run_seq = decoded, pipeline, scope, run_seq

    def first_undecodable(self) -> UndecodableRecordError:
        return _first_undecodable(self.decoded)

    def merge(self, *, dead_letters: bool, marker: tuple[str, int] | None) -> int:
        from pyspark.sql import functions as sf

        spark = self.decoded.sparkSession
        if dead_letters:
            bad = dead_letter_rows(self.decoded.where(sf.col(DECODE_ERROR).isNotNull()), self.run_seq)
            return _merge(spark, bad, self.pipeline.dead_letter_table, self.scope, marker)
        good = sink_rows(self.decoded.where(sf.col(DECODE_ERROR).isNull()), self.run_seq)
        return _merge(spark, good, self.pipeline.sink_table, self.scope, marker, self.pipeline.sink.partition_by)


def _first_undecodable(decoded: DataFrame) -> UndecodableRecordError:
    """The error naming the first undecodable record by coordinates (``decoded`` holds at least one)."""
    from pyspark.sql import functions as sf

    first = (
        decoded.where(sf.col(DECODE_ERROR).isNotNull()).orderBy(*MERGE_KEYS).select(*MERGE_KEYS, DECODE_ERROR).first()
    )
    assert first is not None
    return UndecodableRecordError(
        cluster_id=first["cluster"],
        topic=first["topic"],
        partition=first["partition"],
        offset=first["offset"],
        reason=first[DECODE_ERROR],
    )


def _merge(
    spark: SparkSession,
    rows: DataFrame,
    path: TableRef,
    scope: str,
    marker: tuple[str, int] | None,
    partition_by: tuple[str, ...] = (),
) -> int:
    """Inserts the rows of ``rows`` whose coordinates the table lacks; returns how many were inserted. A table
    that does not exist yet is created first, partitioned by ``partition_by``.

    Delta's MERGE by SQL with the rows as a DataFrame argument, in both modes: one code path, and over Spark
    Connect Delta's Python ``DeltaTable.merge`` would need the Delta Connect server plugin, which Maven Central
    does not serve for this Spark/Delta pair (docs/spark-connect.md). The metrics row is the same.

    ``marker`` (app id, version) is recorded as the commit's Delta transaction, through the session settings that
    make Delta's DML idempotent. Delta skips a MERGE whose version its log already holds for the app id (it
    returns no metrics row): that only happens when a later backfill committed first, whose higher number already
    marks the sink, so the MERGE is then made without a marker. Nothing is ever skipped.
    """
    ensure_table(spark, rows, path, partition_by)
    on = " AND ".join(f"t.`{k}` = s.`{k}`" for k in MERGE_KEYS)
    # WITH SCHEMA EVOLUTION: new columns join the table, as appends do with mergeSchema.
    # spark.sql formats the text with str.format: braces of the text itself are doubled, {source} is the rows.
    text = f"MERGE WITH SCHEMA EVOLUTION INTO {delta_path_identifier(path)} AS t USING __source__ AS s "
    text += f"ON {on} AND ({scope}) WHEN NOT MATCHED THEN INSERT *"
    query = text.replace("{", "{{").replace("}", "}}").replace("__source__", "{source}", 1)
    if marker is not None:
        with delta_transaction(spark, *marker):
            metrics = spark.sql(query, source=rows).collect()
        if metrics:
            return int(metrics[0]["num_inserted_rows"])
        logger.info("MERGE into %s: a later backfill marked the table first; merging without a marker", path)
    metrics = spark.sql(query, source=rows).collect()
    return int(metrics[0]["num_inserted_rows"]) if metrics else 0


def delta_transaction(spark: SparkSession, app_id: str, version: int) -> AbstractContextManager[None]:
    """Delta records (app_id, version) as the transaction of the DML commands run inside (session settings, put
    back after: the session may be shared).
    """
    return session_settings(spark, {_TXN_APP_ID: app_id, _TXN_VERSION: str(version)})


def _merge_scope(metrics: dict[str, Any], pairs: Sequence[tuple[str, str]]) -> str:
    """A target-side predicate that holds for every sink row that can match a source row (same coordinates, so
    same timestamp), built from the source's own statistics; MERGE uses it to skip unrelated files.
    """
    if metrics.get("min_ts") is None:
        return "false"
    bounds = [f"t.`timestamp` BETWEEN timestamp_micros({metrics['min_ts']}) AND timestamp_micros({metrics['max_ts']})"]
    covered = sum(int(metrics.get(f"records_{i}") or 0) for i in range(len(pairs)))
    if covered == int(metrics["records"]):  # every source row belongs to a listed pair
        ranges = [
            f"(t.`cluster` = {sql_string(c)} AND t.`topic` = {sql_string(t)} AND t.`offset` BETWEEN "
            f"{metrics[f'min_offset_{i}']} AND {metrics[f'max_offset_{i}']})"
            for i, (c, t) in enumerate(pairs)
            if metrics.get(f"min_offset_{i}") is not None
        ]
        bounds.append("(" + " OR ".join(ranges) + ")")
    return " AND ".join(bounds)
