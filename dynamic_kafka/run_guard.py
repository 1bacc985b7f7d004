"""What keeps one pipeline's runs and backfills apart on one machine, and bounds how long they take.

* The run lock (:func:`run_lock_path`): a file lock held for a whole run or backfill (the OS releases it even on
  ``kill -9``), so a second process on the same machine stops at once (:func:`in_progress_error`). Processes on
  other hosts are kept apart by the state's leases (:mod:`dynamic_kafka.state.lease`) and exact-version commits.
* The deadline (:class:`RunDeadline`): ``max_run_seconds``; Spark operations tagged with the run are interrupted
  when it passes.

Shared by :mod:`dynamic_kafka.runner` and :mod:`dynamic_kafka.backfill`: a backfill's MERGE and a run's append are
both writers of the sink and must never overlap.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from dynamic_kafka._toolchain.cache import cache_dir
from dynamic_kafka.errors import DynamicKafkaError, RunInProgressError, RunTimeoutError
from dynamic_kafka.state.owner import RunOwner

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from pyspark.sql import SparkSession

    from dynamic_kafka.state.store import StateStore
    from dynamic_kafka.storage import TableLocation

log = logging.getLogger(__name__)

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


class RunDeadline:
    """The maximum duration (``max_run_seconds``) of a run, or of a backfill: when it passes, its Spark operations
    (tagged with its tag) are interrupted, so it fails (retriably: a run commits nothing to the state, a backfill
    merges no further) instead of holding the pipeline's lock forever. With ``hard_exit`` (the CLI), a run still
    not finished ``_GRACE_SECONDS`` later (blocked outside Spark) ends its process with exit code 124.

    Args:
        pipeline_id: the pipeline.
        seconds: the maximum duration; None never passes.
        hard_exit: end the process when the work does not stop within the grace period.
        backfill: the work is a backfill (for its messages).
    """

    _GRACE_SECONDS = 60.0
    _RECANCEL_SECONDS = 1.0

    def __init__(self, pipeline_id: str, seconds: float | None, *, hard_exit: bool, backfill: bool = False) -> None:
        self.pipeline_id = pipeline_id
        self.backfill = backfill
        self.seconds = seconds or 0.0
        self.hard_exit = hard_exit
        self.tag = f"dynamic-kafka-{pipeline_id}-{uuid.uuid4().hex[:12]}"
        self.expired = threading.Event()
        self.finished = threading.Event()
        self._tags: RunTags | None = None
        self._timer: threading.Timer | None = None
        if seconds is not None:
            self._timer = threading.Timer(seconds, self._fire)
            self._timer.daemon = True
            self._timer.start()

    @classmethod
    def unarmed(cls, pipeline_id: str) -> RunDeadline:
        """A deadline that never passes (outside ``run``)."""
        return cls(pipeline_id, None, hard_exit=False)

    @contextmanager
    def enforced(self) -> Iterator[RunDeadline]:
        """Bounds the work inside: a failure after the deadline passed becomes its RunTimeoutError (the
        cancellation is why the work failed); the deadline is disarmed when the work ends.
        """
        try:
            yield self
        except DynamicKafkaError as e:
            if self.expired.is_set() and not isinstance(e, RunTimeoutError):
                raise self.error() from e
            raise
        finally:
            self.cancel()

    def attach(self, spark: SparkSession) -> None:
        """Tags the calling thread's Spark jobs with this run, so they can be cancelled."""
        self._tags = RunTags.of(spark)
        self._tags.add(self.tag)

    def check(self) -> None:
        """Raises RunTimeoutError if the deadline passed (called between stages)."""
        if self.expired.is_set():
            raise self.error()

    def error(self) -> RunTimeoutError:
        """The retriable error the work that passed its deadline fails with."""
        if self.backfill:
            return RunTimeoutError(
                f"the backfill of pipeline {self.pipeline_id!r} exceeded max_run_seconds ({self.seconds:g}s) and was "
                "cancelled; what it merged before stays in the sink (once), its lease is given up.",
                hint="Run the backfill again: its MERGE inserts only the records the sink lacks. If backfills need "
                "longer, raise max_run_seconds or backfill shorter windows.",
            )
        return RunTimeoutError(
            f"the run of pipeline {self.pipeline_id!r} exceeded max_run_seconds ({self.seconds:g}s) and was "
            "cancelled; nothing was committed to the state.",
            hint="The next run recovers it. If runs need longer, raise max_run_seconds or cap them with "
            "max_records_per_run.",
        )

    def _fire(self) -> None:
        self.expired.set()
        log.error(
            "pipeline %s: %s exceeded max_run_seconds (%gs); cancelling it",
            self.pipeline_id,
            "backfill" if self.backfill else "run",
            self.seconds,
        )
        give_up = time.monotonic() + self._GRACE_SECONDS
        # Cancelling reaches only the jobs already submitted, and a busy driver may submit the run's next job a
        # moment later: cancel again each second until the run gives up.
        while True:
            self._cancel_jobs()
            if self.finished.wait(self._RECANCEL_SECONDS):
                return
            if self.hard_exit and time.monotonic() >= give_up:
                log.error("pipeline %s: the run did not stop after its deadline; exiting", self.pipeline_id)
                logging.shutdown()
                os._exit(124)

    def _cancel_jobs(self) -> None:
        if self._tags is None:
            return
        try:
            self._tags.cancel(self.tag)
        except Exception as e:  # the session may be stopping; the grace period still applies
            log.warning("pipeline %s: could not interrupt the Spark job: %s", self.pipeline_id, e)

    def cancel(self) -> None:
        """Disarm the deadline (the work ended) and remove the tag from the session."""
        self.finished.set()
        if self._timer is not None:
            self._timer.cancel()
        if self._tags is not None:
            try:
                self._tags.remove(self.tag)
            except Exception as e:  # a stopped session has no tags left to remove
                log.debug("pipeline %s: Spark tag not removed: %s", self.pipeline_id, e)


@dataclass(frozen=True)
class RunTags:
    """How to tag the calling thread's Spark operations with a run and cancel them from another thread."""

    add: Callable[[str], None]
    remove: Callable[[str], None]
    cancel: Callable[[str], object]

    @classmethod
    def of(cls, spark: SparkSession) -> RunTags:
        """A Spark Connect session tags its own operations (it has no SparkContext in this process); an in-process
        session's own tags interrupt nothing, since its jobs carry the SparkContext's job tags.
        """
        from dynamic_kafka.spark.remote import is_remote

        if is_remote(spark):
            return cls(spark.addTag, spark.removeTag, spark.interruptTag)
        context = spark.sparkContext
        return cls(context.addJobTag, context.removeJobTag, context.cancelJobsWithTag)


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
        )
    head = state.last_run
    in_flight = head.run_seq if head is not None and head.status == "planned" else state.next_run_seq
    return RunInProgressError(store.pipeline_id, in_flight)
