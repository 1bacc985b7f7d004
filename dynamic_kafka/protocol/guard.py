"""What keeps the writers of one pipeline's sink and state apart: :class:`WriterGuard`, the one guard each of them
enters (a run and its recovery, a backfill, a dead-letter replay, a maintenance, an offsets reset; an abandon takes
only its lease from it).

* The run lock (:func:`run_lock_path`): a file lock held for a whole run or backfill (the OS releases it even on
  ``kill -9``), so a second process on the same machine stops at once (:func:`in_progress_error`). Processes on
  other hosts are kept apart by the state's leases (:mod:`dynamic_kafka.state.lease`) and exact-version commits.
* The deadline (``max_run_seconds``, whose passing cancels the writer's Spark jobs):
  :class:`dynamic_kafka.spark.deadline.RunDeadline`, armed when the guard is entered, so it bounds the lease too.
* The lease: a run's own (its planned head) or the writer lease (the state's backfill row), taken with one
  attempt policy (:data:`LEASE_ATTEMPTS`), renewed in the background while the guard is held, stopped before the
  holder commits, and the writer lease released when the guard is left.
* The check before each write (:meth:`WriterGuard.before_write`): within the deadline and still holding the lease.
"""

from __future__ import annotations

import hashlib
import logging
import os
from contextlib import ExitStack, contextmanager
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from dynamic_kafka import clock as wall_clock
from dynamic_kafka._toolchain.cache import cache_dir
from dynamic_kafka._toolchain.filelock import try_exclusive_lock
from dynamic_kafka.errors import DynamicKafkaError, RunInProgressError
from dynamic_kafka.spark.deadline import Bounded, RunDeadline
from dynamic_kafka.state.lease import LeaseKeeper
from dynamic_kafka.state.owner import RunOwner

if TYPE_CHECKING:
    from collections.abc import Iterator
    from datetime import datetime

    from dynamic_kafka.config.models import PipelineConfig
    from dynamic_kafka.model.plan import Plan
    from dynamic_kafka.state.store import StateStore
    from dynamic_kafka.storage import TableLocation

logger = logging.getLogger(__name__)

RUN_LOCK_DIR_ENV = "DYNAMIC_KAFKA_RUN_LOCK_DIR"
"""The machine's run-lock folder instead of ``<cache>/run-locks`` (e.g. one that several users' processes share).
Processes using different folders do not see each other's locks: they are told apart by the state's lease and
exact-version commits only, like runs on two hosts."""


def run_lock_path(state: TableLocation, pipeline_id: str) -> Path:
    """The run lock of a pipeline's state table: a file named after the pipeline and its state's location in this
    machine's run-lock folder (``$DYNAMIC_KAFKA_RUN_LOCK_DIR``, else ``<cache>/run-locks``), never beside the
    tables, so a run that fails before its write leaves nothing in the project. A lock guards runs on one machine
    only; the lease and the state's conditional commit guard the rest.
    """
    folder = Path(os.environ.get(RUN_LOCK_DIR_ENV) or cache_dir() / "run-locks").expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(state.delta_rs_uri.encode()).hexdigest()[:24]
    return folder / f"{pipeline_id}-{digest}.run.lock"


def in_progress_error(store: StateStore) -> RunInProgressError:
    """What a process that found the pipeline's run lock taken says: the backfill holding the state's backfill
    lease, or the run in flight (the planned head's run_seq, else the next one).
    """
    state = store.load()
    expires = state.backfill_lease_expires_at
    if state.backfill_owner is not None and expires is not None and expires > wall_clock.utc_now():
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


LEASE_ATTEMPTS = 5
"""How many times every writer tries to take its writer lease: a lost race with another commit (a lease renewal)
is no refusal, and a run planned on another host may commit in a moment."""


class WriterGuard:
    """The one guard around every write of a pipeline's sink and state: the run lock, the deadline, the lease (taken,
    renewed, stopped), the check before each write, and the release. Each verb declares what it needs: the lock
    and the deadline with :meth:`entered`, the writer lease with :meth:`take_lease` or :meth:`keep_lease` (a
    run's lease, or one taken by the verb's own commit), and calls :meth:`before_write` right before each write.

    Args:
        store: the pipeline's state store.
        pipeline: the pipeline (its id, state path, ``max_run_seconds``, ``run_lease_seconds``).
        operation: what writes (the deadline's messages).
        owner: this process, as the lease names it.
        hard_exit: end the process when the work does not stop within the deadline's grace (the CLI's runs).

    Example:
        >>> guard = WriterGuard(store, pipeline, "maintenance", owner=RunOwner.current("maintenance"))  # doctest: +SKIP
        >>> with guard.entered():  # doctest: +SKIP
        ...     guard.take_lease()
        ...     guard.before_write()
    """

    def __init__(
        self,
        store: StateStore,
        pipeline: PipelineConfig,
        operation: Bounded,
        *,
        owner: RunOwner,
        hard_exit: bool = False,
    ) -> None:
        self.store = store
        self.pipeline = pipeline
        self.operation: Bounded = operation
        self.owner = owner
        self.hard_exit = hard_exit
        self.deadline = RunDeadline.unarmed(pipeline.id)
        self._keeper: LeaseKeeper | None = None
        self._writer_lease = False

    @contextmanager
    def entered(self, *, lock: bool = True, deadline: bool = True) -> Iterator[WriterGuard]:
        """Holds the guard for the work inside: the run lock (``lock``), then the deadline armed (``deadline``);
        on the way out the lease is stopped and the writer lease released.

        Raises:
            RunInProgressError: another writer of the pipeline holds the run lock on this machine; nothing done.
            RunTimeoutError: the work failed after the deadline passed (its cancellation is why).
        """
        with ExitStack() as held:
            path = run_lock_path(self.pipeline.resolved_state_path, self.pipeline.id)
            if lock and not held.enter_context(try_exclusive_lock(path)):
                raise in_progress_error(self.store)
            if deadline:
                self.deadline = RunDeadline(
                    self.pipeline.id, self.pipeline.max_run_seconds, hard_exit=self.hard_exit, operation=self.operation
                )
                held.enter_context(self.deadline.enforced())
            held.callback(self._end)
            yield self

    def now(self) -> datetime:
        """Now (UTC) by the library's clock (:mod:`dynamic_kafka.clock`): the one leases are measured by."""
        return wall_clock.utc_now()

    def lease_end(self) -> datetime:
        """Until when a lease taken or renewed now lasts."""
        return self.now() + timedelta(seconds=self.pipeline.run_lease_seconds)

    def take_lease(self) -> int:
        """Takes the writer lease (:data:`LEASE_ATTEMPTS` attempts) and renews it while the guard is held; returns
        the state version holding it.

        Raises:
            RunInProgressError: a run stayed planned, or another writer holds a fresh lease; nothing was written.
            StateError: the state is unreadable, or every attempt lost the race to another commit.
        """
        version = self.store.take_writer_lease(
            owner=self.owner.text(), lease_expires_at=self.lease_end(), attempts=LEASE_ATTEMPTS
        )
        self.keep_lease(version)
        return version

    def keep_lease(self, version: int, plan: Plan | None = None) -> None:
        """Renews, in the background, the lease this process took at state ``version``: planned run ``plan``'s,
        or (None) the writer lease, which is then released when the guard is left.
        """
        lease = timedelta(seconds=self.pipeline.run_lease_seconds)
        self._keeper = LeaseKeeper(self.store, plan, self.owner, lease, version, self.now).start()
        self._writer_lease = plan is None

    def before_write(self) -> None:
        """The check right before each write: within the deadline (past it between two jobs, no job was running
        to be cancelled) and still holding the lease.

        Raises:
            RunTimeoutError: the deadline passed (retriable).
            LeaseLostError: the lease ran out or another process holds it now (retriable).
        """
        self.deadline.check()
        if self._keeper is not None:
            self._keeper.check()

    def stop_lease(self, *, quietly: bool = False) -> int:
        """Stops renewing the lease and returns the state version to commit against.

        Raises:
            DynamicKafkaError: the lease was lost (unless ``quietly``); the holder must not commit.
        """
        assert self._keeper is not None, "no lease is held"
        return self._keeper.stop(quietly=quietly)

    def _end(self) -> None:
        if self._keeper is None:
            return
        self._keeper.stop(quietly=True)
        self._keeper = None
        if self._writer_lease:
            self._writer_lease = False
            try:
                self.store.release_backfill_lease(owner=self.owner.text())
            except DynamicKafkaError as e:
                logger.warning(
                    "pipeline %s: the %s's writer lease was not released (runs wait until it expires): %s",
                    self.pipeline.id,
                    self.operation,
                    e,
                )
