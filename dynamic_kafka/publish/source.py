"""The published table, read with delta-rs (no JVM): per version, the rows of the files it added, or its changes.

A version's rows are those of ``files(v) - files(v-1)``. A version that removed files changed or deleted rows,
which an append-only table cannot express: it is refused, except a compaction (``OPTIMIZE``), which rewrites rows
without changing them and so publishes nothing. A version of a table with Change Data Feed
(``delta.enableChangeDataFeed=true`` in that version's metadata) is read through the feed instead: its inserts,
update images and deletes, filtered by ``change_types``, each record with its change type in a header.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.dataset as pds

from dynamic_kafka.errors import PublicationError
from dynamic_kafka.publish.protocol import VersionChange
from dynamic_kafka.publish.records import plain_encoders, to_records
from dynamic_kafka.sink.tables import open_delta_rs, safe_text

if TYPE_CHECKING:
    from deltalake import DeltaTable

    from dynamic_kafka.publish.config import PublicationConfig
    from dynamic_kafka.publish.protocol import OutgoingRecord
    from dynamic_kafka.publish.records import Encoders

# Operations that rewrite files without changing the rows they hold.
_NO_DATA_CHANGE = frozenset({"OPTIMIZE", "VACUUM START", "VACUUM END"})
_CHANGE_TYPE = "_change_type"
# The columns the change feed adds to the table's own.
_FEED_COLUMNS = (_CHANGE_TYPE, "_commit_version", "_commit_timestamp")


class DeltaVersionSource:
    """The table of ``config``, as versions and the records of the rows each added."""

    def __init__(self, config: PublicationConfig, encoders: Encoders | None = None) -> None:
        """``encoders``: how rows become keys and values (default: the plain formats, JSON or a column)."""
        self.config = config
        self.encoders = encoders or plain_encoders(config)
        self._added: dict[int, list[str]] = {}
        self._feed: set[int] = set()  # versions read through the change feed

    def _open(self, version: int | None = None) -> DeltaTable | None:
        return open_delta_rs(
            self.config.table_ref, doing=f"reading the published table {self.config.table}", version=version
        )

    def latest_version(self) -> int | None:
        """The table's newest version; None while there is no table."""
        table = self._open()
        return None if table is None else table.version()

    def starting_version(self) -> int:
        """The first version to publish when no cluster has progress: ``starting_version``, or the first version
        committed at or after ``starting_timestamp``, else 0.
        """
        if self.config.starting_version is not None or self.config.starting_timestamp is None:
            return self.config.starting_version or 0
        table = self._open()
        if table is None:
            return 0
        since_ms = int(self.config.starting_timestamp.timestamp() * 1000)
        later = [int(h["version"]) for h in table.history() if int(h["timestamp"]) >= since_ms]
        return min(later) if later else table.version() + 1

    def changes(self, start: int, stop: int) -> list[VersionChange]:
        """Every version in ``[start, stop]`` with the rows it added (or its changes, with Change Data Feed).

        Raises:
            PublicationError: a version without Change Data Feed removed rows (not an append), or the log or change
                feed of a version is gone.
        """
        if start > stop:
            return []
        table = self._open(start - 1) if start > 0 else None
        before = _files(table) if table is not None else {}
        latest = self._open(stop)
        if latest is None:
            return []
        operations = {int(h["version"]): str(h.get("operation", "")) for h in latest.history()}
        found = []
        for version in range(start, stop + 1):
            try:
                latest.load_as_version(version)
            except Exception as e:  # delta-rs raises several kinds for a log it cannot replay
                raise self._error(version, f"its log cannot be read ({safe_text(e)})", _LOG_GONE_HINT) from e
            files = _files(latest)
            added = sorted(files.keys() - before.keys())
            removed = before.keys() - files.keys()
            operation = operations.get(version, "")
            rows = 0
            if operation in _NO_DATA_CHANGE:
                added = []
            elif _has_feed(latest):
                self._feed.add(version)
                rows = len(self._feed_rows(latest, version, columns=[_CHANGE_TYPE]))
            elif removed:
                raise self._error(
                    version,
                    f"its {operation or 'commit'} removed {len(removed)} file(s): rows were changed or deleted, "
                    "which a table without Change Data Feed cannot tell",
                    "Enable Change Data Feed on the table (delta.enableChangeDataFeed=true) to publish its changes, "
                    "publish an append-only table, or restart the publication after this version (a new "
                    "publication id with starting_version).",
                )
            else:
                rows = sum(files[p] for p in added)
            self._added[version] = added
            found.append(VersionChange(version=version, rows=rows))
            before = files
        return found

    def records(self, version: int) -> list[OutgoingRecord]:
        """The records of the rows ``version`` added, or of its changes (:meth:`changes` must have listed it)."""
        if version in self._feed:
            table = self._open(version)
            if table is None:
                raise self._error(version, "the table is gone", _LOG_GONE_HINT)
            changed = self._feed_rows(table, version)
            rows = [{k: v for k, v in row.items() if k not in _FEED_COLUMNS} for row in changed]
            kinds = [row[_CHANGE_TYPE] for row in changed]
            return to_records(self.config, rows, version, self.encoders, changes=kinds)
        added = set(self._added[version])
        if not added:
            return []
        table = self._open(version)
        if table is None:
            raise self._error(version, "the table is gone", _LOG_GONE_HINT)
        dataset = table.to_pyarrow_dataset()
        fragments = [f for f in dataset.get_fragments() if _relative(f.path, table) in added]
        if len(fragments) != len(added):
            raise self._error(version, "some of its files are missing (vacuumed?)", _LOG_GONE_HINT)
        rows = pds.FileSystemDataset(fragments, dataset.schema, dataset.format, dataset.filesystem).to_table()
        return to_records(self.config, rows.to_pylist(), version, self.encoders)

    def _feed_rows(self, table: DeltaTable, version: int, columns: list[str] | None = None) -> list[dict[str, Any]]:
        """The change feed of ``version``, only the change types the publication sends."""
        try:
            feed = pa.table(
                table.load_cdf(starting_version=version, ending_version=version, columns=columns).read_all()
            )
        except Exception as e:  # delta-rs raises several kinds for a feed it cannot read
            raise self._error(version, f"its change feed cannot be read ({safe_text(e)})", _LOG_GONE_HINT) from e
        # Filtered as Python rows: delta-rs gives string_view columns, which Arrow's filter kernels do not take.
        return [row for row in feed.to_pylist() if row[_CHANGE_TYPE] in self.config.change_types]

    def _error(self, version: int, detail: str, hint: str) -> PublicationError:
        return PublicationError(
            f"table version {version}: {detail}; nothing of it was sent.",
            publication_id=self.config.id,
            table=self.config.table.uri,
            stream_id=self.config.stream,
            version=version,
            hint=hint,
        )


_LOG_GONE_HINT = (
    "Its log or files were cleaned up before it was published: publish more often than the table's "
    "delta.logRetentionDuration and vacuum retention, or restart from a later starting_version."
)


def table_columns(config: PublicationConfig) -> pa.Schema | None:
    """The published table's columns now; None while there is no table."""
    table = open_delta_rs(config.table_ref, doing=f"reading the published table {config.table}")
    return None if table is None else pa.schema(table.schema().to_arrow())


def _has_feed(table: DeltaTable) -> bool:
    """Whether Change Data Feed is on in the table's metadata as loaded."""
    return str(table.metadata().configuration.get("delta.enableChangeDataFeed", "")).lower() == "true"


def _files(table: DeltaTable) -> dict[str, int]:
    """The table's data files with their row counts (0 when the writer kept no statistics)."""
    actions = pa.table(table.get_add_actions(flatten=True))
    counts = actions.column("num_records").to_pylist() if "num_records" in actions.column_names else []
    paths: list[Any] = actions.column("path").to_pylist()
    return {str(p): int(n or 0) for p, n in zip(paths, counts or [0] * len(paths), strict=True)}


def _relative(path: str, table: DeltaTable) -> str:
    """A dataset fragment's path relative to the table's root, as the log names it."""
    root = table.table_uri.removeprefix("file://").rstrip("/") + "/"
    return path.removeprefix(root) if path.startswith(root) else path
