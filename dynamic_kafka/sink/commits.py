"""Commits of a pipeline's Delta tables, read from the log entries themselves: whose commit a version holds.

A run commits its offsets only after finding its own commit in the sink. The transaction ``(pipeline id, run_seq)``
says that *a* writer landed the run; the commit id says that this write did. Every append of a run carries a fresh
commit id in its ``commitInfo`` (delta-spark: the ``userMetadata`` write option, as JSON; delta-rs: a field of
its own), as the state table's commits do.

Why look at all: delta-spark's log stores on a local path (check, then rename) and on S3 (HEAD, then PUT) are
mutually exclusive within one JVM only. A delta-spark writer in another process (a user's OPTIMIZE, DELETE or
VACUUM, a second Spark application) that wrote the same version at the same moment replaces the entry of whichever
commit came first, and that commit's files, transaction included, are in no version although its writer was told
it succeeded (docs/object-storage.md, "Who else may write a sink").

Entries are read through delta-rs's object store (local disk, S3): one GET per version, no log replay.
"""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from pydantic import Field

from dynamic_kafka.errors import SparkJobError
from dynamic_kafka.frozen import FrozenModel
from dynamic_kafka.secrets import mask_secrets

if TYPE_CHECKING:
    from pyarrow.fs import FileSystem

    from dynamic_kafka.storage import TableRef

COMMIT_ID_KEY = "dynamic_kafka.commit_id"
"""The ``commitInfo`` field (delta-rs) or ``userMetadata`` JSON key (delta-spark) holding a write's commit id."""


def new_commit_id() -> str:
    """A fresh commit id for one write."""
    return uuid.uuid4().hex


def user_metadata(commit_id: str) -> str:
    """delta-spark's ``userMetadata`` write option carrying ``commit_id`` (shown by ``DESCRIBE HISTORY``)."""
    return json.dumps({COMMIT_ID_KEY: commit_id})


class AddedFile(FrozenModel):
    """One data file a log entry added."""

    path: str = Field(description="Relative to the table's root (decoded), or absolute as the entry gave it.")
    size: int | None = Field(None, description="Its bytes, as the entry says.")
    partition_values: dict[str, str | None] = Field(
        default_factory=dict, description="Its partition columns' values as the entry writes them (text or null)."
    )


class RunFiles(FrozenModel):
    """The data files the commit holding a run added to one table: what the run's completeness reads."""

    table: str = Field(description="The table's location (``str`` of its TableRef).")
    version: int
    files: tuple[AddedFile, ...]


class Commit(FrozenModel):
    """One version's log entry: who wrote it, which transactions and how many records it added."""

    version: int
    info: dict[str, Any] = Field(description="The entry's commitInfo (empty when it has none).")
    txns: tuple[tuple[str, int], ...] = Field(description="(app id, version) of each txn action.")
    added_records: int = Field(description="numRecords over the entry's data-changing adds (0 without stats).")
    added_files: tuple[AddedFile, ...] = Field((), description="The entry's adds.")

    @property
    def added_paths(self) -> tuple[str, ...]:
        """The paths (relative, decoded) of the entry's adds."""
        return tuple(f.path for f in self.added_files)

    def files_in(self, table: TableRef) -> RunFiles:
        """The files this commit added, as those of ``table``."""
        return RunFiles(table=str(table), version=self.version, files=self.added_files)

    @property
    def commit_id(self) -> str | None:
        """The dynamic-kafka commit id the entry carries, from either engine; None for a foreign commit."""
        found = self.info.get(COMMIT_ID_KEY)
        if isinstance(found, str):
            return found
        metadata = self.info.get("userMetadata")
        if isinstance(metadata, str):
            try:
                parsed = json.loads(metadata)
            except ValueError:
                return None
            found = parsed.get(COMMIT_ID_KEY) if isinstance(parsed, dict) else None
            return found if isinstance(found, str) else None
        return None

    def describe(self) -> str:
        """Who wrote it, for messages: ``version 7 (OPTIMIZE by Apache-Spark/4.1.3 Delta-Lake/4.4.0)``."""
        return f"version {self.version} ({describe_writer(self.info, self.txns)})"


def describe_writer(info: dict[str, Any], txns: tuple[tuple[str, int], ...] = ()) -> str:
    """``OPERATION by ENGINE``, and the transactions it recorded, from a commitInfo."""
    operation = str(info.get("operation") or "a commit without commitInfo")
    engine = info.get("engineInfo") or info.get("clientVersion")
    text = f"{operation} by {engine}" if engine else operation
    if txns:
        text += ", transaction " + ", ".join(f"{app} {version}" for app, version in txns)
    return mask_secrets(text)


def read_commit(table: TableRef, version: int) -> Commit | None:
    """The log entry of ``version``; None when there is none (not written yet, or removed by log retention).

    Raises:
        SparkJobError: the entry exists but cannot be read or parsed (retriable).
        ObjectStoreError: the table's object store cannot be used.
    """
    from pyarrow.fs import FileType

    path = f"_delta_log/{version:020d}.json"
    doing = f"reading version {version} of the Delta log of {table}"
    try:
        fs = table_filesystem(table)
        if fs.get_file_info(path).type != FileType.File:
            return None
        with fs.open_input_stream(path) as handle:
            text = handle.read().decode()
    except OSError as e:
        raise table.failure(e, doing) or SparkJobError(f"{doing} failed: {mask_secrets(str(e))}") from e
    info: dict[str, Any] = {}
    txns: list[tuple[str, int]] = []
    records = 0
    added: list[AddedFile] = []
    try:
        for line in text.splitlines():
            if not line.strip():
                continue
            action = json.loads(line)
            if "commitInfo" in action:
                info = dict(action["commitInfo"])
            elif "txn" in action:
                txns.append((str(action["txn"]["appId"]), int(action["txn"]["version"])))
            elif "add" in action:
                add = action["add"]
                added.append(
                    AddedFile(
                        path=unquote(str(add["path"])),
                        size=add.get("size"),
                        partition_values=dict(add.get("partitionValues") or {}),
                    )
                )
                if add.get("dataChange", True) and add.get("stats"):
                    records += int(json.loads(add["stats"]).get("numRecords") or 0)
    except (ValueError, KeyError, TypeError) as e:
        raise SparkJobError(f"{doing}: the entry is not a Delta commit ({e})") from e
    return Commit(version=version, info=info, txns=tuple(txns), added_records=records, added_files=tuple(added))


def table_filesystem(table: TableRef, known_sizes: dict[str, int] | None = None) -> FileSystem:
    """A pyarrow file system rooted at ``table``'s folder, through delta-rs's object store with the table's storage
    options (local disk, S3 with the pipeline's credentials, which never leave the options). ``known_sizes`` (by
    path) spare a HEAD request per file opened.
    """
    from deltalake.fs import DeltaStorageHandler
    from pyarrow.fs import PyFileSystem

    return PyFileSystem(DeltaStorageHandler(table.delta_rs_uri, table.storage_options(), known_sizes))


def first_with_txn(table: TableRef, after: int, latest: int, app_id: str) -> Commit | None:
    """The first commit in versions ``after + 1 .. latest`` that recorded a transaction of ``app_id``."""
    for version in range(after + 1, latest + 1):
        commit = read_commit(table, version)
        if commit is not None and any(app == app_id for app, _ in commit.txns):
            return commit
    return None


def recent_foreign_commits(table: TableRef, latest: int, depth: int = 5) -> list[Commit]:
    """The commits among the last ``depth`` versions up to ``latest`` that carry no dynamic-kafka commit id,
    newest first.
    """
    found = []
    for version in range(latest, max(-1, latest - depth), -1):
        commit = read_commit(table, version)
        if commit is not None and commit.commit_id is None:
            found.append(commit)
    return found
