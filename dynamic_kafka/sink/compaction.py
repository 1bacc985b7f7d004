"""Housekeeping of one Delta table the pipeline writes (its sink or dead-letter table): compaction, vacuum, and the
leftovers of killed writes that VACUUM does not reach. JVM-free (delta-rs), like the state's own maintenance.

- Compaction (``OPTIMIZE``) rewrites the current version's small files into few large ones; the rows do not
  change, and neither do the runs' Delta transactions, so recovery checks and staged appends work as before.
- ``VACUUM`` (full mode) deletes the files no version within the retention period references: the ones the
  compaction replaced, and the visible files of writes that never committed.
- What VACUUM skips because the name is hidden (it ignores names starting with ``_`` or ``.``), see
  :func:`remove_leftovers`: a staged write's ``_temporary`` task folders (a job killed before its commit), the
  checksum files (``.<file>.crc``) local disk keeps beside files that are gone, and the attempt folders
  (:mod:`~dynamic_kafka.sink.staged_append`) left empty once their files were vacuumed.

The caller holds the pipeline's run lock and writer lease: nothing here checks for a writer beside it.
"""

from __future__ import annotations

import logging
import shutil
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from deltalake.exceptions import DeltaError
from pydantic import Field

from dynamic_kafka.errors import DynamicKafkaError, SparkJobError
from dynamic_kafka.frozen import FrozenModel
from dynamic_kafka.sink.leftovers import remove_finished_runs
from dynamic_kafka.sink.tables import open_delta_rs, safe_text

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from deltalake import DeltaTable as DeltaTableRs

    from dynamic_kafka.storage import TableRef

logger = logging.getLogger(__name__)

_LOG_FOLDER = "_delta_log"
# Spark's (Hadoop's) task output folder, and the staged writes' run folders (staged_append._FOLDER_PREFIX).
_TEMPORARY = "_temporary"
_RUN_FOLDER_PREFIX = "dk-run-"
# What delta-rs and pyarrow raise.
_FOREIGN = (DeltaError, OSError, pa.ArrowException)


class FileCounts(FrozenModel):
    """A number of files and their bytes."""

    files: int = 0
    bytes: int = 0


class TableFiles(FrozenModel):
    """A table's files at one moment: the current version's data files, and every file stored under the table
    but its log (files of earlier versions and of writes that never committed included).
    """

    version: int
    rows: int = Field(description="Rows of the current version (from the log's per-file statistics).")
    current: FileCounts = Field(description="The current version's data files.")
    stored: FileCounts = Field(description="Every file under the table's folder but its _delta_log.")


class TableMaintenance(FrozenModel):
    """What maintenance did to one table."""

    role: str = Field(description="'sink' or 'dead_letter'.")
    table: str = Field(description="The table's location.")
    before: TableFiles | None = Field(description="None: there is no table (nothing was done).")
    after: TableFiles | None = None
    compacted_files: int = Field(0, description="Files the compaction replaced.")
    vacuumed_files: int = Field(0, description="Files the vacuum deleted.")
    leftovers_removed: int = Field(0, description="Hidden leftovers of killed writes removed (VACUUM skips them).")


def table_files(table: TableRef) -> TableFiles | None:
    """The table's files now (JVM-free); None when there is no table.

    Raises:
        ObjectStoreError: the table's object store cannot be used.
        SparkJobError: the log cannot be read (retriable).
    """
    opened = open_delta_rs(table, doing=f"reading the Delta log of {table}")
    if opened is None:
        return None
    actions = opened.get_add_actions(flatten=True)
    sizes = actions.column("size_bytes").to_pylist()
    counts = actions.column("num_records").to_pylist()
    return TableFiles(
        version=opened.version(),
        rows=sum(c or 0 for c in counts),
        current=FileCounts(files=len(sizes), bytes=sum(s or 0 for s in sizes)),
        stored=_stored(table),
    )


def compact(table: TableRef) -> int:
    """Compacts the current version's small files into few large ones (delta-rs ``optimize.compact``); returns
    the number of files it replaced. One commit, rows unchanged; statistics as the table's settings say.

    Raises:
        SparkJobError: the compaction failed (retriable; nothing changed: it commits once, at its end).
        ObjectStoreError: the table's object store cannot be used.
    """
    doing = f"compacting the Delta table {table}"
    opened = _open(table, doing)
    try:
        metrics = opened.optimize.compact(commit_properties=_props("compact"))
    except _FOREIGN as e:
        raise _failure(table, e, doing) from e
    return int(metrics.get("numFilesRemoved", 0))


def vacuum(table: TableRef, retention_hours: int | None) -> int:
    """Deletes the files no version of the last ``retention_hours`` references (delta-rs ``vacuum`` in full mode:
    the files earlier versions replaced, and the visible files of writes that never committed, by age); returns
    how many. None keeps the table's own ``delta.deletedFileRetentionDuration`` (7 days by default). A retention
    below the table's is allowed: the caller holds the writers off, and the cost, older versions that can no
    longer be read, is the user's choice.

    Raises:
        SparkJobError: the vacuum failed (retriable; what it deleted was unreferenced).
        ObjectStoreError: the table's object store cannot be used.
    """
    doing = f"vacuuming the Delta table {table}"
    opened = _open(table, doing)
    try:
        deleted = opened.vacuum(
            retention_hours=retention_hours,
            dry_run=False,
            enforce_retention_duration=retention_hours is None,
            full=True,
            commit_properties=_props("vacuum"),
        )
    except _FOREIGN as e:
        raise _failure(table, e, doing) from e
    return len(deleted)


def _open(table: TableRef, doing: str) -> DeltaTableRs:
    opened = open_delta_rs(table, doing=doing)
    if opened is None:
        raise SparkJobError(f"{doing}: there is no Delta table there any more.", hint="Run the maintenance again.")
    return opened


def _props(operation: str) -> Any:
    from deltalake import CommitProperties

    return CommitProperties(custom_metadata={"dynamicKafkaMaintenance": operation})


def _failure(table: TableRef, error: Exception, doing: str) -> DynamicKafkaError:
    return table.failure(error, doing) or SparkJobError(
        f"{doing} failed: {safe_text(error)}", hint="The table is as before this step; run the maintenance again."
    )


def remove_leftovers(table: TableRef, older_than: timedelta) -> int:
    """Removes what VACUUM leaves of killed writes, when older than ``older_than``: ``_temporary`` folders,
    checksum files of files that are gone, and empty folders under the staged writes' run folders. Returns how
    many files and folders were removed.

    ``_delta_log`` is never touched, and no file a version references is: Delta never references hidden names.
    On object storage only ``_temporary`` prefixes exist (no checksum files, no empty folders).

    Raises:
        ObjectStoreError: the table's object store cannot be used.
    """
    cutoff = datetime.now(UTC) - older_than
    if table.location.is_local:
        return _remove_local(table.location.local_path, cutoff.timestamp())
    return _remove_stored(table, cutoff)


def _remove_local(root: Path, cutoff: float) -> int:
    if not root.is_dir():
        return 0
    removed = 0
    for temporary in sorted(p for p in root.rglob(_TEMPORARY) if _data_path(root, p) and p.is_dir()):
        if temporary.exists() and _newest_mtime(temporary) < cutoff:
            shutil.rmtree(temporary)
            removed += 1
    for checksum in sorted(root.rglob(".*.crc")):
        if not _data_path(root, checksum):
            continue
        checked = checksum.with_name(checksum.name[1:].removesuffix(".crc"))
        if not checked.exists() and checksum.stat().st_mtime < cutoff:
            checksum.unlink()
            removed += 1
    # Deepest first, so a run folder whose attempt folders were all empty goes too.
    run_folders = [p for p in root.iterdir() if p.is_dir() and p.name.startswith(_RUN_FOLDER_PREFIX)]
    for folder in run_folders:
        for entry in sorted((p for p in folder.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            if not any(entry.iterdir()):
                entry.rmdir()
                removed += 1
        if not any(folder.iterdir()):
            folder.rmdir()
            removed += 1
    return removed


def _data_path(root: Path, path: Path) -> bool:
    """Whether ``path`` is under the table's data folders (not its log)."""
    return path.relative_to(root).parts[0] != _LOG_FOLDER


def _newest_mtime(folder: Path) -> float:
    return max((p.stat().st_mtime for p in folder.rglob("*")), default=folder.stat().st_mtime)


def _remove_stored(table: TableRef, cutoff: datetime) -> int:
    from deltalake.fs import DeltaStorageHandler
    from pyarrow.fs import FileSelector, FileType, PyFileSystem

    fs = PyFileSystem(DeltaStorageHandler(table.delta_rs_uri, table.storage_options()))
    stale: set[str] = set()
    fresh: set[str] = set()
    for info in fs.get_file_info(FileSelector("", recursive=True)):
        parts = info.path.split("/")
        if info.type != FileType.File or parts[0] == _LOG_FOLDER or _TEMPORARY not in parts:
            continue
        prefix = "/".join(parts[: parts.index(_TEMPORARY) + 1])
        mtime = info.mtime
        (stale if mtime is not None and mtime.astimezone(UTC) < cutoff else fresh).add(prefix)
    for prefix in sorted(stale - fresh):
        fs.delete_dir(prefix)
    return len(stale - fresh)


def _stored(table: TableRef) -> FileCounts:
    """Every file under the table's folder but its log."""
    if table.location.is_local:
        root = table.location.local_path
        sizes = [p.stat().st_size for p in root.rglob("*") if p.is_file() and _data_path(root, p)]
        return FileCounts(files=len(sizes), bytes=sum(sizes))
    from deltalake.fs import DeltaStorageHandler
    from pyarrow.fs import FileSelector, FileType, PyFileSystem

    fs = PyFileSystem(DeltaStorageHandler(table.delta_rs_uri, table.storage_options()))
    infos = [
        info
        for info in fs.get_file_info(FileSelector("", recursive=True))
        if info.type == FileType.File and info.path.split("/")[0] != _LOG_FOLDER
    ]
    return FileCounts(files=len(infos), bytes=sum(info.size or 0 for info in infos))


def maintain_table(
    table: TableRef,
    role: str,
    *,
    retention_hours: int | None,
    before_write: Callable[[], None],
    finished_run: tuple[str, int] | None = None,
) -> TableMaintenance:
    """Removes what staged writes of finished runs left, compacts, vacuums and clears the other leftovers of one
    table; ``before_write`` runs before each step and stops them by raising (the caller's lease check). Nothing is
    done when there is no table.

    ``finished_run``: (pipeline id, run_seq) of the pipeline's last finished run (committed or abandoned): the
    staging folders of it and earlier runs are cleared whatever their age (:mod:`~dynamic_kafka.sink.leftovers`).
    """
    before = table_files(table)
    if before is None:
        return TableMaintenance(role=role, table=str(table), before=None)
    started = time.monotonic()
    cleared = 0
    if finished_run is not None:
        before_write()
        # Before the compaction: the current version still references each finished run's landed attempt, so
        # the log is read only for runs with other attempts.
        cleared = remove_finished_runs(table, *finished_run)
    before_write()
    compacted = compact(table)
    before_write()
    vacuumed = vacuum(table, retention_hours)
    before_write()
    # Leftovers get the same grace as VACUUM's files (the table's default when none is given).
    grace = timedelta(hours=retention_hours if retention_hours is not None else _table_retention_hours(table))
    removed = remove_leftovers(table, grace)
    after = table_files(table)
    logger.info(
        "%s %s maintained in %.1fs: %d -> %d current files, %d -> %d stored files",
        role,
        table,
        time.monotonic() - started,
        before.current.files,
        after.current.files if after else 0,
        before.stored.files,
        after.stored.files if after else 0,
    )
    return TableMaintenance(
        role=role,
        table=str(table),
        before=before,
        after=after,
        compacted_files=compacted,
        vacuumed_files=vacuumed,
        leftovers_removed=removed + cleared,
    )


_DEFAULT_RETENTION_HOURS = 7 * 24.0


def _table_retention_hours(table: TableRef) -> float:
    """The table's ``delta.deletedFileRetentionDuration`` in hours ('interval 7 days' by default)."""
    opened = open_delta_rs(table, doing=f"reading the Delta log of {table}")
    text = opened.metadata().configuration.get("delta.deletedFileRetentionDuration") if opened else None
    if not text:
        return _DEFAULT_RETENTION_HOURS
    words = text.lower().removeprefix("interval").split()
    units = {"hour": 1.0, "hours": 1.0, "day": 24.0, "days": 24.0, "week": 168.0, "weeks": 168.0}
    try:
        return float(words[0]) * units[words[1]]
    except (IndexError, KeyError, ValueError):
        logger.warning("table %s: retention %r not understood; leftovers wait 7 days", table, text)
        return _DEFAULT_RETENTION_HOURS
