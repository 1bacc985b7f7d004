"""What a write observed: record and byte counts (per planned topic), event-time range, dead letters.

Statistics come from aggregates over the pass that writes (``DataFrame.observe`` for appends, one ``agg`` over
the persisted read for merges), never from a second read of Kafka.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from pydantic import Field

from dynamic_kafka.frozen import FrozenModel, replaced
from dynamic_kafka.sink.commits import RunFiles
from dynamic_kafka.spark.schema import DECODE_ERROR, RAW_KEY, RAW_VALUE

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pyspark.sql import Column, Observation

# How long an observation may lag behind the action that fills it (it is normally set before the action returns).
_OBSERVATION_WAIT_S = 30.0


class WriteResult(FrozenModel):
    """What one write did. For an incremental write, counts are records landed (``records = sink_records +
    dead_letters``); ``deduplicated`` more were read but already in the sink (or dead-letter table) from a backfill,
    and were not written again. For a merge, ``records``, ``bytes`` and ``per_topic`` count the records read and
    ``sink_records`` / ``dead_letters`` the rows inserted.
    """

    records: int = Field(ge=0, description="Records read from Kafka (an incremental write: and landed).")
    bytes: int = Field(ge=0, description="Key plus value bytes of those records.")
    per_topic: dict[tuple[str, str], tuple[int, int]] = Field(
        default_factory=dict,
        description="(records, bytes) landed per planned (cluster_id, topic), zeros included; bytes are key + value.",
    )
    sink_records: int = Field(ge=0, description="Rows appended to (or, for a merge, inserted into) the sink.")
    dead_letters: int = Field(ge=0, description="Undecodable records written to the dead-letter table.")
    min_event_time: datetime | None = Field(
        None, description="Smallest event time read (UTC): the ``event_time`` expression's, else the Kafka timestamp."
    )
    max_event_time: datetime | None = Field(None, description="Largest event time read (UTC), likewise.")
    sink_version: int | None = Field(None, description="Sink Delta version holding this write.")
    dead_letter_version: int | None = Field(None, description="Dead-letter table version holding this write.")
    already_committed: bool = Field(
        False, description="The sink already held this run (txn); nothing was written and the counts are zero."
    )
    deduplicated: int = Field(
        0, ge=0, description="Records read that a backfill had already landed; not written again, not counted above."
    )
    schema_counts: dict[str, int] = Field(
        default_factory=dict, description="Records per registry schema version (PreparedDecoding.count_columns)."
    )
    read_per_range: dict[tuple[str, str, int], int] | None = Field(
        None,
        description="Per counted range (cluster_id, topic, partition), the records the read returned in it, "
        "observed in the pass that wrote (None: not counted).",
    )
    landed_files: tuple[RunFiles, ...] = Field(
        (),
        description="Per table this write landed rows in (the sink, the dead-letter table), the files of the commit "
        "holding the run: what its completeness counts (empty for a merge, or a run landed by another writer).",
    )

    def with_inserted(self, sink_records: int, dead_letters: int) -> WriteResult:
        """This merge's result with the rows it inserted: ``sink_records`` into the sink, ``dead_letters`` into
        the dead-letter table.
        """
        return replaced(self, sink_records=sink_records, dead_letters=dead_letters)

    def with_read(
        self,
        deduplicated: int,
        read_per_range: dict[tuple[str, str, int], int] | None,
        landed_files: tuple[RunFiles, ...],
    ) -> WriteResult:
        """This write's result with what its read observed: the records already landed (``deduplicated``), the
        records per counted range, and the files of the commits holding the run.
        """
        return replaced(self, deduplicated=deduplicated, read_per_range=read_per_range, landed_files=landed_files)


def metric_columns(
    pairs: Sequence[tuple[str, str]], *, offsets: bool = False, event_time: str | None = None
) -> list[Column]:
    """Aggregates for one pass: totals, per-pair conditional sums, the event-time range (``event_time``, else the
    Kafka timestamp), dead letters; with ``offsets`` (a MERGE's scope) also the per-pair offset ranges and the Kafka
    timestamps' range (``min_ts``/``max_ts``). An append needs no scope: each aggregate costs every row a pass
    through the observation's accumulator.
    """
    from pyspark.sql import functions as sf

    from dynamic_kafka.spark.event_time import event_time_column

    size = sf.coalesce(sf.octet_length(RAW_KEY), sf.lit(0)) + sf.coalesce(sf.octet_length(RAW_VALUE), sf.lit(0))
    columns = [
        sf.count(sf.lit(1)).alias("records"),
        sf.sum(size.cast("long")).alias("bytes"),
        sf.sum(sf.when(sf.col(DECODE_ERROR).isNotNull(), 1).otherwise(0)).alias("dead_letters"),
        sf.min(sf.unix_micros(event_time_column(event_time))).alias("min_event"),
        sf.max(sf.unix_micros(event_time_column(event_time))).alias("max_event"),
    ]
    if offsets:
        columns.append(sf.min(sf.unix_micros("timestamp")).alias("min_ts"))
        columns.append(sf.max(sf.unix_micros("timestamp")).alias("max_ts"))
    for i, (cluster_id, topic) in enumerate(pairs):
        match = (sf.col("cluster") == sf.lit(cluster_id)) & (sf.col("topic") == sf.lit(topic))
        columns.append(sf.sum(sf.when(match, 1).otherwise(0)).alias(f"records_{i}"))
        columns.append(sf.sum(sf.when(match, size).otherwise(0).cast("long")).alias(f"bytes_{i}"))
        if offsets:
            columns.append(sf.min(sf.when(match, sf.col("offset"))).alias(f"min_offset_{i}"))
            columns.append(sf.max(sf.when(match, sf.col("offset"))).alias(f"max_offset_{i}"))
    return columns


def observed(observation: Observation) -> dict[str, Any] | None:
    """The observation's metrics, or None if the observed plan never ran (Delta skipped the write).

    In-process, the metrics arrive asynchronously from the JVM, so this waits (bounded) for the observation's
    future. Over Spark Connect they arrive with the response of the write command itself, so they are there or
    the plan never ran: ``get`` never blocks, and empty metrics (or none at all) mean "never ran".
    """
    if not hasattr(observation, "_jo"):  # a Spark Connect observation: no JVM object
        from pyspark.errors import PySparkAssertionError

        try:
            metrics: dict[str, Any] = observation.get
        except PySparkAssertionError:  # NO_OBSERVE_BEFORE_GET: no result came back
            return None
        return metrics or None
    future = observation._jo.future() if observation._jo is not None else None
    deadline = time.monotonic() + _OBSERVATION_WAIT_S
    while future is not None and not future.isCompleted():
        if time.monotonic() > deadline:
            return None
        time.sleep(0.05)
    return observation.get if future is not None else None


def write_result(
    metrics: dict[str, Any],
    pairs: Sequence[tuple[str, str]],
    *,
    sink_version: int | None,
    dead_letter_version: int | None,
) -> WriteResult:
    """The result of a write whose pass computed ``metrics`` (:func:`metric_columns` over ``pairs``)."""

    def number(name: str) -> int:
        return int(metrics.get(name) or 0)

    records, dead_letters = number("records"), number("dead_letters")
    return WriteResult(
        records=records,
        bytes=number("bytes"),
        per_topic={pair: (number(f"records_{i}"), number(f"bytes_{i}")) for i, pair in enumerate(pairs)},
        sink_records=records - dead_letters,
        dead_letters=dead_letters,
        min_event_time=_from_micros(metrics.get("min_event")),
        max_event_time=_from_micros(metrics.get("max_event")),
        sink_version=sink_version,
        dead_letter_version=dead_letter_version,
        schema_counts={k: int(v or 0) for k, v in metrics.items() if k.startswith("schema_")},
    )


def _from_micros(value: int | None) -> datetime | None:
    return None if value is None else datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=int(value))
