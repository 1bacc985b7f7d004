"""The Delta tables a pipeline writes: row shapes, creation, idempotent appends and transaction look-ups.

Layout: tables are not partitioned (a partition column would multiply small files per run; runs are bounded and
readers filter on ``cluster``/``topic``/``timestamp`` through file statistics). Tables this package creates collect
statistics on the coordinate columns only (:data:`~dynamic_kafka.spark.schema.STATS_COLUMNS`), so MERGE and
coordinate lookups skip files however wide a JSON ``value`` struct is. Column lists come from
:mod:`dynamic_kafka.spark.schema`.

Transaction look-ups (:func:`committed_txn_version`, :func:`txn_commit_version`) read the Delta log with delta-rs:
no JVM.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from dynamic_kafka.errors import SparkJobError
from dynamic_kafka.secrets import mask_secrets
from dynamic_kafka.spark.decode import DECODE_ERROR, RAW_KEY, RAW_VALUE
from dynamic_kafka.spark.schema import DEAD_LETTER_COLUMNS, ERROR, OUTPUT_COLUMNS, RUN_SEQ, STATS_COLUMNS

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

STATS_PROPERTY = "delta.dataSkippingStatsColumns"


# --- rows -------------------------------------------------------------------------------------------------------


def sink_rows(decoded: DataFrame, run_seq: int | None) -> DataFrame:
    """Decoded rows in the sink's columns (:data:`~dynamic_kafka.spark.schema.SINK_COLUMNS`)."""
    from pyspark.sql import functions as sf

    return decoded.select(*OUTPUT_COLUMNS, sf.lit(run_seq).cast("long").alias(RUN_SEQ))


def dead_letter_rows(decoded: DataFrame, run_seq: int | None) -> DataFrame:
    """Undecodable rows in the dead-letter table's columns, with the raw key and value bytes."""
    from pyspark.sql import functions as sf

    from_decoded: dict[str, Column] = {
        "key": sf.col(RAW_KEY).alias("key"),
        "value": sf.col(RAW_VALUE).alias("value"),
        ERROR: sf.col(DECODE_ERROR).alias(ERROR),
        RUN_SEQ: sf.lit(run_seq).cast("long").alias(RUN_SEQ),
    }
    return decoded.select(*(from_decoded.get(name, name) for name in DEAD_LETTER_COLUMNS))


# --- tables -----------------------------------------------------------------------------------------------------


def table_exists(path: str) -> bool:
    """Whether a Delta table exists at ``path`` (JVM-free)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        DeltaTable(path)
    except TableNotFoundError:
        return False
    return True


def ensure_table(spark: SparkSession, rows: DataFrame, path: str) -> None:
    """Creates the table (for a MERGE) with ``rows``' schema and coordinate-only statistics, unless it exists."""
    from delta.tables import DeltaTable

    if table_exists(path):
        return
    (
        DeltaTable.createIfNotExists(spark)
        .location(path)
        .addColumns(_nullable(rows.schema))
        .property(STATS_PROPERTY, STATS_COLUMNS)
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


def append_idempotent(rows: DataFrame, path: str, app_id: str, run_seq: int) -> None:
    """Appends with Delta's idempotent-write txn. A new table is created by this same commit (``delta.*`` write
    options become its properties), so a failed first write leaves no table behind."""
    writer = rows.write.format("delta").mode("append").option("txnAppId", app_id).option("txnVersion", run_seq)
    if not table_exists(path):
        writer = writer.option(STATS_PROPERTY, STATS_COLUMNS)
    writer.save(path)


# --- versions and transactions ----------------------------------------------------------------------------------


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
        raise SparkJobError(f"cannot read the Delta log of {sink_path}: {safe_text(e)}") from e


def latest_version(path: str) -> int | None:
    """The table's latest version; None when there is no table."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return DeltaTable(path).version()
    except TableNotFoundError:
        return None


class TableInfo(BaseModel):
    """What a Delta table's log says about it now, read without Spark."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: int
    rows: int = Field(description="Rows in the current version (the sum of the data files' record counts).")
    columns: tuple[tuple[str, str], ...] = Field(description="(name, Arrow type) of each column, in table order.")


def table_info(path: str) -> TableInfo | None:
    """The table's version, row count and columns from its Delta log (JVM-free, via delta-rs); None when there is no
    table. Counts come from the log's per-file statistics, so nothing but the log is read."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        table = DeltaTable(path)
    except TableNotFoundError:
        return None
    counts = table.get_add_actions(flatten=True).column("num_records").to_pylist()
    arrow: Any = table.schema().to_arrow()  # an arro3 schema; iterating gives its fields
    columns = tuple((f.name, str(f.type)) for f in arrow)
    return TableInfo(version=table.version(), rows=sum(c or 0 for c in counts), columns=columns)


def txn_commit_version(path: str, app_id: str, run_seq: int, *, max_steps: int = 50) -> int | None:
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


# --- failures ---------------------------------------------------------------------------------------------------


def safe_text(error: BaseException, limit: int = 600) -> str:
    """A foreign error's first line, bounded, with anything that looks like a credential masked."""
    text = str(error).strip()
    first = text.splitlines()[0] if text else type(error).__name__
    first = mask_secrets(first)
    return first if len(first) <= limit else first[: limit - 3] + "..."


@contextmanager
def spark_failures(doing: str) -> Iterator[None]:
    """Turns py4j / Spark / Delta exceptions into SparkJobError naming what was being done (and the path)."""
    from py4j.protocol import Py4JError  # type: ignore[import-untyped]  # py4j ships no type information
    from pyspark.errors import PySparkException

    try:
        yield
    except (Py4JError, PySparkException) as e:
        raise SparkJobError(
            f"{doing} failed: {safe_text(e)}",
            hint="Nothing was committed to the state; the next run recovers this one.",
        ) from e
