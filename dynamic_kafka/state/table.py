"""The commit protocol of the state table: every write is one Delta commit at exactly the version read.

:class:`StateTable` opens the pipeline's Delta table, reads its rows and commits new ones with delta-rs
``CommitProperties(max_commit_retries=0)``, so a write lands at read version + 1 or not at all. After a failed write
it tells a lost race (``RunInProgressError``, or :class:`LostRaceError` for writes that belong to no run) from a
real failure (``StateError``), recognising its own commit by a commit id in the commit info (delta-rs can raise
after publishing). :class:`~dynamic_kafka.state.store.StateStore` decides what to write; this module only how.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake.exceptions import DeltaError, TableNotFoundError
from pydantic import ValidationError

from dynamic_kafka.errors import ConfigError, DynamicKafkaError, ObjectStoreError, RunInProgressError, StateError
from dynamic_kafka.state import rows as _rows
from dynamic_kafka.storage import StorageConfig, object_store_failure, parse_location

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from datetime import timedelta

    import pyarrow.dataset as ds

    from dynamic_kafka.model.plan import Plan, TopicPartition
    from dynamic_kafka.model.snapshots import PartitionState, RunRecord
    from dynamic_kafka.state.rows import BackfillLease, Frontier

logger = logging.getLogger(__name__)

_COMMIT_ID_KEY = "dynamic_kafka.commit_id"
STATE_FORMAT = 1
"""The layout of the state table's rows this release reads and writes (docs/versioning.md). A table records the
format it was created with at the end of its Delta description (``..., format 1``: delta-rs refuses table
properties it does not know when it creates a table, and a second commit would make creation two versions); one
without it predates the record and is format 1, the same rows (older columns are added by the next write)."""
_FORMAT_RE = re.compile(r", format (\S+)$")
CURRENT = "kind IN ('partition', 'head')"
"""The rows a commit rewrites: the partitions and the head run."""

_T = TypeVar("_T")
_VANISHED_ATTEMPTS = 5
FOREIGN_ERRORS = (DeltaError, OSError, pa.ArrowException)
"""What delta-rs and pyarrow raise; wrapped into StateError (or a lost race) here and in the store."""


class StateRows(NamedTuple):
    """The rows of a state table a read selected, by kind. Frontiers and floors are per partition (offset, topic
    id the row is for, and a frontier's stream table); ``backfill_sequence`` is 0 when no backfill raised a frontier;
    ``backfill_lease`` is the lease the backfill sequence row names (None: no backfill holds one).
    """

    head: RunRecord | None
    partitions: dict[TopicPartition, PartitionState]
    backfilled: dict[TopicPartition, Frontier]
    floors: dict[TopicPartition, tuple[int, str | None]]
    backfill_sequence: int
    backfill_lease: BackfillLease | None = None


EMPTY_ROWS = StateRows(None, {}, {}, {}, 0)
"""What a read of a state table that does not exist yet gives."""


class LostRaceError(Exception):
    """A state write that belongs to no run (a backfill frontier) lost the race for its version."""


class StateTable:
    """One pipeline's state table: open, read, and commit at an exact version.

    Args:
        path: local path or URI of the table.
        pipeline_id: the pipeline it belongs to; a table named for another pipeline is refused.
        storage_options: delta-rs storage options for object stores.
        checkpoint_interval: ``delta.checkpointInterval``, applied when the table is created.
        log_retention: ``delta.logRetentionDuration``, applied at creation.
        deleted_file_retention: ``delta.deletedFileRetentionDuration``, applied at creation.
    """

    def __init__(
        self,
        path: str,
        pipeline_id: str,
        *,
        storage_options: Mapping[str, str] | None,
        checkpoint_interval: int,
        log_retention: timedelta,
        deleted_file_retention: timedelta,
    ) -> None:
        self.path = path
        self.pipeline_id = pipeline_id
        self.storage_options = dict(storage_options) if storage_options else None
        self.checkpoint_interval = checkpoint_interval
        self.log_retention = log_retention
        self.deleted_file_retention = deleted_file_retention
        self._last_partitions: tuple[tuple[str, ...], dict[TopicPartition, PartitionState]] | None = None

    def open(self, version: int | None = None) -> DeltaTable | None:
        """Return the state table (at ``version`` if given), or None when it does not exist yet."""
        try:
            dt = DeltaTable(self.path, version=version, storage_options=self.storage_options)
        except TableNotFoundError:
            return None
        except FOREIGN_ERRORS as e:
            raise self.unreadable(e) from e
        metadata = dt.metadata()
        if metadata.name != self.pipeline_id:
            raise StateError(
                f"the state table at {self.path} belongs to pipeline {metadata.name!r}, not {self.pipeline_id!r}.",
                hint="Give every pipeline its own state path.",
            )
        recorded = _FORMAT_RE.search(metadata.description or "")
        self._check_format(recorded.group(1) if recorded else None)
        return dt

    def _check_format(self, recorded: str | None) -> None:
        """Refuse a state table of a format this release does not know (a newer release wrote it)."""
        found = recorded or "1"
        if found.isdigit() and int(found) <= STATE_FORMAT:
            return
        raise StateError(
            f"the state table at {self.path} (pipeline {self.pipeline_id!r}) is in state format {found} "
            f"(its description); this dynamic-kafka reads formats up to {STATE_FORMAT}. Nothing was written.",
            hint="A newer dynamic-kafka wrote it: upgrade dynamic-kafka to that release or later (docs/versioning.md); "
            "an older release must not write it.",
        )

    def open_at(self, expected_version: int, plan: Plan) -> DeltaTable:
        """The table at exactly ``expected_version``; a version that is gone or superseded is a lost race."""
        try:
            dt = self.open(expected_version)
        except StateError as e:
            latest = self.latest_version()
            if latest is not None and latest > expected_version:
                raise RunInProgressError(self.pipeline_id, plan.run_seq) from e
            raise
        if dt is None:
            raise StateError(
                f"no state table at {self.path}, but the caller read version {expected_version} of it.",
                hint="Pass expected_version=None for a pipeline without state; was the table deleted?",
            )
        return dt

    def latest_version(self) -> int | None:
        """Return the table's latest version, or None when it does not exist yet."""
        try:
            dt = self.open()
        except StateError:
            return None
        return None if dt is None else dt.version()

    def read_latest(self, predicate: str) -> tuple[DeltaTable | None, StateRows]:
        """Open the latest version and read the rows ``predicate`` selects (``EMPTY_ROWS`` without a table)."""

        def read() -> tuple[DeltaTable | None, StateRows]:
            dt = self.open()
            return dt, (EMPTY_ROWS if dt is None else self.read_rows(dt, predicate))

        return self.retry_vanished(read)

    def retry_vanished(self, read: Callable[[], _T]) -> _T:
        """Run a read of the latest version again when a file it needed vanished under it.

        Another process's commit can write a checkpoint and delete the log entries and checkpoint before it
        (``delta.logRetentionDuration``), or its maintenance can vacuum data files, between the moment a read
        lists the log and the moment it opens what it listed. The table is intact and a fresh read sees the new
        checkpoint, so only a file that stays missing over several attempts is reported as damage.
        """
        attempt = 1
        while True:
            try:
                return read()
            except StateError as e:
                if attempt == _VANISHED_ATTEMPTS or not _vanished(e.__cause__):
                    raise
                logger.debug("state of %s changed under a read (%s); reading again", self.pipeline_id, e.__cause__)
            time.sleep(0.01 * attempt)
            attempt += 1

    def read_current(
        self, dt: DeltaTable, predicate: str = CURRENT
    ) -> tuple[RunRecord | None, dict[TopicPartition, PartitionState]]:
        """Return the current rows (partitions, head) at a version."""
        head, partitions, *_ = self.read_rows(dt, predicate)
        return head, partitions

    def read_rows(self, dt: DeltaTable, predicate: str) -> StateRows:
        """Return the head, partition rows, backfill frontiers, floors and sequence ``predicate`` selects."""
        backfilled: dict[TopicPartition, Frontier] = {}
        floors: dict[TopicPartition, tuple[int, str | None]] = {}
        sequence = 0
        lease: BackfillLease | None = None
        try:
            dataset = dt.to_pyarrow_dataset(file_pruning_predicate=predicate)
            partitions = self._partitions(dataset)
            head: RunRecord | None = None
            for row in dataset.to_table(filter=~_partition_rows()).to_pylist():
                if row["pipeline_id"] != self.pipeline_id:
                    raise ValueError(f"row of pipeline {row['pipeline_id']!r}")
                if row["kind"] == "backfill" and row["status"] == _rows.SEQUENCE:
                    sequence = int(row["next_offset"])
                    lease = _rows.backfill_lease_from_row(row)
                elif row["kind"] == "backfill":
                    key, frontier = _rows.backfill_from_row(row)
                    if row["status"] == _rows.FLOOR:
                        floors[key] = (frontier.offset, frontier.topic_id)
                    else:
                        backfilled[key] = frontier
                elif head is not None:
                    raise ValueError("more than one head row")
                else:
                    head = _rows.run_from_row(row)
        except (*FOREIGN_ERRORS, ValidationError, ValueError, KeyError, TypeError) as e:
            raise self.unreadable(e) from e
        return StateRows(head, partitions, backfilled, floors, sequence, lease)

    def _partitions(self, dataset: ds.Dataset) -> dict[TopicPartition, PartitionState]:
        """The ``partition`` rows of ``dataset``, sorted by key; the ones read last when their files are the same.

        A run reads them when it loads the state and again, at the version it wrote its plan at, to commit; a
        plan and a lease renewal leave them as they are. Delta never changes a data file (a change is a new file
        under a new name), so the same files hold the same rows: reading 100,000 of them again took a second.
        """
        files = tuple(sorted(f.path for f in dataset.get_fragments(filter=_partition_rows())))
        if not files:
            return {}
        last = self._last_partitions  # one read: a lease renewal in another thread may replace it
        if last is not None and last[0] == files:
            return dict(last[1])
        table = dataset.to_table(filter=_partition_rows())
        pipelines = set(table.column("pipeline_id").to_pylist())
        if pipelines - {self.pipeline_id}:
            raise ValueError(f"row of pipeline {sorted(pipelines - {self.pipeline_id})[0]!r}")
        partitions = _rows.partitions_from_table(table)
        self._last_partitions = (files, partitions)
        return dict(partitions)

    def unreadable(self, e: Exception) -> DynamicKafkaError:
        """Return the error that says the state table cannot be read, and what to do."""
        stored = self._object_store_failure(e, "reading the state")
        if stored is not None:
            return stored
        return StateError(
            f"the state table at {self.path} (pipeline {self.pipeline_id!r}) is unreadable or corrupt: {e}",
            hint="Check the path and its permissions; restore the table from a backup or an earlier Delta "
            "version if it was damaged. Nothing was written.",
        )

    def props(self, action: str, plan: Plan | None, commit_id: str | None = None) -> CommitProperties:
        """Return the commit properties that record the action and run in the table's history."""
        metadata: dict[str, Any] = {"dynamic_kafka.action": action, "dynamic_kafka.pipeline_id": self.pipeline_id}
        if plan is not None:
            metadata["dynamic_kafka.run_seq"] = plan.run_seq
        if commit_id is not None:
            metadata[_COMMIT_ID_KEY] = commit_id
        # 0 retries: the commit lands at exactly read version + 1 or fails. delta-rs never runs its conflict
        # checker, never rebases onto a newer version.
        return CommitProperties(max_commit_retries=0, custom_metadata=metadata)

    def table_config(self) -> dict[str, str | None]:
        """Return the table properties the state is created with (checkpoints, retention)."""
        return {
            "delta.checkpointInterval": str(self.checkpoint_interval),
            "delta.logRetentionDuration": f"interval {int(self.log_retention.total_seconds())} seconds",
            "delta.deletedFileRetentionDuration": (
                f"interval {int(self.deleted_file_retention.total_seconds())} seconds"
            ),
            "delta.dataSkippingStatsColumns": _rows.STATS_COLUMNS,
        }

    def create(self, rows: list[dict[str, Any]], plan: Plan | None, action: str) -> int:
        """Create the table with its first rows; return the new version."""
        commit_id = uuid.uuid4().hex
        try:
            write_deltalake(
                self.path,
                _rows.to_table(rows),
                mode="error",
                partition_by=_rows.PARTITION_BY,
                name=self.pipeline_id,
                description=f"dynamic-kafka state of pipeline {self.pipeline_id}, format {STATE_FORMAT}",
                configuration=self.table_config(),
                storage_options=self.storage_options,
                commit_properties=self.props(action, plan, commit_id),
            )
        except FOREIGN_ERRORS as e:
            return self._after_failed_commit(e, 0, commit_id, plan, action)
        logger.info("created the state table of %s at %s (%s)", self.pipeline_id, self.path, _what(action, plan))
        return 0

    def overwrite(
        self, dt: DeltaTable, rows: list[dict[str, Any]], predicate: str, plan: Plan | None, action: str
    ) -> int:
        """Rewrite the current rows against the exact version read, without retry; return the new version."""
        target = dt.version() + 1
        commit_id = uuid.uuid4().hex
        try:
            write_deltalake(
                dt,
                _rows.to_table(rows),
                mode="overwrite",
                predicate=predicate,
                # Adds columns newer versions introduced (the head's owner and lease) to an older table; tables
                # that have them are written exactly as before.
                schema_mode="merge" if _missing_columns(dt) else None,
                commit_properties=self.props(action, plan, commit_id),
            )
        except FOREIGN_ERRORS as e:
            return self._after_failed_commit(e, target, commit_id, plan, action)
        logger.info("state of %s: %s at version %d", self.pipeline_id, _what(action, plan), target)
        return target

    def _after_failed_commit(self, e: Exception, target: int, commit_id: str, plan: Plan | None, action: str) -> int:
        """Tell a lost race (``RunInProgressError``; ``LostRaceError`` without a plan) from a failure (``StateError``)
        after a failed write.

        delta-rs can raise after publishing the commit (its post-commit checkpoint or log cleanup failed); the
        commit id in the commit info at ``target`` tells whether the commit there is ours.
        """
        latest = self.latest_version()
        if latest is not None and latest >= target:
            if self._commit_id_at(target) == commit_id:
                logger.warning(
                    "state of %s: %s committed version %d, then failed: %s", self.pipeline_id, action, target, e
                )
                return target
            logger.info("state of %s: %s lost the race for version %d", self.pipeline_id, _what(action, plan), target)
            if plan is None:
                raise LostRaceError() from e
            raise RunInProgressError(self.pipeline_id, plan.run_seq) from e
        stored = self._object_store_failure(e, f"writing the state ({action.replace('_', ' ')})")
        if stored is not None:
            raise stored from e
        raise StateError(
            f"could not {action.replace('_', ' ')}{'' if plan is None else f' {plan.run_seq}'} of pipeline "
            f"{self.pipeline_id!r} in the state "
            f"table at {self.path}: {e}",
            hint="Nothing was committed. Check that the path is writable and has space, then run again.",
        ) from e

    def _object_store_failure(self, e: Exception, doing: str) -> ObjectStoreError | None:
        """A missing bucket, refused credentials or an unreachable store, said plainly (endpoint, no secret)."""
        endpoint = (self.storage_options or {}).get("AWS_ENDPOINT_URL")
        storage = StorageConfig(endpoint=endpoint) if endpoint else None
        try:
            location = parse_location(self.path)
        except ConfigError:
            return None
        return object_store_failure(e, location, storage, f"{doing} of pipeline {self.pipeline_id!r}")

    def _commit_id_at(self, version: int) -> str | None:
        try:
            history = DeltaTable(self.path, version=version, storage_options=self.storage_options).history(1)
        except FOREIGN_ERRORS:
            return None
        found = history[0].get(_COMMIT_ID_KEY) if history else None
        return found if isinstance(found, str) else None


def _partition_rows() -> pc.Expression:
    """The filter of the ``partition`` rows; built when used (comparing an expression imports pandas, ~0.2 s)."""
    return pc.field("kind") == "partition"


def _what(action: str, plan: Plan | None) -> str:
    """``action`` and its run for messages: "begin_run run 3", "record_backfill"."""
    return action if plan is None else f"{action} run {plan.run_seq}"


def _missing_columns(dt: DeltaTable) -> bool:
    """Whether the table lacks columns of the current row schema (a table written by an older version)."""
    return bool(set(_rows.SCHEMA.names) - set(dt.schema().to_arrow().names))


_VANISHED_SIGNS = ("not found", "No such file", "Expected contiguous commit files")


def _vanished(cause: BaseException | None) -> bool:
    """Whether a read failed because a file of the table disappeared (the only transient read failure).

    A log entry that vanished between the listing and the read is "not found"; one a cleanup deleted while the
    listing went through the folder (a listing is no snapshot: it can keep an older entry and miss a newer one)
    is a gap between the entries listed.
    """
    if isinstance(cause, FileNotFoundError):
        return True
    text = str(cause)
    return isinstance(cause, FOREIGN_ERRORS) and any(sign in text for sign in _VANISHED_SIGNS)
