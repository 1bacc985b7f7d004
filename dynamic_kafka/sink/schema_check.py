"""Schema checks made before a run is planned: the pipeline's ``value.schema`` parses, and the sink's existing
schema takes what the pipeline writes.

Both problems used to appear only in the Spark write, after the plan was in the state, as a retriable failure
that every retry repeated. Checked before ``begin_run`` they are a :class:`~dynamic_kafka.errors.SchemaMismatchError`
(not retriable) naming the columns, and nothing is planned.

The sink's schema is read from its Delta log with delta-rs; the schema the pipeline writes is Spark's analysis of
the real decode code over an empty frame (no job runs), shaped into the sink's columns as the write shapes its rows
(:func:`~dynamic_kafka.sink.tables.sink_rows_schema`), so the check cannot drift from the write.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from dynamic_kafka.errors import ConfigError, SchemaMismatchError, SparkJobError
from dynamic_kafka.sink.tables import open_delta_rs, safe_text

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pyspark.sql import SparkSession
    from pyspark.sql.types import DataType, StructType

    from dynamic_kafka.config.models import PipelineConfig
    from dynamic_kafka.decoding.prepared import PreparedDecoding
    from dynamic_kafka.storage import TableRef


def written_schema(
    spark: SparkSession, pipeline: PipelineConfig, prepared: PreparedDecoding | None = None
) -> StructType:
    """The schema of the rows an incremental run of ``pipeline`` appends to its sink (no Spark job).

    Raises:
        SchemaMismatchError: ``value.schema`` is not a valid Spark DDL list of fields, or ``value.expression`` does
            not parse or names what a record does not have.
    """
    from pyspark.errors import PySparkException

    from dynamic_kafka.decoding.prepared import value_column_decoding
    from dynamic_kafka.sink.tables import sink_rows_schema
    from dynamic_kafka.spark.reader import empty_output

    try:
        empty = empty_output(spark)
        return sink_rows_schema((prepared or value_column_decoding(pipeline)).decode(empty).schema, 0)
    except ConfigError as e:
        raise SchemaMismatchError(
            f"pipeline {pipeline.id!r}: {e}",
            hint="Fix value.schema (or the schema of the stream's formats entry); nothing was planned or written.",
        ) from e
    except PySparkException as e:
        formats = (pipeline.value, *pipeline.formats.values())
        expressions = {f.expression for f in formats if f.expression is not None}
        if not expressions:
            raise
        said = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise SchemaMismatchError(
            f"pipeline {pipeline.id!r}: value expression {', '.join(map(repr, sorted(expressions)))} is not a "
            f"Spark SQL expression over the record's columns: {said}",
            hint="Fix value.expression, or the formats entry's (it sees key, value, headers, topic, partition, offset, "
            "timestamp); nothing was planned or written.",
        ) from e


def sink_schema(sink: TableRef) -> StructType | None:
    """The schema of the sink's Delta table from its log (delta-rs); None when there is no table."""
    from pyspark.sql.types import StructType

    table = open_delta_rs(sink, doing=f"reading the schema of {sink}")
    if table is None:
        return None
    return StructType.fromJson(json.loads(table.schema().to_json()))


def schema_differences(written: StructType, existing: StructType) -> list[str]:
    """Every written column (nested fields included) that the existing table lacks or types differently, as
    ``column: what differs``. Columns only the table has are fine (appends leave them null), and so is
    nullability (tables dynamic-kafka creates are nullable throughout).
    """
    problems: list[str] = []
    _compare(written, existing, "", problems)
    return problems


def _compare(written: DataType, existing: DataType, path: str, problems: list[str]) -> None:
    from pyspark.sql.types import ArrayType, MapType, StructType

    if isinstance(written, StructType) and isinstance(existing, StructType):
        present = {f.name.lower(): f for f in existing.fields}
        for field in written.fields:
            name = f"{path}.{field.name}" if path else field.name
            found = present.get(field.name.lower())
            if found is None:
                problems.append(f"{name}: not in the sink (the pipeline writes {field.dataType.simpleString()})")
            else:
                _compare(field.dataType, found.dataType, name, problems)
    elif isinstance(written, ArrayType) and isinstance(existing, ArrayType):
        _compare(written.elementType, existing.elementType, f"{path}[]", problems)
    elif isinstance(written, MapType) and isinstance(existing, MapType):
        _compare(written.keyType, existing.keyType, f"{path}{{key}}", problems)
        _compare(written.valueType, existing.valueType, f"{path}{{value}}", problems)
    elif written.simpleString() != existing.simpleString():
        problems.append(f"{path}: the sink has {existing.simpleString()}, the pipeline writes {written.simpleString()}")


def check_sink_schema(
    spark: SparkSession,
    pipeline: PipelineConfig,
    prepared: PreparedDecoding | None,
    tables: Sequence[PipelineConfig],
) -> StructType:
    """Refuses, before anything is planned, a ``value.schema`` that does not parse or a table of ``tables`` (the
    pipeline as each table a run writes sees it, :class:`~dynamic_kafka.sink.per_stream.SinkTable`) whose schema
    does not take the pipeline's rows; returns the schema of the rows a run appends (:func:`written_schema`).

    Raises:
        SchemaMismatchError: the problem, with the columns named (not retriable: fix the config or the table).
    """
    written = written_schema(spark, pipeline, prepared)
    for table in tables:
        _check_table(table, written)
    return written


def _check_table(pipeline: PipelineConfig, written: StructType) -> None:
    path = str(pipeline.sink.path)
    from deltalake.exceptions import DeltaError

    try:
        existing = sink_schema(pipeline.sink_table)
    except (DeltaError, OSError) as e:
        raise SparkJobError(f"cannot read the schema of the sink {path}: {safe_text(e)}") from e
    if existing is None:
        return
    # Appends merge schemas (mergeSchema): a column or nested field the sink lacks is added, not refused (a
    # registry schema's new version, a json value_schema's new field). A changed type is still refused.
    problems = [p for p in schema_differences(written, existing) if ": not in the sink" not in p]
    if problems:
        raise SchemaMismatchError(
            f"pipeline {pipeline.id!r}: the sink {path} does not take the rows this pipeline writes: "
            + "; ".join(problems)
            + ".",
            columns=[p.split(":", 1)[0] for p in problems],
            hint="Nothing was planned or written. Restore the pipeline's value and key formats (value, formats, "
            "key), or migrate the table (e.g. ALTER TABLE ... ADD COLUMNS, or a new sink path), then run again.",
        )
