"""Bootstrap archives: the history of a stream in Parquet or JSON files or a Delta table, landed by a pipeline's
first run with its Kafka records (one append, one transaction).

Two steps, as for Kafka: :func:`plan_archive` looks at the archive before anything is written (its columns must
map to the sink's, else a ConfigError; the files or the Delta version read are pinned, the rows counted) and
:func:`archive_rows` reads exactly the pinned rows in the reader's output schema, so the run's append unions
them with the Kafka rows and a recovery of the run reads the same rows again.

The archive's rows with a timestamp before ``until`` land (and rows without a timestamp: nothing is dropped
silently); Kafka is read from the first offset at or after ``until``, so the two meet without a gap or an overlap
where they hold the same records.
"""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING

from dynamic_kafka.config.models import VALUE_COLUMN_FORMATS
from dynamic_kafka.errors import ArchiveChangedError, ConfigError, StateError
from dynamic_kafka.model.plan import ArchiveRead
from dynamic_kafka.spark.schema import CLUSTER, OUTPUT_COLUMNS, OUTPUT_FIELDS, RUN_SEQ, STREAM

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pyspark.sql import Column, DataFrame, SparkSession

    from dynamic_kafka.config.models import PipelineConfig
    from dynamic_kafka.decoding.prepared import PreparedDecoding
    from dynamic_kafka.model.snapshots import StateSnapshot
    from dynamic_kafka.storage import TableRef

_INTS = {"tinyint", "smallint", "int"}
ACCEPTED_TYPES: dict[str, set[str]] = {
    "key": {"binary", "string"},
    "value": {"binary", "string"},
    "topic": {"string"},
    "partition": _INTS,
    "offset": _INTS | {"bigint"},
    "timestamp": {"timestamp", "timestamp_ntz", "date"},
    "timestampType": _INTS,
    "headers": {"array<struct<key:string,value:binary>>"},
    CLUSTER: {"string"},
    STREAM: {"string"},
}
"""Per sink column, the archive column types that convert to it without loss (Spark type names)."""

REQUIRED = ("timestamp", "value")
"""Sink columns every archive must map: ``timestamp`` decides which rows are older than ``until``."""


def map_columns(pipeline: PipelineConfig, archive: Mapping[str, str]) -> dict[str, str]:
    """Sink column -> archive column for ``pipeline``'s bootstrap over an archive with ``archive`` columns (name
    -> Spark type name): same-named columns map by themselves, ``bootstrap.columns`` adds or overrides.

    Raises:
        ConfigError: a mapped column is absent or of a type that does not convert, ``timestamp`` or ``value`` is
            unmapped, or an archive column maps to nothing and is not in ``bootstrap.ignore``. Every problem is
            listed in one message.
    """
    bootstrap = pipeline.bootstrap
    assert bootstrap is not None
    mapping = {name: name for name in archive if name in OUTPUT_COLUMNS}
    mapping.update(bootstrap.columns)
    problems = [
        f"`{sink}` is mapped to `{source}`, which the archive does not have"
        for sink, source in sorted(mapping.items())
        if source not in archive
    ]
    problems += [
        f"`{sink}` needs a column of type {' or '.join(sorted(ACCEPTED_TYPES[sink]))}; `{source}` is {archive[source]}"
        for sink, source in sorted(mapping.items())
        if source in archive and archive[source] not in ACCEPTED_TYPES[sink]
    ]
    problems += [f"no archive column is mapped to `{sink}`" for sink in REQUIRED if sink not in mapping]
    unmapped = sorted(set(archive) - set(mapping.values()) - set(bootstrap.ignore))
    if unmapped:
        problems.append(f"archive column(s) {', '.join(unmapped)} map to no sink column")
    if problems:
        raise ConfigError(
            f"pipeline {pipeline.id!r}: the bootstrap archive {str(bootstrap.path)!r} does not map to the sink: "
            f"{'; '.join(problems)} (archive columns: "
            f"{', '.join(f'{n} {t}' for n, t in archive.items())}). Nothing was written.",
            hint="Map the columns in `bootstrap.columns` (sink column: archive column), list the ones not to land "
            "in `bootstrap.ignore`, or fix the archive.",
        )
    return mapping


def plan_archive(spark: SparkSession, pipeline: PipelineConfig, abandoned_runs: tuple[int, ...] = ()) -> ArchiveRead:
    """The pipeline's bootstrap archive, checked and pinned: its columns mapped, its files (or Delta version)
    listed and the rows it lands counted. Reads the archive (schema, and one count); writes nothing.
    ``abandoned_runs``: the runs that bootstrapped it before and were abandoned (:func:`abandoned_archive_runs`).

    Raises:
        ConfigError: the archive cannot be read or its columns do not map (:func:`map_columns`).
        SparkJobError: the count failed (retriable).
    """
    bootstrap = pipeline.bootstrap
    assert bootstrap is not None
    location = bootstrap.path.spark_uri
    try:
        frame = spark.read.format(bootstrap.format).load(location)
        archive = {field.name: field.dataType.simpleString() for field in frame.schema.fields}
    except Exception as e:  # Spark's own errors differ in-process and over Connect; all mean "cannot read"
        raise ConfigError(
            f"pipeline {pipeline.id!r}: the bootstrap archive {location!r} ({bootstrap.format}) cannot be read: "
            f"{str(e).splitlines()[0] if str(e) else type(e).__name__}. Nothing was written.",
            hint="Fix bootstrap.path or bootstrap.format.",
        ) from None
    columns = map_columns(pipeline, archive)
    files: tuple[str, ...] = ()
    version = None
    if bootstrap.format == "delta":
        history = spark.sql(f"DESCRIBE HISTORY delta.`{location}` LIMIT 1").collect()
        version = int(history[0]["version"])
    else:
        files = tuple(sorted(frame.inputFiles()))
    cut = bootstrap.max_files_per_run or len(files)
    read = ArchiveRead(
        location=location,
        format=bootstrap.format,
        until=bootstrap.until,
        columns=columns,
        cluster=bootstrap.cluster,
        stream=pipeline.bootstrap_stream,
        files=files[:cut],
        remaining=files[cut:],
        delta_version=version,
        rows=0,
        switch=True,
        abandoned_runs=abandoned_runs,
    )
    return counted(spark, read, pipeline.dead_letter_table)


def counted(spark: SparkSession, read: ArchiveRead, dead_letters: TableRef) -> ArchiveRead:
    """``read`` with the number of rows it lands (one count job over its files, after the pins: a file changed in
    between is refused at the read). Its files and the ``remaining`` ones are pinned (size and modification time)
    when the first plan lists them; a later part carries those pins along the chain and is checked against them:
    a record moved from a landed file into a pending one would land twice.

    Raises:
        ArchiveChangedError: a later part's file differs from what the first plan pinned (:func:`check_unchanged`).
    """
    from dynamic_kafka.sink.tables import spark_failures

    if read.file_pins:
        check_unchanged(spark, read)
        pinned = read
    else:
        pinned = read.with_file_pins(_file_pins(spark, read))
    with spark_failures(f"counting the bootstrap archive {read.location!r}"):
        return pinned.with_rows(archive_rows(spark, pinned, dead_letters).count())


def _comparable(path: str) -> str:
    # Spark lists a local file as file:///x and reports it as file:/x.
    return re.sub(r"^file:/+", "file:///", path)


def _file_pins(spark: SparkSession, read: ArchiveRead) -> dict[str, tuple[int, int]]:
    """Each of ``read``'s files' and ``remaining`` files' size and modification time (epoch ms) as the storage
    reports them now; reads no file's contents (Spark's binaryFile source reads them only when asked for).

    Raises:
        ArchiveChangedError: a file is gone.
    """
    if not read.files:
        return {}
    from pyspark.sql import functions as sf

    try:
        listed = (
            spark.read.format("binaryFile")
            .load([*read.files, *read.remaining])
            .select("path", "length", sf.unix_millis("modificationTime").alias("modified"))
            .collect()
        )
    except Exception as e:  # Spark's own errors differ in-process and over Connect; all mean "not there"
        raise ArchiveChangedError(
            f"the bootstrap archive {read.location!r}: its planned files cannot be listed "
            f"({str(e).splitlines()[0] if str(e) else type(e).__name__}). Nothing was written.",
            hint=_CHANGED_HINT,
        ) from None
    return {_comparable(row["path"]): (int(row["length"]), int(row["modified"])) for row in listed}


_CHANGED_HINT = (
    "Put the archive's files back as they were planned and run again, or give the planned run up "
    "(`dynamic-kafka abandon --run-seq N --reason ...`): the next run plans the files again as they are then."
)


def check_unchanged(spark: SparkSession, read: ArchiveRead) -> None:
    """Refuse to read ``read`` when a pinned file differs from its pin (size or modification time) or is gone:
    its rows would not be the rows the plan counted, or (a file still to come) the rows landed so far and the
    rows still to land may hold the same record or miss one. A plan without pins is not checked.

    Raises:
        ArchiveChangedError: naming every changed file, its pin and what the storage reports now.
    """
    if not read.file_pins:
        return
    now = _file_pins(spark, read)
    changed = [
        f"{name} (planned {size} bytes modified at {modified} ms; now "
        + (f"{now[name][0]} bytes modified at {now[name][1]} ms)" if name in now else "gone)")
        for name, (size, modified) in sorted(read.file_pins.items())
        if now.get(name) != (size, modified)
    ]
    if changed:
        raise ArchiveChangedError(
            f"the bootstrap archive {read.location!r} changed since its first part was planned: "
            f"{'; '.join(changed)}. Its rows would not be the ones the plans counted. Nothing was written.",
            hint=_CHANGED_HINT,
        )


def abandoned_archive_runs(state: StateSnapshot) -> tuple[int, ...]:
    """The runs that planned the archive rows the next run lands and were abandoned: those of the last run's plan,
    and the last run itself when it was abandoned. Follows the chain of plans, as :func:`next_archive_part` does.
    """
    last = state.landing_run
    if last is None or last.plan.bootstrap is None:
        return ()
    earlier = last.plan.bootstrap.abandoned_runs
    return (*earlier, last.run_seq) if last.status == "abandoned" else earlier


def next_archive_part(state: StateSnapshot, max_files: int | None) -> ArchiveRead | None:
    """The next part of an archive landed over several runs: the files the last run left (or, when it was
    abandoned, the files it did not land either), ``max_files`` of them; None when nothing is left. Follows the
    chain of plans, so it needs no state of its own: every part's plan names the files still to come, with the
    pins the first plan took of them (checked when the part is counted). Operations recorded between two parts (a
    reset, a replay) are passed over: they land no file.

    Raises:
        StateError: files are left, and a realign since the last part replaced runs the state never knew: which
            files those runs landed is unknown, so no next part is guessed (a guess loses or duplicates rows).
    """
    last = state.landing_run
    if last is None or last.plan.bootstrap is None:
        return None
    previous = last.plan.bootstrap
    pending = previous.remaining if last.status == "committed" else previous.files + previous.remaining
    if not pending:
        return None
    realigns = [r for r in state.operations if r.summary_status == "realigned"]
    if realigns:
        raise _unknown_parts(state.pipeline_id, last.run_seq, realigns[0].run_seq, pending)
    cut = max_files or len(pending)
    names = {_comparable(name) for name in pending}
    pins = {name: pin for name, pin in previous.file_pins.items() if name in names}
    return previous.next_part(pending[:cut], pending[cut:], pins)


def _unknown_parts(pipeline_id: str, known: int, realigned: int, pending: tuple[str, ...]) -> StateError:
    return StateError(
        f"pipeline {pipeline_id!r}: the bootstrap archive is landed over several runs and {len(pending)} file(s) "
        f"were left after run {known} ({', '.join(pending)}), but a realign recorded runs {known + 1} to "
        f"{realigned} that the state never knew (its state was restored or moved): which of those files they "
        "landed is unknown, so no next part is planned. Nothing was written.",
        hint=f"Restore the state from a backup taken at or after run {realigned}: its plan names the files still "
        "to come.",
    )


def archive_rows(spark: SparkSession, read: ArchiveRead, dead_letters: TableRef) -> DataFrame:
    """Exactly the pinned archive rows before ``until``, in the reader's output schema (lazy), minus those the
    ``read.abandoned_runs`` landed in ``dead_letters``.
    """
    from pyspark.sql import functions as sf

    reader = spark.read.format(read.format)
    if read.delta_version is not None:
        frame = reader.option("versionAsOf", read.delta_version).load(read.location)
    elif read.files:
        frame = reader.load(list(read.files))
    else:  # an archive folder without files: nothing to land
        from dynamic_kafka.spark.reader import empty_output

        return empty_output(spark)
    timestamp = sf.col(read.columns["timestamp"]).cast("timestamp")
    frame = frame.where(timestamp.isNull() | ~_at_or_after_until(timestamp, read))
    defaults = {CLUSTER: read.cluster, STREAM: read.stream}
    columns = []
    for name, ddl in OUTPUT_FIELDS:
        source = read.columns.get(name)
        value = sf.col(source).cast(ddl) if source is not None else sf.lit(None).cast(ddl)
        if name in defaults:
            value = sf.coalesce(value, sf.lit(defaults[name]))
        columns.append(value.alias(name))
    return _without_final_dead_letters(frame.select(*columns), read, dead_letters)


def _at_or_after_until(timestamp: Column, read: ArchiveRead) -> Column:
    from pyspark.sql import functions as sf

    until_micros = int(read.until.timestamp()) * 1_000_000 + read.until.microsecond
    return sf.unix_micros(timestamp) >= sf.lit(until_micros)


def kafka_side(frame: DataFrame, read: ArchiveRead) -> DataFrame:
    """``frame`` (the run's Kafka records) without the records the archive holds. On the switch run (the first
    part) those are the records with a timestamp before ``until``: Kafka starts at the first offset at or after
    it, but a later offset may carry an older timestamp (producer clocks, CreateTime set by clients, mirrors), and
    the archive lands every row before ``until``. One condition on one timestamp splits the records between the
    two sides. Later parts read records produced after the archive was pinned: all of them are Kafka's.
    """
    from pyspark.sql import functions as sf

    if not read.switch:
        return frame
    return frame.where(_at_or_after_until(sf.col("timestamp"), read))


_IDENTITY = (CLUSTER, STREAM, "topic", "partition", "offset", "timestamp", "key", "value")
"""What tells an archive row's dead letter: archive rows may have no coordinates, so all that the archive gives."""


def _without_final_dead_letters(rows: DataFrame, read: ArchiveRead, dead_letters: TableRef) -> DataFrame:
    """``rows`` minus the archive rows an abandoned run of them dead-lettered (its dead letters stay final behind
    its fence): matched on every identifying column, nulls equal, within those runs' dead letters only.
    """
    from functools import reduce

    from pyspark.sql import functions as sf

    from dynamic_kafka.sink.tables import table_exists

    if not read.abandoned_runs or not table_exists(dead_letters):
        return rows
    landed = (
        rows.sparkSession.read.format("delta")
        .load(dead_letters.spark_uri)
        .where(sf.col(RUN_SEQ).isin(list(read.abandoned_runs)))
        .select(*(sf.col(name).alias(f"_dk_landed_{name}") for name in _IDENTITY))
    )
    same = reduce(lambda a, b: a & b, [sf.col(n).eqNullSafe(sf.col(f"_dk_landed_{n}")) for n in _IDENTITY])
    return rows.join(landed, on=same, how="left_anti")


def with_archive_decoding(prepared: PreparedDecoding, pipeline: PipelineConfig, stream: str) -> PreparedDecoding:
    """``prepared`` able to decode the values of an archive of ``stream`` too: they land in the ``value`` column,
    decoded with the stream's format (a run whose Kafka ranges are all empty would otherwise decode no ``value``).

    Raises:
        ConfigError: the archive's stream decodes from a registry or a schema file (not supported in archives), or
            its format differs from the Kafka streams' that land in ``value``.
    """
    fmt = pipeline.value_format_of(stream)
    if fmt.format not in VALUE_COLUMN_FORMATS or (prepared.legacy is not None and prepared.legacy != fmt):
        raise ConfigError(
            f"pipeline {pipeline.id!r}: the bootstrap archive's stream {stream!r} is decoded as "
            f"{fmt.format}, which archive values cannot use here (bytes, string or json, the same as the "
            "Kafka values landing in `value`). Nothing was written.",
            hint="Give the stream a bytes, string or json value format (value.format, or its formats entry), or set "
            "bootstrap.stream to such a stream.",
        )
    return dataclasses.replace(prepared, legacy=fmt)
