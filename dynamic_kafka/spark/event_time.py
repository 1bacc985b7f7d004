"""A record's event time: the pipeline's ``event_time`` expression over the sink's columns, else the Kafka timestamp.

The expression is Spark SQL (``value.placed_at``, ``timestamp_millis(value.ts_ms)``, ``to_timestamp(placed_on)``)
and must give a TIMESTAMP, TIMESTAMP_NTZ or DATE, read as a TIMESTAMP. It is checked before a write
(:func:`check_event_time`, from :func:`dynamic_kafka.protocol.prepare.prepare_write`) by Spark's analysis of it over the
rows the run writes, so no job runs and nothing is written when it does not parse, names a missing column, or has
another type. A record whose expression is null (undecodable, or the field is null) has no event time: the run's
min/max skip it, and a backfill window falls back to its Kafka timestamp.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dynamic_kafka.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import Column, SparkSession

    from dynamic_kafka.config.models import PipelineConfig
    from dynamic_kafka.decoding.prepared import PreparedDecoding

_TIME_TYPES = ("timestamp", "timestamp_ntz", "date")


def event_time_column(expression: str | None) -> Column:
    """The event time as a TIMESTAMP column: ``expression`` cast, or the Kafka ``timestamp`` when None."""
    from pyspark.sql import functions as sf

    return sf.col("timestamp") if expression is None else sf.expr(expression).cast("timestamp")


def window_column(expression: str | None) -> Column:
    """What a backfill window filters on: the event time, else (null event time, or no expression) the Kafka
    timestamp, so a record that does not decode still lands in the dead-letter table of its window.
    """
    from pyspark.sql import functions as sf

    return sf.coalesce(event_time_column(expression), sf.col("timestamp"))


def check_event_time(spark: SparkSession, pipeline: PipelineConfig, prepared: PreparedDecoding | None) -> None:
    """Refuses an ``event_time`` that Spark cannot analyse over the rows the pipeline writes, or that is not a time
    (no job runs).

    Raises:
        ConfigError: the expression does not parse, names a column the rows lack, or has another type; names the
            pipeline and the expression, with Spark's first line.
    """
    expression = pipeline.event_time
    if expression is None:
        return
    from pyspark.errors import PySparkException
    from pyspark.sql import functions as sf

    from dynamic_kafka.decoding.prepared import value_column_decoding
    from dynamic_kafka.sink.tables import sink_rows
    from dynamic_kafka.spark.reader import empty_output

    decoding = prepared or value_column_decoding(pipeline)
    rows = sink_rows(decoding.decode(empty_output(spark)), 0)
    hint = (
        "Write a Spark SQL expression over the sink's columns (cluster, topic, partition, offset, timestamp, key, "
        "value or the decoded fields) that gives a TIMESTAMP, e.g. 'value.placed_at' or "
        "'timestamp_millis(value.ts_ms)', or remove `event_time` to use the Kafka timestamp. Nothing was written."
    )
    try:
        found = rows.select(sf.expr(expression).alias("event_time")).schema["event_time"].dataType
    except PySparkException as e:
        first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(
            f"pipeline {pipeline.id!r}: event_time {expression!r} cannot be evaluated over the rows it writes: "
            f"{first_line}",
            hint=hint,
        ) from e
    if found.typeName() not in _TIME_TYPES:
        raise ConfigError(
            f"pipeline {pipeline.id!r}: event_time {expression!r} is a {found.simpleString()}, not a timestamp.",
            hint=hint,
        )
