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

import json
import re
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field

from dynamic_kafka.errors import SparkConnectUnavailableError, SparkJobError
from dynamic_kafka.frozen import FrozenModel
from dynamic_kafka.secrets import mask_secrets
from dynamic_kafka.sink.commits import Commit, describe_writer, read_commit, user_metadata
from dynamic_kafka.sink.staged_append import can_stage, staged_append
from dynamic_kafka.sink.type_names import spark_type_name
from dynamic_kafka.spark.schema import (
    DEAD_LETTER_COLUMNS,
    DECODE_ERROR,
    ERROR,
    OUTPUT_COLUMNS,
    RAW_KEY,
    RAW_VALUE,
    RUN_SEQ,
    STATS_COLUMNS,
)
from dynamic_kafka.spark.session import session_settings
from dynamic_kafka.storage import TableLocation, TableRef

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence

    from deltalake import DeltaTable as DeltaTableRs
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

STATS_PROPERTY = "delta.dataSkippingStatsColumns"


# --- rows -------------------------------------------------------------------------------------------------------


def sink_rows(decoded: DataFrame, run_seq: int | None, schema: StructType | None = None) -> DataFrame:
    """Decoded rows in the sink's columns: :data:`~dynamic_kafka.spark.schema.SINK_COLUMNS` (without ``value``
    when every stream decodes into fields), then any decoded fields and ``_schema_id``, then ``_run_seq``.
    ``schema``: the result's schema when known (:func:`sink_rows_schema`), so ``decoded``'s columns are not asked
    of Spark (through Spark Connect a round trip).
    """
    from pyspark.sql import functions as sf

    columns = [c for c in schema.names if c != RUN_SEQ] if schema is not None else _sink_columns(decoded.columns)
    return decoded.select(*columns, sf.lit(run_seq).cast("long").alias(RUN_SEQ))


def sink_rows_schema(decoded: StructType, run_seq: int | None) -> StructType:
    """The schema of :func:`sink_rows` of rows whose schema is ``decoded``, worked out here: through Spark Connect
    an analysis is a round trip, and of a run's rows it analyses the whole Kafka read's plan again.

    Example:
        >>> from pyspark.sql.types import BinaryType, StringType, StructType
        >>> decoded = StructType().add("_raw_value", BinaryType()).add("topic", StringType())
        >>> sink_rows_schema(decoded, 3).simpleString()
        'struct<topic:string,_run_seq:bigint>'
    """
    from pyspark.sql.types import LongType, StructField, StructType

    fields = {field.name: field for field in decoded.fields}
    # A literal run_seq is never null; the null literal of a row without a run is.
    run = StructField(RUN_SEQ, LongType(), nullable=run_seq is None)
    return StructType([*(fields[name] for name in _sink_columns(decoded.names)), run])


def _sink_columns(decoded: Sequence[str]) -> list[str]:
    """The decoded columns the sink takes, in its order: the reader's, then the decoded fields."""
    present = set(decoded)
    internal = {RAW_KEY, RAW_VALUE, DECODE_ERROR, RUN_SEQ, *OUTPUT_COLUMNS}
    fields = [c for c in decoded if c not in internal and not c.startswith("_dk_")]
    return [*(c for c in OUTPUT_COLUMNS if c in present), *fields]


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

# A table given as a TableRef (location + storage block), a parsed location, or a local path / URI string.
Table = TableRef | TableLocation | str | Path


def open_delta_rs(table: Table, *, doing: str, version: int | None = None) -> DeltaTableRs | None:
    """The delta-rs table at ``table`` with its storage options; None when there is no Delta table there.

    Raises:
        ObjectStoreError: missing bucket, refused credentials or unreachable store (the message names the
            location, never a credential).
        SparkJobError: the log cannot be read for another reason (retriable).
    """
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError, TableNotFoundError

    ref = TableRef.of(table)
    try:
        return DeltaTable(ref.delta_rs_uri, version=version, storage_options=ref.storage_options())
    except TableNotFoundError:
        return None
    except (DeltaError, OSError) as e:
        raise (
            ref.failure(e, doing) or SparkJobError(f"{doing}: cannot read the Delta log of {ref}: {safe_text(e)}")
        ) from e


def table_exists(table: Table) -> bool:
    """Whether a Delta table exists at ``table`` (JVM-free)."""
    return open_delta_rs(table, doing=f"looking for the Delta table {TableRef.of(table)}") is not None


def ensure_table(spark: SparkSession, rows: DataFrame, table: Table, partition_by: Sequence[str] = ()) -> None:
    """Creates the table (for a MERGE) with ``rows``' schema and coordinate-only statistics, partitioned by
    ``partition_by``, unless it exists.

    By SQL, in both modes: Delta's Python ``DeltaTable`` builder needs the Delta Connect server plugin over Spark
    Connect, which Maven Central does not serve for this Spark/Delta pair (docs/spark-connect.md).
    """
    if table_exists(table):
        return
    columns = ", ".join(f"{quote_identifier(f.name)} {ddl_type(f.dataType)}" for f in _nullable(rows.schema).fields)
    partitioned = f"PARTITIONED BY ({', '.join(map(quote_identifier, partition_by))}) " if partition_by else ""
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS {delta_path_identifier(table)} ({columns}) USING delta {partitioned}"
        f"TBLPROPERTIES ({sql_string(STATS_PROPERTY)} = {sql_string(stats_columns(partition_by))})"
    ).collect()


def stats_columns(partition_by: Sequence[str] = ()) -> str:
    """The coordinate columns a new table keeps file statistics on, but its partition columns (Delta refuses
    statistics on those: the partition values already skip files).

    Example:
        >>> "cluster" in stats_columns(["cluster"]).split(",")
        False
    """
    return ",".join(c for c in STATS_COLUMNS.split(",") if c not in partition_by)


def delta_path_identifier(table: Table) -> str:
    """``delta.`uri``` for SQL: the table's Spark URI (``s3a://`` on object storage) quoted as an identifier."""
    return f"delta.{quote_identifier(TableRef.of(table).spark_uri)}"


def quote_identifier(name: str) -> str:
    """A SQL identifier in backticks (a backtick inside doubled)."""
    return "`" + name.replace("`", "``") + "`"


def sql_string(text: str) -> str:
    """A SQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def ddl_type(data_type: Any) -> str:
    """Spark SQL DDL for ``data_type``, field names quoted (a JSON field may be named anything). Nullability is
    not rendered: DDL columns and fields are nullable, as :func:`_nullable` wants them.
    """
    from pyspark.sql.types import ArrayType, MapType, StructType

    if isinstance(data_type, StructType):
        return "STRUCT<" + ", ".join(f"{quote_identifier(f.name)}: {ddl_type(f.dataType)}" for f in data_type) + ">"
    if isinstance(data_type, ArrayType):
        return f"ARRAY<{ddl_type(data_type.elementType)}>"
    if isinstance(data_type, MapType):
        return f"MAP<{ddl_type(data_type.keyType)}, {ddl_type(data_type.valueType)}>"
    return str(data_type.simpleString())


def _nullable(data_type: Any) -> Any:
    """``data_type`` with every field and element nullable: Delta enforces NOT NULL, and a column that happens
    to be non-null in one write (a literal ``_run_seq``) must accept nulls in another (a backfill's).
    """
    from pyspark.sql.types import ArrayType, MapType, StructField, StructType

    if isinstance(data_type, StructType):
        return StructType([StructField(f.name, _nullable(f.dataType), True, f.metadata) for f in data_type.fields])
    if isinstance(data_type, ArrayType):
        return ArrayType(_nullable(data_type.elementType), True)
    if isinstance(data_type, MapType):
        return MapType(_nullable(data_type.keyType), _nullable(data_type.valueType), True)
    return data_type


def append_idempotent(
    rows: DataFrame,
    table: Table,
    app_id: str,
    run_seq: int,
    *,
    commit_id: str,
    blind: bool = False,
    before_commit: Callable[[], None] | None = None,
    partition_by: Sequence[str] = (),
    schema: StructType | None = None,
    settings: Mapping[str, str] | None = None,
) -> None:
    """Appends ``rows`` with the Delta transaction ``(app_id, run_seq)``, unless the table already holds it; the
    commit carries ``commit_id`` (:mod:`~dynamic_kafka.sink.commits`), so the caller can find it in the log.

    A ``blind`` append (its rows read nothing of the table) into an existing table of the same schema is staged:
    Spark writes the files, delta-rs commits them with the txn (:mod:`~dynamic_kafka.sink.staged_append`, no
    state reconstruction). Otherwise delta-spark's idempotent write (``txnAppId``/``txnVersion``) with schema
    merging; a new table is created by this same commit (``delta.*`` write options become its properties), so a
    failed first write leaves no table behind.

    ``before_commit`` runs before the commit and may stop it by raising: for a staged append once ``rows`` were
    computed and written as files; for delta-spark's write just before its job (which reads and commits in one).
    ``partition_by``: the columns a table this write creates is partitioned by. ``schema``: ``rows``' schema when
    the caller analysed it already (through Spark Connect each analysis is a round trip); else it is asked for.
    ``settings``: session settings for the write's job only (:func:`~dynamic_kafka.spark.session.session_settings`;
    a staged append makes them with its own, in the same round trips).

    Raises:
        CommitLostError: a staged append lost its commit to another writer's txn of ``app_id``.
    """
    ref = TableRef.of(table)
    if blind:
        opened = open_delta_rs(ref, doing=f"reading the Delta log of {ref}")
        if opened is not None and can_stage(opened, _nullable(schema or rows.schema).jsonValue()):
            if (opened.transaction_version(app_id) or -1) < run_seq:
                staged_append(
                    rows, ref, opened, app_id, run_seq, commit_id, before_commit=before_commit, settings=settings
                )
            return
    writer = rows.write.format("delta").mode("append").option("txnAppId", app_id).option("txnVersion", run_seq)
    writer = writer.option("userMetadata", user_metadata(commit_id))
    # New columns (a field added to a schema, a new stream's fields) join the table; type changes are refused
    # before any write (PreparedDecoding.check_table).
    writer = writer.option("mergeSchema", "true")
    if not table_exists(ref):
        writer = writer.option(STATS_PROPERTY, stats_columns(partition_by))
        if partition_by:
            writer = writer.partitionBy(*partition_by)
    with session_settings(rows.sparkSession, settings or {}):
        if before_commit is not None:
            before_commit()
        writer.save(ref.spark_uri)


# --- versions and transactions ----------------------------------------------------------------------------------


def backfill_app_id(pipeline_id: str) -> str:
    """The Delta transaction app id of a pipeline's backfill MERGEs (its runs' appends use the pipeline id).

    Its version is the backfill's sequence number in the state; ``/`` cannot occur in a pipeline id, so it never
    names another pipeline's runs.
    """
    return f"{pipeline_id}/backfill"


def committed_txn_version(sink: Table, app_id: str) -> int | None:
    """The last ``txnVersion`` the Delta table at ``sink`` recorded for ``app_id`` (JVM-free, via delta-rs).

    Returns:
        The version, or None when the table does not exist or never saw ``app_id``.

    Raises:
        SparkJobError: the table exists but its log cannot be read (retriable).
        ObjectStoreError: the table's object store cannot be used.

    Example:
        >>> committed_txn_version("data/orders", "orders")  # doctest: +SKIP
        7
    """
    table = open_delta_rs(sink, doing=f"reading the Delta log of {TableRef.of(sink)}")
    return None if table is None else table.transaction_version(app_id)


def committed_txn_and_files(sink: Table, app_id: str) -> tuple[int | None, int]:
    """``committed_txn_version`` and the number of data files of the table's current version, from one read of its
    log (0 files when there is no table).
    """
    table = open_delta_rs(sink, doing=f"reading the Delta log of {TableRef.of(sink)}")
    if table is None:
        return None, 0
    return table.transaction_version(app_id), len(table.file_uris())


def committed_txn_versions(sink: Table, app_ids: Sequence[str]) -> dict[str, int | None]:
    """``committed_txn_version`` of each of ``app_ids``, reading the table's log once (JVM-free, via delta-rs)."""
    table = open_delta_rs(sink, doing=f"reading the Delta log of {TableRef.of(sink)}")
    return {app_id: None if table is None else table.transaction_version(app_id) for app_id in app_ids}


def latest_version(table: Table) -> int | None:
    """The table's latest version; None when there is no table."""
    opened = open_delta_rs(table, doing=f"reading the Delta log of {TableRef.of(table)}")
    return None if opened is None else opened.version()


class TableInfo(FrozenModel):
    """What a Delta table's log says about it now, read without Spark."""

    version: int
    rows: int = Field(description="Rows in the current version (the sum of the data files' record counts).")
    columns: tuple[tuple[str, str], ...] = Field(
        description="(name, Spark SQL type such as 'bigint' or 'struct<a: int>') of each column, in table order."
    )


def table_info(table: Table) -> TableInfo | None:
    """The table's version, row count and columns from its Delta log (JVM-free, via delta-rs).

    Counts come from the log's per-file statistics, so nothing but the log is read.

    Returns:
        None when there is no table at ``table``.
    """
    opened = open_delta_rs(table, doing=f"reading the Delta log of {TableRef.of(table)}")
    if opened is None:
        return None
    counts = opened.get_add_actions(flatten=True).column("num_records").to_pylist()
    columns = tuple((f.name, spark_type_name(f.type)) for f in opened.schema().fields)
    return TableInfo(version=opened.version(), rows=sum(c or 0 for c in counts), columns=columns)


def txn_commit_version(table: Table, app_id: str, run_seq: int, *, max_steps: int = 50) -> int | None:
    """The table version whose commit recorded txn ``(app_id, run_seq)``; None if no version did.

    Walks back from the latest version while the txn is still visible, so a commit by another writer after ours
    does not shift the answer. Falls back to the latest version after ``max_steps`` versions.
    """
    opened = open_delta_rs(table, doing=f"reading the Delta log of {TableRef.of(table)}")
    if opened is None:
        return None
    version = opened.version()
    if (opened.transaction_version(app_id) or -1) < run_seq:
        return None
    for _ in range(max_steps):
        if version == 0:
            return 0
        opened.load_as_version(version - 1)
        if (opened.transaction_version(app_id) or -1) < run_seq:
            return version
        version -= 1
    return opened.version()


def run_commit(table: Table, app_id: str, run_seq: int) -> Commit | None:
    """The log entry of the commit that recorded txn ``(app_id, run_seq)``; None when no version holds it."""
    version = txn_commit_version(table, app_id, run_seq)
    return None if version is None else read_commit(TableRef.of(table), version)


# --- failures ---------------------------------------------------------------------------------------------------


def safe_text(error: BaseException, limit: int = 600) -> str:
    """A foreign error's first line, bounded, with anything that looks like a credential masked."""
    text = str(error).strip()
    first = text.splitlines()[0] if text else type(error).__name__
    first = mask_secrets(first)
    return first if len(first) <= limit else first[: limit - 3] + "..."


@contextmanager
def spark_failures(doing: str, table: TableRef | None = None) -> Iterator[None]:
    """Turns py4j / Spark / Delta exceptions into SparkJobError naming what was being done (and the path).

    When ``table``'s object store could not be used (missing bucket, refused credentials, unreachable), the
    error is an ObjectStoreError instead. Over Spark Connect every error is a ``PySparkException`` (no py4j); a
    server that went away during the job becomes :class:`~dynamic_kafka.errors.SparkConnectUnavailableError`.
    """
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    from dynamic_kafka.spark.remote import START_SERVER, is_unavailable

    try:
        yield
    except SparkConnectUnavailableError:
        raise
    except (Py4JError, PySparkException) as e:
        if is_unavailable(e):
            raise SparkConnectUnavailableError(
                f"{doing} failed: the Spark Connect server stopped answering.",
                hint=f"Nothing was committed to the state; start the server again ({START_SERVER}) and run again: "
                "the next run recovers this one.",
            ) from e
        storage_failure = table.failure(e, doing) if table is not None else None
        if storage_failure is not None:
            raise storage_failure from e
        winner = conflicting_writer(str(e))
        raise SparkJobError(
            f"{doing} failed: {safe_text(e)}" + (f" The commit that won: {winner}." if winner else ""),
            hint="Nothing was committed to the state; the next run recovers this one.",
        ) from e


_CONFLICTING_COMMIT = re.compile(r"Conflicting commit: (\{.*\})")


def conflicting_writer(text: str) -> str | None:
    """Who won a delta-spark commit conflict, from the ``Conflicting commit: {commitInfo}`` line of its error."""
    match = _CONFLICTING_COMMIT.search(text)
    if match is None:
        return None
    try:
        info = json.loads(match.group(1))
    except ValueError:
        return None
    if not isinstance(info, dict):
        return None
    version = info.get("version")
    who = describe_writer(info)
    return f"version {version} ({who})" if isinstance(version, int) else who
