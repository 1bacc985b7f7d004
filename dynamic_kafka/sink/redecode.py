"""Dead-letter replay, the Spark part: decode the dead letters again and move the ones that decode now to the sink.

Invariants (the caller holds the pipeline's run lock and lease, so no run or backfill writes beside it):

- A record is identified by its coordinates ``(cluster, topic, partition, offset)``, as everywhere in the sink.
  The sink append takes only dead letters whose coordinates the sink does not hold (a left anti-join inside the
  append's own job), so no replay, repeated or resumed, lands a record twice.
- The sink is written first (one append, Delta transaction ``(<pipeline>/replay, replay_seq)``), the dead-letter
  table second (one MERGE with the same transaction): it deletes every replayed dead letter the sink now holds
  (same coordinates and timestamp: landed by this replay or by an interrupted earlier one) and gives the others
  their new error. A crash between the two leaves records in both tables; the next replay lands none of them again
  and deletes them from the dead-letter table. Nothing is lost in any order: a dead letter is deleted only once
  the sink holds it.
- A dead letter that decodes but whose coordinates the sink holds with another timestamp (another incarnation of
  a recreated topic) is neither landed nor deleted: it stays, with an error saying so.
- A replayed row keeps the ``_run_seq`` of the run that read it (null for a backfill's), as if that run had landed it.
- A bootstrap archive's dead letter may have no coordinates. It is identified by all it has instead: ``cluster``,
  ``stream``, the coordinates it has, its timestamp, its run and its key and value (decoded, as the sink holds
  them, compared as JSON so that fields a later schema added, null in older rows, do not count; raw, as the
  dead-letter table holds them). A sink row equal in all of these is the one a replay landed.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol

from dynamic_kafka.errors import SparkJobError
from dynamic_kafka.faults import CrashPoint, crash_point
from dynamic_kafka.frozen import FrozenModel, replaced
from dynamic_kafka.model.plan import Split
from dynamic_kafka.sink.commits import new_commit_id
from dynamic_kafka.sink.merge import delta_transaction
from dynamic_kafka.sink.schema_check import sink_schema
from dynamic_kafka.sink.tables import (
    append_idempotent,
    delta_path_identifier,
    latest_version,
    sink_rows,
    spark_failures,
    sql_string,
    table_exists,
)
from dynamic_kafka.spark.schema import (
    DECODE_ERROR,
    ERROR,
    MERGE_KEYS,
    OUTPUT_COLUMNS,
    RAW_KEY,
    RAW_VALUE,
    RUN_SEQ,
    STREAM,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

    from pyspark.sql import Column, DataFrame, SparkSession

    from dynamic_kafka.config.models import PipelineConfig
    from dynamic_kafka.metadata.models import ClusterMetadata
    from dynamic_kafka.storage import TableRef

logger = logging.getLogger(__name__)

_ORIGINAL_RUN = "_dk_run_seq"
_OUTCOME = "_dk_outcome"
_NEW_ERROR = "_dk_new_error"
_CONTENT = "_dk_content"
# What tells a dead letter without coordinates (a bootstrap archive's row) from another, besides its content.
_ARCHIVE_IDENTITY = (*MERGE_KEYS, STREAM, "timestamp", _ORIGINAL_RUN)
CONFLICT = "decodes now, but the sink holds another record at these coordinates (a topic recreated since?): not landed"


def replay_app_id(pipeline_id: str) -> str:
    """The Delta transaction app id of a pipeline's dead-letter replays (``/`` never occurs in a pipeline id)."""
    return f"{pipeline_id}/replay"


class ReplayCounts(FrozenModel):
    """What one replay found (and, when it wrote, did)."""

    dead_letters: int = 0
    replayed: int = 0
    already_landed: int = 0
    still_undecodable: int = 0
    conflicting: int = 0
    sink_version: int | None = None
    dead_letter_version: int | None = None

    def with_sink_version(self, version: int | None) -> ReplayCounts:
        """These counts with the sink version holding the replayed rows (None: nothing appended)."""
        return replaced(self, sink_version=version)

    def with_dead_letter_version(self, version: int | None) -> ReplayCounts:
        """These counts with the dead-letter table's version holding the replay's outcomes."""
        return replaced(self, dead_letter_version=version)


def replay(
    spark: SparkSession,
    pipeline: PipelineConfig,
    clusters: Mapping[str, ClusterMetadata],
    *,
    run_seq: int | None,
    replay_seq: int,
    write: bool,
    before_write: Callable[[], None] | None = None,
) -> ReplayCounts:
    """Decodes the dead letters (of run ``run_seq``, or all) under the pipeline's current config and, with
    ``write``, lands the decodable ones in the sink and updates the dead-letter table (see the module docstring).

    Args:
        spark: the session.
        pipeline: formats and tables.
        clusters: connection metadata of the dead letters' clusters (their schema registry, for registry formats).
        run_seq: only the dead letters of this run; None: all.
        replay_seq: the replay's number, its Delta transaction version in both tables.
        write: False only counts what a replay would do.
        before_write: called before each table's write; raises to stop there (the lease was lost).

    Raises:
        SchemaIncompatibleError: a decoded column gives a sink column another type; nothing was written.
        SparkJobError: a Delta operation failed (retriable: replaying again is harmless).
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as sf

    from dynamic_kafka.decoding.prepared import prepare_decoding
    from dynamic_kafka.spark.bootstrap_archive import with_archive_decoding

    sink, dead_letters = pipeline.sink_table, pipeline.dead_letter_table
    with _replay_failures(), spark_failures(f"replaying the dead letters of {pipeline.id!r} from {dead_letters}", sink):
        letters = spark.read.format("delta").load(dead_letters.spark_uri)
        if run_seq is not None:
            letters = letters.where(sf.col(RUN_SEQ) == sf.lit(run_seq))
        frame = letters.select(*OUTPUT_COLUMNS, sf.col(RUN_SEQ).alias(_ORIGINAL_RUN))
        ranges = _ranges(frame)
        archive_streams = sorted({r[STREAM] for r in frame.where(~_placed()).select(STREAM).distinct().collect()})
        if not ranges and not archive_streams:
            return ReplayCounts()
        decoding = prepare_decoding(pipeline, ranges, clusters)
        for stream in archive_streams:
            decoding = with_archive_decoding(decoding, pipeline, stream)
        decoded = decoding.decode(frame)
        good = decoded.where(sf.col(DECODE_ERROR).isNull())
        columns = [c for c in sink_rows(good, None).columns if c != RUN_SEQ]
        rows = good.select(*columns, sf.col(_ORIGINAL_RUN).cast("long").alias(RUN_SEQ))
        decoding.check_table(rows.schema, sink_schema(sink), str(sink))
        in_ranges = _in_ranges(ranges)
        counted = _outcomes(decoded, spark, sink, in_ranges).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            tables = _SparkReplay(spark, pipeline, decoded, counted, rows, in_ranges, ranges)
            counts = replay_steps(tables, pipeline.id, replay_seq, write=write, before_write=before_write)
        finally:
            counted.unpersist()
    if not write:
        return counts
    return counts.with_dead_letter_version(latest_version(dead_letters))


class ReplayTables(Protocol):
    """A replay's view of a pipeline's two tables, its dead letters decoded under the current config: Spark's
    (:class:`_SparkReplay`), or the protocol model's (``tests/model``). :func:`replay_steps` decides what is written
    when.
    """

    def count(self) -> ReplayCounts:
        """Each dead letter's outcome (:func:`replay_outcome`) as the sink holds them now, counted."""
        ...

    def append_fresh(self, app_id: str, replay_seq: int) -> int | None:
        """One sink append, transaction ``(app_id, replay_seq)``, of the dead letters that decode and whose record
        the sink does not hold, left out inside the append's own job; returns the sink's version after it.
        """
        ...

    def update_dead_letters(self, app_id: str, replay_seq: int) -> None:
        """One MERGE into the dead-letter table, transaction ``(app_id, replay_seq)``: deletes every dead letter the
        sink holds now (outcome ``landed``), gives the others their new error.
        """
        ...


def replay_steps(
    tables: ReplayTables,
    pipeline_id: str,
    replay_seq: int,
    *,
    write: bool,
    before_write: Callable[[], None] | None,
) -> ReplayCounts:
    """A replay's steps over ``tables`` (see the module's docstring): the outcomes counted; with ``write``, the sink
    append when some dead letter is to be replayed, then the dead-letter MERGE, each right after ``before_write``.
    A dead letter leaves its table only in the MERGE, once the sink holds it.
    """
    counts = tables.count()
    if not write:
        return counts
    app_id = replay_app_id(pipeline_id)
    sink_version = None
    if counts.replayed:
        if before_write is not None:
            before_write()
        sink_version = tables.append_fresh(app_id, replay_seq)
    crash_point(CrashPoint.REPLAY_AFTER_SINK)
    if before_write is not None:
        before_write()
    tables.update_dead_letters(app_id, replay_seq)
    return counts.with_sink_version(sink_version)


# A dead letter's outcome: the first whose fact holds (see replay_outcome), else "replay".
_OUTCOME_RULE = (("landed", "same"), ("undecodable", "undecodable"), ("conflict", "in_sink"))


def replay_outcome(*, same: bool, undecodable: bool, in_sink: bool) -> str:
    """One dead letter's outcome: ``landed`` when the sink holds its record (``same``: its coordinates and
    timestamp, or for an archive row all that identifies it), ``undecodable`` when it does not decode now,
    ``conflict`` when it decodes but the sink holds another record at its coordinates (``in_sink``), else
    ``replay``. :func:`_outcomes` computes the same rule as a Spark column.
    """
    facts = {"same": same, "undecodable": undecodable, "in_sink": in_sink}
    return next((outcome for outcome, fact in _OUTCOME_RULE if facts[fact]), "replay")


class _SparkReplay:
    """:class:`ReplayTables` by Spark: ``decoded`` the dead letters, ``counted`` their outcomes (persisted), ``rows``
    the decodable ones as sink rows, ``in_ranges`` the sink rows that can share their coordinates.
    """

    def __init__(
        self,
        spark: SparkSession,
        pipeline: PipelineConfig,
        decoded: DataFrame,
        counted: DataFrame,
        rows: DataFrame,
        in_ranges: Column,
        ranges: list[Split],
    ) -> None:
        self.spark, self.pipeline, self.decoded, self.counted = spark, pipeline, decoded, counted
        self.rows, self.in_ranges, self.ranges = rows, in_ranges, ranges

    def count(self) -> ReplayCounts:
        return _count(self.counted)

    def append_fresh(self, app_id: str, replay_seq: int) -> int | None:
        sink = self.pipeline.sink_table
        fresh = _not_in_sink(self.rows, self.spark, sink, self.in_ranges)
        append_idempotent(fresh, sink, app_id, replay_seq, commit_id=new_commit_id())
        return latest_version(sink)

    def update_dead_letters(self, app_id: str, replay_seq: int) -> None:
        outcome = _outcomes(self.decoded, self.spark, self.pipeline.sink_table, self.in_ranges)
        _update_dead_letters(self.spark, outcome, self.pipeline.dead_letter_table, app_id, replay_seq, self.ranges)


@contextmanager
def _replay_failures() -> Iterator[None]:
    """A failed Spark or Delta operation with the replay's own hint (``spark_failures`` gives a run's)."""
    try:
        yield
    except SparkJobError as e:
        if type(e) is not SparkJobError:  # a more precise error (Spark Connect down) keeps its own hint
            raise
        raise SparkJobError(
            e.message,
            hint="No dead letter was lost: one leaves the dead-letter table only once the sink holds it. Replay "
            "again; what landed already does not land twice.",
        ) from e


def _ranges(frame: DataFrame) -> list[Split]:
    """Per (cluster, topic, partition, stream) of the dead letters, the range of their offsets (a few rows)."""
    from pyspark.sql import functions as sf

    grouped = (
        frame.where(_placed())
        .groupBy("cluster", "topic", "partition", "stream")
        .agg(sf.min("offset").alias("low"), sf.max("offset").alias("high"))
    )
    return [
        Split(
            cluster_id=r["cluster"],
            topic=r["topic"],
            partition=r["partition"],
            start_offset=r["low"],
            stop_offset=r["high"] + 1,
            stream_ids=(r["stream"],),
            bootstrap_servers="",
        )
        for r in grouped.collect()
    ]


def _placed() -> Column:
    """Whether a row has all its coordinates (a bootstrap archive's may have none)."""
    from pyspark.sql import functions as sf

    return sf.col("topic").isNotNull() & sf.col("partition").isNotNull() & sf.col("offset").isNotNull()


def _content() -> Column:
    """A decoded row's key and value as JSON (fields that are null, such as ones a later schema added, left out)."""
    from pyspark.sql import functions as sf

    return sf.to_json(sf.struct("key", "value"))


def _in_ranges(ranges: list[Split]) -> Column:
    """The sink rows that can share coordinates with a dead letter (filters on coordinates: Delta skips files)."""
    from functools import reduce

    from pyspark.sql import functions as sf

    if not ranges:
        return sf.lit(False)
    conditions = [
        (sf.col("cluster") == sf.lit(s.cluster_id))
        & (sf.col("topic") == sf.lit(s.topic))
        & (sf.col("partition") == sf.lit(s.partition))
        & sf.col("offset").between(s.start_offset, s.stop_offset - 1)
        for s in ranges
    ]
    return reduce(lambda a, b: a | b, conditions)


def _sink_keys(spark: SparkSession, sink: TableRef, in_ranges: Column, *, timestamps: bool = True) -> DataFrame | None:
    """The coordinates (and timestamps) the sink holds where dead letters are; None without a sink table."""
    if not table_exists(sink):
        return None
    columns = [*MERGE_KEYS, "timestamp"] if timestamps else list(MERGE_KEYS)
    keys = spark.read.format("delta").load(sink.spark_uri).where(in_ranges).select(*columns)
    return keys if timestamps else keys.distinct()


def _outcomes(decoded: DataFrame, spark: SparkSession, sink: TableRef, in_ranges: Column) -> DataFrame:
    """Every dead letter with its outcome: ``replay`` (decodes, the sink lacks it), ``landed`` (the sink holds it),
    ``conflict`` (decodes, the sink holds other coordinates' record) or ``undecodable``, and its new error; with
    what identifies it in the dead-letter table.
    """
    from pyspark.sql import functions as sf

    identity = [*_ARCHIVE_IDENTITY, RAW_KEY, RAW_VALUE]
    letters = decoded.select(*identity, DECODE_ERROR, _content().alias(_CONTENT))
    placed, archive = letters.where(_placed()), letters.where(~_placed())
    sink_keys = _sink_keys(spark, sink, in_ranges)
    if sink_keys is None:
        joined = placed.withColumn("_dk_same", sf.lit(False)).withColumn("_dk_in_sink", sf.lit(False))
        held = archive.withColumn("_dk_same", sf.lit(False)).withColumn("_dk_in_sink", sf.lit(False))
    else:
        keys = sink_keys.groupBy(*MERGE_KEYS).agg(
            sf.collect_set("timestamp").alias("_dk_sink_ts_all"), sf.lit(True).alias("_dk_in_sink")
        )
        joined = placed.join(keys, list(MERGE_KEYS), "left").withColumn(
            "_dk_same", sf.coalesce(sf.array_contains(sf.col("_dk_sink_ts_all"), sf.col("timestamp")), sf.lit(False))
        )
        # An archive row the sink holds can only be one a replay landed: "landed", never a conflict.
        landed = _archive_sink_rows(spark, sink).distinct().withColumn("_dk_same", sf.lit(True))
        held = archive.join(landed, _same_archive_row(archive, landed), "left").select(
            *archive.columns, sf.coalesce(landed["_dk_same"], sf.lit(False)).alias("_dk_same")
        )
        held = held.withColumn("_dk_in_sink", sf.col("_dk_same"))
    facts = {
        "same": sf.col("_dk_same"),
        "undecodable": sf.col(DECODE_ERROR).isNotNull(),
        "in_sink": sf.coalesce(sf.col("_dk_in_sink"), sf.lit(False)),
    }
    # replay_outcome's rule, as a column.
    chain = sf.when(facts[_OUTCOME_RULE[0][1]], sf.lit(_OUTCOME_RULE[0][0]))
    for name, fact in _OUTCOME_RULE[1:]:
        chain = chain.when(facts[fact], sf.lit(name))
    outcome = chain.otherwise(sf.lit("replay"))
    new_error = sf.when(outcome == "conflict", sf.lit(CONFLICT)).otherwise(sf.col(DECODE_ERROR))
    chosen: list[Column | str] = [*identity, outcome.alias(_OUTCOME), new_error.alias(_NEW_ERROR)]
    return joined.select(*chosen).unionByName(held.select(*chosen))


def _archive_sink_rows(spark: SparkSession, sink: TableRef) -> DataFrame:
    """The sink's rows without coordinates (archive rows), by what identifies them (:data:`_ARCHIVE_IDENTITY`)."""
    from pyspark.sql import functions as sf

    rows = spark.read.format("delta").load(sink.spark_uri).where(~_placed())
    named = [sf.col(c).alias(f"_dk_sink_{c}") for c in _ARCHIVE_IDENTITY if c != _ORIGINAL_RUN]
    return rows.select(*named, sf.col(RUN_SEQ).alias(f"_dk_sink_{_ORIGINAL_RUN}"), _content().alias("_dk_sink_c"))


def _same_archive_row(letters: DataFrame, sink_rows: DataFrame) -> Column:
    """The join condition of a dead letter without coordinates and the sink's row of the same record."""
    from functools import reduce

    same = [letters[c].eqNullSafe(sink_rows[f"_dk_sink_{c}"]) for c in _ARCHIVE_IDENTITY]
    return reduce(lambda a, b: a & b, [*same, letters[_CONTENT].eqNullSafe(sink_rows["_dk_sink_c"])])


def _not_in_sink(rows: DataFrame, spark: SparkSession, sink: TableRef, in_ranges: Column) -> DataFrame:
    """``rows`` (sink rows to append) minus the records the sink holds: by coordinates, or, for rows without them,
    by all that identifies them.
    """
    from pyspark.sql import functions as sf

    held = _sink_keys(spark, sink, in_ranges, timestamps=False)
    if held is None:
        return rows
    placed = rows.where(_placed()).join(held, list(MERGE_KEYS), "left_anti")
    archive = rows.where(~_placed()).withColumn(_ORIGINAL_RUN, sf.col(RUN_SEQ)).withColumn(_CONTENT, _content())
    landed = _archive_sink_rows(spark, sink)
    fresh = archive.join(landed, _same_archive_row(archive, landed), "left_anti").drop(_ORIGINAL_RUN, _CONTENT)
    return placed.unionByName(fresh)


def _count(outcomes: DataFrame) -> ReplayCounts:
    """The outcomes counted (one small aggregate)."""
    from pyspark.sql import functions as sf

    found = {r[_OUTCOME]: int(r["n"]) for r in outcomes.groupBy(_OUTCOME).agg(sf.count("*").alias("n")).collect()}
    return ReplayCounts(
        dead_letters=sum(found.values()),
        replayed=found.get("replay", 0),
        already_landed=found.get("landed", 0),
        still_undecodable=found.get("undecodable", 0),
        conflicting=found.get("conflict", 0),
    )


def _update_dead_letters(
    spark: SparkSession, outcome: DataFrame, table: TableRef, app_id: str, replay_seq: int, ranges: list[Split]
) -> None:
    """One MERGE into the dead-letter table, recorded as transaction ``(app_id, replay_seq)``: the dead letters the
    sink holds are deleted, the others get their new error.
    """
    placed = " AND ".join(f"s.`{k}` IS NOT NULL" for k in MERGE_KEYS)
    on = " AND ".join(f"t.`{k}` = s.`{k}`" for k in MERGE_KEYS)
    # Bounds the target to the replayed offsets, so the MERGE rewrites only files that can hold them.
    scope = (
        " OR ".join(
            f"(t.`cluster` = {sql_string(s.cluster_id)} AND t.`topic` = {sql_string(s.topic)} AND t.`partition` = "
            f"{s.partition} AND t.`offset` BETWEEN {s.start_offset} AND {s.stop_offset - 1})"
            for s in ranges
        )
        or "FALSE"
    )
    archive = " AND ".join(
        [
            *(f"t.`{k}` <=> s.`{k}`" for k in (*MERGE_KEYS, STREAM, "timestamp")),
            f"t.`{RUN_SEQ}` <=> s.`{_ORIGINAL_RUN}`",
            f"t.`key` <=> s.`{RAW_KEY}`",
            f"t.`value` <=> s.`{RAW_VALUE}`",
        ]
    )
    on = f"({placed} AND {on} AND ({scope})) OR (NOT ({placed}) AND {archive})"
    text = (
        f"MERGE INTO {delta_path_identifier(table)} AS t USING __source__ AS s ON {on} "
        f"WHEN MATCHED AND s.`{_OUTCOME}` = 'landed' THEN DELETE "
        f"WHEN MATCHED AND NOT (t.`{ERROR}` <=> s.`{_NEW_ERROR}`) THEN UPDATE SET t.`{ERROR}` = s.`{_NEW_ERROR}`"
    )
    query = text.replace("{", "{{").replace("}", "}}").replace("__source__", "{source}", 1)
    # Copies of one archive row are one target row's match each: one source row for them all.
    source = outcome.where(_placed()).unionByName(outcome.where(~_placed()).distinct())
    with delta_transaction(spark, app_id, replay_seq):
        spark.sql(query, source=source).collect()
