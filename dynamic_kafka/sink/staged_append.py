"""Blind appends committed by the client: Spark writes a run's Parquet files into the table's folder, delta-rs
commits them to the table's log together with the run's Delta transaction ``(app id, run_seq)``.

Why not delta-spark's own idempotent write (``txnAppId``/``txnVersion``)? To find the transaction it rebuilds the
table's whole state in two Spark jobs on every write, about 1 s of a small run through a warm Spark Connect server
(docs/decisions/0016-staged-appends.md). delta-rs reads the same transaction from the log in milliseconds, and its
commit gives the same guarantees:

- the check and the commit use one snapshot: the txn is read from it before Spark writes anything, and the
  commit is built on it, so delta-rs's conflict check refuses the commit when any commit after that snapshot
  recorded a transaction of the same app id (another writer landed this run, or a later one, meanwhile);
- the log entry is written with put-if-absent (a hard link locally, a conditional put on S3), so the files and the
  txn become visible together or not at all. Files of a run that died before its commit are in no version: no
  reader sees them; the attempt that commits the run removes them, and so does the run's abandon (``VACUUM``
  would, after the retention period, except hidden ones and ``_temporary`` task folders);
- the commit adds exactly the files the attempt's own Spark job committed: each attempt writes into a folder of
  its own through Hadoop's manifest committer, whose job commit keeps the manifest of every task it committed
  (each naming the task's files); the commit's add actions are those files, and a folder that holds anything
  else, or a job without its manifests, is refused (:func:`_job_files`). On S3A, which that committer refuses,
  and in a Spark without its binding, the file committer (algorithm 1) writes and the folder must hold one
  job's output only (:func:`_check_one_job`);
- the commit carries a commit id, so the caller finds it in the log (:mod:`~dynamic_kafka.sink.commits`).

Only a blind append (no read of the table inside the write) may be staged, only into an existing unpartitioned
table whose protocol delta-rs writes without checks of its own (reader 1, writer <= 2, no table features, no column
metadata, every column nullable), and only when the rows' schema is exactly the table's (up to the order of the
top-level columns). Anything else (a table's first write, a new column, a dedupe against a backfill) is left to
delta-spark, which enforces and evolves schemas and checks reads against concurrent writes.

File statistics (``numRecords``, ``minValues``, ``maxValues``, ``nullCount`` on the table's coordinate columns)
come from the Parquet footers Spark wrote, so data skipping works on staged files as on delta-spark's.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import uuid
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from dynamic_kafka.errors import CommitLostError, DynamicKafkaError, SparkJobError
from dynamic_kafka.faults import CrashPoint, crash_point
from dynamic_kafka.secrets import mask_secrets
from dynamic_kafka.sink.commits import COMMIT_ID_KEY, first_with_txn
from dynamic_kafka.spark.schema import STATS_COLUMNS
from dynamic_kafka.spark.session import session_settings

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from deltalake import DeltaTable as DeltaTableRs
    from deltalake.transaction import AddAction, RemoveAction
    from pyspark.sql import DataFrame

    from dynamic_kafka.storage import TableRef

logger = logging.getLogger(__name__)

# The folder of one run's staged writes, under the table's root (``dk-run-<run_seq>-<pipeline id>``), with one
# subfolder per attempt. Not hidden (no leading "_" or "."), so VACUUM cleans the files of a write that never
# committed; what VACUUM does not reach (hidden files, earlier attempts' task folders) the attempt that commits
# removes.
_FOLDER_PREFIX = "dk-run-"
# Spark's name for a task's output file: part-<task>-<the write job's UUID>-c<file>[.<codec>].parquet.
_JOB_FILE = re.compile(
    r"^part-\d{5}-(?P<job>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})-c\d{3}(\.\w+)?\.parquet$"
)
# Hadoop's manifest committer, bound to Spark's Parquet writes by spark-hadoop-cloud (spark/packages.py). Task
# commit saves a manifest naming the task attempt's files; job commit moves the files of the committed manifests
# into the folder, writes _SUCCESS (a JSON summary) and moves the manifests into _MANIFESTS/<job id>.
COMMIT_PROTOCOL = "org.apache.spark.internal.io.cloud.PathOutputCommitProtocol"
PARQUET_COMMITTER = "org.apache.spark.internal.io.cloud.BindingParquetOutputCommitter"
_MANIFEST_COMMITTER = "org.apache.hadoop.mapreduce.lib.output.committer.manifest.ManifestCommitter"
_MANIFEST_FACTORY = "org.apache.hadoop.mapreduce.lib.output.committer.manifest.ManifestCommitterFactory"
_MANIFESTS = "_manifests"
_SUCCESS = "_SUCCESS"
# The committer's counter of the files its job commit moved (in _SUCCESS's iostatistics).
_FILES_COMMITTED = "committer_files_committed"
_STATS = frozenset(STATS_COLUMNS.split(","))
_RETRY = "Nothing was committed; the next run recovers this one."
# delta-spark's default checkpoint interval, kept by staged commits unless the table sets its own.
_INTERVAL_PROPERTY = "delta.checkpointInterval"
_CHECKPOINT_INTERVAL = 10


def run_folder_name(app_id: str, run_seq: int) -> str:
    """The folder (under the table's root) of run ``run_seq``'s staged writes, one subfolder per attempt."""
    return f"{_FOLDER_PREFIX}{run_seq}-{app_id}"


def can_stage(table: DeltaTableRs, rows_schema_json: dict[str, Any]) -> bool:
    """Whether rows can be appended to ``table`` by a staged append; ``rows_schema_json`` is their Spark schema
    (``StructType.jsonValue()``) made nullable throughout, as a table dynamic-kafka creates stores it.
    """
    protocol = table.protocol()
    if protocol.min_reader_version > 1 or protocol.min_writer_version > 2:
        return False
    if protocol.writer_features or protocol.reader_features:
        return False
    # Staged files are committed without partition values: a partitioned table is written by delta-spark.
    if table.metadata().partition_columns:
        return False
    table_fields = json.loads(table.schema().to_json())["fields"]
    if not all(_plain(field) for field in table_fields):
        return False
    return _by_name(table_fields) == _by_name(rows_schema_json["fields"])


def staged_append(
    rows: DataFrame,
    table: TableRef,
    opened: DeltaTableRs,
    app_id: str,
    run_seq: int,
    commit_id: str,
    *,
    before_commit: Callable[[], None] | None = None,
    settings: Mapping[str, str] | None = None,
) -> None:
    """Writes ``rows`` as Parquet into a new folder of ``table`` and commits those files with txn
    ``(app_id, run_seq)`` and ``commit_id`` on the snapshot ``opened``; ``before_commit`` runs between the two
    (``rows`` are all computed then) and stops the commit by raising (the staged files are left, as by a crash).
    ``settings``: the caller's session settings for the write's job, made with the staging's own.

    The caller checked on ``opened`` that the table does not hold ``run_seq`` yet.

    Raises:
        CommitLostError: another writer committed a txn of ``app_id`` after ``opened`` (the message names it);
            nothing of ours is visible (the caller looks at what that writer committed).
        SparkJobError: reading the staged files or the commit failed; nothing is visible (retriable).
        ObjectStoreError: the table's object store cannot be used.
    """
    from deltalake import CommitProperties, Transaction
    from deltalake.exceptions import CommitFailedError, DeltaError

    run_folder = run_folder_name(app_id, run_seq)
    folder = f"{run_folder}/{uuid.uuid4().hex[:12]}"
    manifests = _write_staged(rows, table, folder, settings or {})
    crash_point(CrashPoint.AFTER_STAGING)
    if before_commit is not None:
        before_commit()
    doing = f"committing the staged files of run {run_seq} to {table}"
    read_version = opened.version()
    try:
        adds = _add_actions(table, folder, _job_files(table, folder) if manifests else None)
        opened.create_write_transaction(
            adds,
            mode="append",
            schema=opened.schema(),
            commit_properties=CommitProperties(
                app_transactions=[Transaction(app_id=app_id, version=run_seq)],
                # delta-rs leaves this commitInfo field out; Delta's history shows it, and a staged append is
                # blind by construction.
                custom_metadata={"isBlindAppend": True, COMMIT_ID_KEY: commit_id},
            ),
        )
    except CommitFailedError as e:
        winner = _winner(table, read_version, app_id)
        raise CommitLostError(
            f"{doing}: another writer committed a transaction of {app_id!r} first: {winner} ({mask_secrets(str(e))})",
            hint="Nothing of this write is visible; the run's outcome is what that writer committed.",
        ) from e
    except (DeltaError, OSError) as e:
        failure = table.failure(e, doing) or SparkJobError(f"{doing} failed: {mask_secrets(str(e))}", hint=_RETRY)
        raise failure from e
    logger.info("run %d of %r: %d staged file(s) committed to %s", run_seq, app_id, len(adds), table)
    keep_checkpoint_cadence(opened, str(table))
    _remove_leftovers(table, run_folder, folder)


def _write_staged(rows: DataFrame, table: TableRef, folder: str, caller: Mapping[str, str]) -> bool:
    """Writes ``rows`` as Parquet into ``folder`` of ``table``; True when through the manifest committer, which
    keeps the manifests of the tasks it committed in ``folder/_manifests/<job id>``, False when through Hadoop's
    file committer (algorithm 1), whose output is only the folder's listing.

    The file committer serves object stores reached through S3A (Hadoop's manifest committer refuses the ``s3a``
    scheme) and sessions whose Spark lacks the manifest committer's binding (a Connect server started without the
    spark-hadoop-cloud jar). Only the write's own settings change: Hadoop keys are write options (Spark puts them
    into this job's Hadoop configuration), the Spark settings (the staging's and the ``caller``'s, in one block:
    through Spark Connect each block costs its round trips) are put back afterwards.
    """
    uri = f"{table.spark_uri.rstrip('/')}/{folder}"
    # Delta's own writer stores timestamps as INT64 microseconds (and so do delta-rs and the other readers'
    # expectations); a plain Parquet write would use INT96, which carries no statistics.
    plain = {"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS", **caller}
    if not uri.startswith("s3a:"):
        # The committer classes first: a Spark without them refuses the first setting (its class must load), and
        # nothing is left set.
        settings = {
            "spark.sql.sources.commitProtocolClass": COMMIT_PROTOCOL,
            "spark.sql.parquet.output.committer.class": PARQUET_COMMITTER,
            **plain,
        }
        # The job commit moves the task manifests there (after the files, before _SUCCESS names the folder): the
        # complete list of the committed files (_SUCCESS itself names 100 at most).
        writer = rows.write.mode("error").option("mapreduce.outputcommitter.factory.scheme.file", _MANIFEST_FACTORY)
        writer = writer.option("mapreduce.manifest.committer.diagnostics.manifest.directory", f"{uri}/{_MANIFESTS}")
        try:
            with session_settings(rows.sparkSession, settings):
                writer.parquet(uri)
            return True
        except Exception as e:
            # Raised when the setting is made (the class must load) or the write is planned, before its job
            # creates the folder.
            missing = "ClassNotFoundException" in str(e) or "must be loadable" in str(e)
            if not missing or not any(c in str(e) for c in (COMMIT_PROTOCOL, PARQUET_COMMITTER)):
                raise
            logger.warning(
                "the Spark session has no %s (the spark-hadoop-cloud jar): staging into %s with Hadoop's file "
                "committer, its folder's listing checked instead of the job's manifests",
                COMMIT_PROTOCOL,
                table,
            )
    with session_settings(rows.sparkSession, plain):
        (
            rows.write.mode("error")
            # No _SUCCESS marker: a hidden file nothing would ever remove.
            .option("mapreduce.fileoutputcommitter.marksuccessfuljobs", "false")
            # Tasks commit into the job's _temporary folder, and only the attempts the driver committed are moved
            # into the folder when the job commits: a failed or retried attempt's output never becomes visible
            # there (algorithm 2, which a session may set, moves each attempt's files in as it commits).
            .option("mapreduce.fileoutputcommitter.algorithm.version", "1")
            .parquet(uri)
        )
    return False


def _remove_leftovers(table: TableRef, run_folder: str, committed: str) -> None:
    """Removes what VACUUM would not: earlier attempts of this run (killed writes: task folders, data files no
    version references) and the hidden files beside the committed ones (the job's _SUCCESS summary and manifests,
    Hadoop's checksums on local disk).

    Only after this attempt's commit: the run's transaction is then in the log, so no other writer of the run
    can commit an earlier attempt's files any more. A failure is logged, never raised: the commit stands, and
    VACUUM still removes the visible files after the retention period.
    """
    from deltalake.exceptions import DeltaError
    from deltalake.fs import DeltaStorageHandler
    from pyarrow.fs import FileSelector, FileType, PyFileSystem

    try:
        if table.location.is_local:
            root = table.location.local_path
            leftovers = [e for e in (root / run_folder).iterdir() if f"{run_folder}/{e.name}" != committed]
            leftovers += [e for e in (root / committed).iterdir() if e.name.startswith(("_", "."))]
            for entry in leftovers:
                if entry.is_dir():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()
            return
        fs = PyFileSystem(DeltaStorageHandler(table.delta_rs_uri, table.storage_options()))
        entries = [i for i in fs.get_file_info(FileSelector(run_folder)) if i.path.rstrip("/") != committed]
        entries += [i for i in fs.get_file_info(FileSelector(committed)) if i.base_name.startswith(("_", "."))]
        for info in entries:
            if info.type == FileType.Directory:
                fs.delete_dir(info.path)
            else:
                fs.delete_file(info.path)
    except (DeltaError, OSError) as e:
        logger.warning(
            "leftovers of earlier writes under %s/%s not removed: %s", table, run_folder, mask_secrets(str(e))
        )


def remove_run_folder(table: TableRef, app_id: str, run_seq: int) -> None:
    """Removes the staging folder of run ``run_seq`` (every attempt's files) once the run was fenced in ``table``.

    Only for a fenced run (abandoned: its transaction holds no rows): no version references its files, and none
    can from then on (the fence's txn makes every later commit of the run fail). A write of the run still running
    elsewhere may add files afterwards; they are in no version, and VACUUM removes the visible ones. A failure is
    logged, never raised: the abandon stands.
    """
    from deltalake.exceptions import DeltaError
    from deltalake.fs import DeltaStorageHandler
    from pyarrow.fs import FileType, PyFileSystem

    run_folder = run_folder_name(app_id, run_seq)
    try:
        if table.location.is_local:
            shutil.rmtree(table.location.local_path / run_folder)
            return
        fs = PyFileSystem(DeltaStorageHandler(table.delta_rs_uri, table.storage_options()))
        if fs.get_file_info(run_folder).type != FileType.NotFound:
            fs.delete_dir(run_folder)
    except FileNotFoundError:
        return
    except (DeltaError, OSError) as e:
        logger.warning("staged files of abandoned run %d not removed from %s: %s", run_seq, table, mask_secrets(str(e)))


def _winner(table: TableRef, read_version: int, app_id: str) -> str:
    """The commit that won against a staged commit built on ``read_version``, as the log names it."""
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError

    try:
        latest = DeltaTable(table.delta_rs_uri, storage_options=table.storage_options()).version()
        winner = first_with_txn(table, read_version, latest, app_id)
    except (DeltaError, DynamicKafkaError, OSError) as e:
        logger.debug("the log of %s does not say which writer won: %s", table, e)
        winner = None
    return winner.describe() if winner is not None else "the log does not say which writer"


def keep_checkpoint_cadence(opened: DeltaTableRs, name: str) -> None:
    """Writes a checkpoint when the table's latest version is a multiple of delta-spark's default interval and the
    table sets no ``delta.checkpointInterval`` of its own.

    delta-rs's default interval is 100, delta-spark's 10; every open of the log replays the JSON entries after the
    last checkpoint (~1 ms each here), and a run opens the sink's log several times, so with staged appends
    making most commits the longer interval cost a small run ~0.3 s on average. A failed checkpoint is logged,
    never raised: the commit before it stands, and the next multiple tries again.
    """
    from deltalake.exceptions import DeltaError

    try:
        opened.update_incremental()
        if _INTERVAL_PROPERTY in opened.metadata().configuration or opened.version() % _CHECKPOINT_INTERVAL:
            return
        opened.create_checkpoint()
    except (DeltaError, OSError) as e:
        logger.warning(
            "checkpoint of %s at version %d not written (the next one will be): %s",
            name,
            opened.version(),
            mask_secrets(str(e)),
        )


def _add_actions(table: TableRef, folder: str, committed: dict[str, int] | None) -> list[AddAction | RemoveAction]:
    """One ``add`` per non-empty Parquet file of ``committed`` (names and sizes of the job's files, see
    :func:`_job_files`) in ``folder``, with statistics from its footer; with ``committed`` None (a file committer's
    write), per file of the folder's listing, which must be one Spark job's output.

    Raises:
        SparkJobError: the folder's visible files are not exactly ``committed`` or, without it, not one job's
            output (retriable; nothing committed).
    """
    import pyarrow.parquet as pq
    from deltalake.fs import DeltaStorageHandler
    from deltalake.transaction import AddAction
    from pyarrow.fs import FileSelector, FileType, PyFileSystem

    fs = PyFileSystem(DeltaStorageHandler(table.delta_rs_uri, table.storage_options()))
    adds: list[AddAction | RemoveAction] = []
    # S3A keeps a marker object for the folder itself (Hadoop 3.4 keeps directory markers): not a file of the job.
    files = [
        info
        for info in fs.get_file_info(FileSelector(folder))
        if info.type == FileType.File and not info.base_name.startswith(("_", ".")) and info.path.rstrip("/") != folder
    ]
    if committed is None:
        _check_one_job(table, folder, [info.base_name for info in files])
    else:
        _check_committed(table, folder, {info.base_name: info.size or 0 for info in files}, committed)
    for info in files:
        with fs.open_input_file(info.path) as handle:
            footer = pq.read_metadata(handle)
        if footer.num_rows == 0:
            continue
        adds.append(
            AddAction(
                path=f"{folder}/{info.base_name}",
                size=info.size or 0,
                partition_values={},
                modification_time=_epoch_ms(info.mtime),
                data_change=True,
                stats=json.dumps(file_stats(footer)),
            )
        )
    return adds


def _job_files(table: TableRef, folder: str) -> dict[str, int]:
    """The files the write's job committed into ``folder`` (name: size), from the manifests its job commit kept.

    Raises:
        SparkJobError: the job's _SUCCESS summary or its manifests are missing, unreadable, or disagree with each
            other (retriable: nothing was committed, the next run writes the run into a new folder).
    """
    from deltalake.fs import DeltaStorageHandler
    from pyarrow.fs import FileSelector, PyFileSystem

    fs = PyFileSystem(DeltaStorageHandler(table.delta_rs_uri, table.storage_options()))
    where = f"the staging folder {table}/{folder}"
    try:
        summary = json.loads(_read_text(fs, f"{folder}/{_SUCCESS}"))
        if summary.get("committer") != _MANIFEST_COMMITTER or summary.get("success") is not True:
            raise _refusal(f"{where} was not written by a successful manifest committer job")
        job = str(summary["jobId"])
        count = int(summary["iostatistics"]["counters"][_FILES_COMMITTED])
        manifests = [
            info.path
            for info in fs.get_file_info(FileSelector(f"{folder}/{_MANIFESTS}/{job}", allow_not_found=True))
            if info.base_name.endswith("-manifest.json") and not info.base_name.startswith(".")
        ]
        files: dict[str, int] = {}
        for path in manifests:
            for entry in json.loads(_read_text(fs, path))["files"]:
                parent, _, name = str(entry["d"]).rpartition("/")
                if not parent.endswith(f"/{folder}"):
                    raise _refusal(f"the job's manifest {path} names a file outside {where}: {entry['d']}")
                files[name] = int(entry["z"])
    except FileNotFoundError as e:
        raise _refusal(f"{where} has no manifest of the job that wrote it ({mask_secrets(str(e))})") from e
    except (KeyError, TypeError, ValueError) as e:
        raise _refusal(f"{where}: the job's manifests cannot be read ({type(e).__name__}: {e})") from e
    if len(files) != count:
        raise _refusal(f"{where}: the job committed {count} file(s) but its manifests name {len(files)}")
    return files


def _read_text(fs: Any, path: str) -> str:
    with fs.open_input_stream(path) as handle:
        return str(handle.read().decode())


def _refusal(what: str) -> SparkJobError:
    return SparkJobError(
        f"{what}; nothing was committed, so no record can land twice.",
        hint="Run again: the next run writes the run into a new folder. Nothing but dynamic-kafka may write into "
        f"{_FOLDER_PREFIX}* folders of a sink.",
    )


def _check_one_job(table: TableRef, folder: str, names: list[str]) -> None:
    """Refuses a file committer's staging folder that holds anything but the output files of one Spark job.

    The folder is this attempt's own, so its visible files are the tasks the write's job committed; a file that is
    not named as a job's output, or files of two jobs, mean something else wrote there. A file named as this job's
    output that the job did not commit cannot be told apart: only the manifest committer's writes close that.

    Raises:
        SparkJobError: the folder holds other files (retriable: the next run writes the run into a new folder).
    """
    jobs = {match.group("job") if (match := _JOB_FILE.match(name)) else None for name in names}
    if len(jobs) <= 1 and None not in jobs:
        return
    shown = ", ".join(sorted(names)[:6]) + (" ..." if len(names) > 6 else "")
    raise _refusal(
        f"the staging folder {table}/{folder} holds files that are not the output of one Spark job ({shown})"
    )


def _check_committed(table: TableRef, folder: str, stored: dict[str, int], committed: dict[str, int]) -> None:
    """Refuses a staging folder whose visible files are not exactly the ones its job committed (same names, same
    sizes): a file the job did not commit (another writer's, a retried task attempt's) would land records twice,
    a missing one would lose them.

    Raises:
        SparkJobError: they differ (retriable: the next run writes the run into a new folder).
    """
    if stored == committed:
        return
    extra = sorted(set(stored) - set(committed))
    missing = sorted(set(committed) - set(stored))
    resized = sorted(n for n in set(stored) & set(committed) if stored[n] != committed[n])
    parts = [
        f"{label}: {', '.join(names[:6])}{' ...' if len(names) > 6 else ''}"
        for label, names in (("not committed by its job", extra), ("missing", missing), ("other size", resized))
        if names
    ]
    raise _refusal(f"the staging folder {table}/{folder} does not hold exactly its job's files ({'; '.join(parts)})")


def file_stats(footer: Any) -> dict[str, Any]:
    """Delta file statistics from a Parquet footer (``pyarrow.parquet.FileMetaData``): the record count, and the
    minimum, maximum and null count of each coordinate column whose every row group has them.

    A column is left out rather than given a guessed bound: a missing statistic only stops files from being
    skipped, a wrong one would hide rows.
    """
    stats: dict[str, Any] = {"numRecords": footer.num_rows, "minValues": {}, "maxValues": {}, "nullCount": {}}
    groups = [footer.row_group(g) for g in range(footer.num_row_groups)]
    for index in range(footer.num_columns):
        name = footer.schema.column(index).path
        if name not in _STATS:
            continue
        column = [(group.num_rows, group.column(index).statistics) for group in groups]
        if any(s is None or s.null_count is None for _, s in column):
            continue
        stats["nullCount"][name] = sum(s.null_count for _, s in column)
        valued = [s for rows, s in column if s.null_count < rows]
        if not valued or not all(s.has_min_max for s in valued):
            continue
        low, high = min(s.min for s in valued), max(s.max for s in valued)
        if isinstance(low, (int, str)) and isinstance(high, (int, str)):
            stats["minValues"][name], stats["maxValues"][name] = low, high
        elif isinstance(low, datetime) and isinstance(high, datetime):
            stats["minValues"][name], stats["maxValues"][name] = _millis(low, up=False), _millis(high, up=True)
    return stats


def _millis(moment: datetime, *, up: bool) -> str:
    """A UTC timestamp in Delta's statistics format (milliseconds), rounded away from the inside of the range."""
    at = moment.astimezone(UTC)
    whole = at.replace(microsecond=at.microsecond // 1000 * 1000)
    if up and whole != at:
        whole += timedelta(milliseconds=1)
    return whole.strftime("%Y-%m-%dT%H:%M:%S.") + f"{whole.microsecond // 1000:03d}Z"


def _epoch_ms(moment: datetime | None) -> int:
    return int((moment or datetime.now(UTC)).timestamp() * 1000)


def _plain(field: dict[str, Any]) -> bool:
    """Nullable, without metadata (no comment, invariant or generation expression), and so every nested field."""
    if not field.get("nullable", False) or field.get("metadata"):
        return False
    return _plain_type(field["type"])


def _plain_type(data_type: Any) -> bool:
    if not isinstance(data_type, dict):
        return True
    kind = data_type["type"]
    if kind == "struct":
        return all(_plain(f) for f in data_type["fields"])
    if kind == "array":
        return bool(data_type.get("containsNull")) and _plain_type(data_type["elementType"])
    if kind == "map":
        return (
            bool(data_type.get("valueContainsNull"))
            and _plain_type(data_type["keyType"])
            and _plain_type(data_type["valueType"])
        )
    return True


def _by_name(fields: list[dict[str, Any]]) -> dict[str, Any]:
    """Top-level fields by name (readers match Parquet columns to table columns by name)."""
    return {f["name"]: (f["type"], f["nullable"]) for f in fields}
