"""What keeps one pipeline's runs and backfills apart on one machine.

* The run lock (:func:`run_lock_path`): a file lock held for a whole run or backfill (the OS releases it even on
  ``kill -9``), so a second process on the same machine stops at once (:func:`in_progress_error`). Processes on
  other hosts are kept apart by the state's leases (:mod:`dynamic_kafka.state.lease`) and exact-version commits.

The deadline (``max_run_seconds``, whose passing cancels the run's Spark jobs) is
:class:`dynamic_kafka.spark.deadline.RunDeadline`.

Shared by :mod:`dynamic_kafka.runner` and :mod:`dynamic_kafka.backfill`: a backfill's MERGE and a run's append are
both writers of the sink and must never overlap.
"""

from __future__ import annotations

import hashlib
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from dynamic_kafka._toolchain.cache import cache_dir
from dynamic_kafka.errors import RunInProgressError
from dynamic_kafka.state.owner import RunOwner

if TYPE_CHECKING:
    from dynamic_kafka.state.store import StateStore
    from dynamic_kafka.storage import TableLocation

RUN_LOCK_DIR_ENV = "DYNAMIC_KAFKA_RUN_LOCK_DIR"
"""Where run locks live instead of beside a local state table (e.g. a state folder that is read-only, or shared
over a network file system whose flock is not to be trusted). Processes using different folders do not see each
other's locks: they are told apart by the state's lease and exact-version commits only, like runs on two hosts."""


def run_lock_path(state: TableLocation, pipeline_id: str) -> Path:
    """The run lock of a pipeline's state table: in ``$DYNAMIC_KAFKA_RUN_LOCK_DIR`` when set; else a hidden file
    beside a local state table; else, for one on object storage, a file named after its URI in this machine's
    run-lock folder (a lock guards runs on one machine only; the lease and the state's conditional commit guard
    the rest).
    """
    folder_env = os.environ.get(RUN_LOCK_DIR_ENV)
    if not folder_env and state.is_local:
        path = state.local_path
        return path.with_name(f".{path.name}.run.lock")
    folder = Path(folder_env or cache_dir() / "run-locks").expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(state.delta_rs_uri.encode()).hexdigest()[:24]
    return folder / f"{pipeline_id}-{digest}.run.lock"


def in_progress_error(store: StateStore) -> RunInProgressError:
    """What a process that found the pipeline's run lock taken says: the backfill holding the state's backfill
    lease, or the run in flight (the planned head's run_seq, else the next one).
    """
    state = store.load()
    expires = state.backfill_lease_expires_at
    if state.backfill_owner is not None and expires is not None and expires > datetime.now(UTC):
        holder = RunOwner.parse(state.backfill_owner)
        return RunInProgressError(
            store.pipeline_id,
            state.next_run_seq,
            owner=holder.describe() if holder is not None else state.backfill_owner,
            until=expires.isoformat(),
            backfill=True,
            operation=holder.operation if holder is not None else None,
        )
    head = state.last_run
    in_flight = head.run_seq if head is not None and head.status == "planned" else state.next_run_seq
    return RunInProgressError(store.pipeline_id, in_flight)
