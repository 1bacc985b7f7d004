"""What staged writes of finished runs leave in a table's folder, and its removal.

A run's staged writes go into ``dk-run-<run_seq>-<pipeline id>/<attempt>/`` (:mod:`~dynamic_kafka.sink.
staged_append`). Once the run is finished (committed, or abandoned: its transaction is in the table, as rows or
as a fence, or the state moved past it), at most one attempt of it is referenced by the log: the one whose commit
recorded the run's transaction. Every other attempt (a killed write's files, a late writer's) can never be
committed, since the transaction is taken, and the hidden files of all of them (the job's ``_SUCCESS`` summary and
manifests, ``_temporary`` task folders, local checksums) are never referenced by Delta at all. VACUUM removes the
visible ones only after the retention period and never the hidden ones; this module removes them as soon as the
run is finished:

- the attempt that commits a run removes the others itself (``staged_append``); when it died before that, the
  run's recovery finds the run in the table and removes them (:func:`remove_unlanded_attempts`);
- maintenance sweeps the folders of every finished run of the pipeline (:func:`remove_finished_runs`), which
  covers runs abandoned before abandoning removed their folders.

Which attempt landed is read from the log entry of the version holding the run's transaction; when the log no
longer has it (log retention), only the hidden files are removed and the visible ones are left to VACUUM.
"""

from __future__ import annotations

import logging
import re
import shutil
from typing import TYPE_CHECKING

from deltalake.exceptions import DeltaError

from dynamic_kafka.errors import DynamicKafkaError
from dynamic_kafka.secrets import mask_secrets
from dynamic_kafka.sink.staged_append import run_folder_name
from dynamic_kafka.sink.tables import open_delta_rs, run_commit

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable

    from dynamic_kafka.storage import TableRef

logger = logging.getLogger(__name__)

_RUN_FOLDER = re.compile(r"^dk-run-(?P<seq>\d+)-(?P<app>.+)$")
_HIDDEN = ("_", ".")


def remove_unlanded_attempts(table: TableRef, app_id: str, run_seq: int) -> int:
    """Removes the staging attempts of the finished run ``run_seq`` that no version of ``table`` references, and
    the hidden files of the one that landed; returns how many files and folders were removed.

    A failure is logged, never raised: the run's outcome stands, and maintenance tries again.
    """
    folder = run_folder_name(app_id, run_seq)
    try:
        if not _entries(table, folder):
            return 0
        return _clear(table, folder, _landed_attempts(table, app_id, run_seq))
    except (DynamicKafkaError, DeltaError, OSError) as e:
        logger.warning("leftovers of run %d not removed from %s: %s", run_seq, table, mask_secrets(str(e)))
        return 0


def remove_finished_runs(table: TableRef, app_id: str, finished_seq: int) -> int:
    """Removes what staged writes of runs ``<= finished_seq`` of ``app_id`` left in ``table`` (see the module's
    text); returns how many files and folders were removed. Folders of later runs (a run in flight) are not
    touched.

    Cost: one listing of the table's folder and of each finished run's folder; the log is read only for a run
    folder holding an attempt the current version does not reference (a killed write, or files compacted away).

    Raises:
        ObjectStoreError: the table's object store cannot be used.
        SparkJobError: the log cannot be read (retriable).
    """
    matches = [(_RUN_FOLDER.match(name), name) for name, is_dir in _entries(table, "") if is_dir]
    folders = sorted(
        (int(m.group("seq")), name)
        for m, name in matches
        if m is not None and m.group("app") == app_id and int(m.group("seq")) <= finished_seq
    )
    if not folders:
        return 0
    opened = open_delta_rs(table, doing=f"reading the Delta log of {table}")
    actions = opened.get_add_actions(flatten=True) if opened is not None else None
    paths = [str(path) for path in actions.column("path").to_pylist()] if actions is not None else []
    current = _attempts_of(paths, "")
    removed = 0
    for seq, folder in folders:
        attempts = {name for name, _ in _entries(table, folder)}
        referenced = {attempt for run, attempt in current if run == folder}
        if attempts <= referenced:
            removed += _clear(table, folder, referenced)
        else:
            removed += _clear(table, folder, _landed_attempts(table, app_id, seq))
    return removed


def _landed_attempts(table: TableRef, app_id: str, run_seq: int) -> set[str] | None:
    """The attempt folders of the run's commit in ``table`` (empty: no version holds the run, or its commit is
    a fence); None when the log no longer says (the version holding it is gone).
    """
    commit = run_commit(table, app_id, run_seq)
    if commit is None:
        return set()
    if (app_id, run_seq) not in commit.txns:
        return None
    folder = run_folder_name(app_id, run_seq)
    return {attempt for run, attempt in _attempts_of(commit.added_paths, folder) if run == folder}


def _attempts_of(paths: Iterable[str], folder: str) -> set[tuple[str, str]]:
    """(run folder, attempt) of each staged file among ``paths`` (under ``folder`` when given)."""
    found = set()
    for path in paths:
        parts = path.split("/")
        if len(parts) == 3 and _RUN_FOLDER.match(parts[0]) and (not folder or parts[0] == folder):
            found.add((parts[0], parts[1]))
    return found


def _clear(table: TableRef, folder: str, kept: Collection[str] | None) -> int:
    """Removes from run folder ``folder`` every attempt not in ``kept`` and the hidden entries of those in it (with
    ``kept`` None: only hidden entries, at both levels); the run folder goes too once empty.
    """
    removed = 0
    for name, is_dir in _entries(table, folder):
        path = f"{folder}/{name}"
        if name.startswith(_HIDDEN) or (kept is not None and name not in kept):
            _delete(table, path, is_dir=is_dir)
            removed += 1
        elif is_dir:
            for inner, inner_dir in _entries(table, path):
                if inner.startswith(_HIDDEN):
                    _delete(table, f"{path}/{inner}", is_dir=inner_dir)
                    removed += 1
    # Object stores have no empty folders.
    if table.location.is_local and not _entries(table, folder):
        _delete(table, folder, is_dir=True)
        removed += 1
    return removed


def _entries(table: TableRef, folder: str) -> list[tuple[str, bool]]:
    """(name, is a folder) of each entry of ``folder`` (the table's root for ""); empty when it does not exist."""
    if table.location.is_local:
        path = table.location.local_path / folder
        return [(e.name, e.is_dir()) for e in path.iterdir()] if path.is_dir() else []
    from deltalake.fs import DeltaStorageHandler
    from pyarrow.fs import FileSelector, FileType, PyFileSystem

    fs = PyFileSystem(DeltaStorageHandler(table.delta_rs_uri, table.storage_options()))
    infos = fs.get_file_info(FileSelector(folder, allow_not_found=True))
    return [(info.base_name, info.type == FileType.Directory) for info in infos]


def _delete(table: TableRef, path: str, *, is_dir: bool) -> None:
    if table.location.is_local:
        local = table.location.local_path / path
        if is_dir:
            shutil.rmtree(local, ignore_errors=True)
        else:
            local.unlink(missing_ok=True)
        return
    from deltalake.fs import DeltaStorageHandler
    from pyarrow.fs import PyFileSystem

    fs = PyFileSystem(DeltaStorageHandler(table.delta_rs_uri, table.storage_options()))
    if is_dir:
        fs.delete_dir(path)
    else:
        fs.delete_file(path)
