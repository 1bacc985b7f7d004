"""A run's (or backfill's) maximum duration, ``max_run_seconds``: when it passes, the Spark jobs of the run are
cancelled, so it fails retriably instead of holding the pipeline's lock forever.

Spark's own cancellation is by tag: the run tags the calling thread's Spark operations (:meth:`RunDeadline.attach`)
and a timer thread cancels that tag, again each second until the run ends (a busy driver may submit the run's next
job a moment after the first cancellation). Shared by :mod:`dynamic_kafka.protocol.run`,
:mod:`dynamic_kafka.operations.backfill`, :mod:`dynamic_kafka.operations.replay` (replays) and
:mod:`dynamic_kafka.operations.maintain` (whose delta-rs steps cannot be interrupted: it checks the deadline before each
step).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from dynamic_kafka.cli.exit_codes import ExitCode
from dynamic_kafka.errors import DynamicKafkaError, RunTimeoutError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)

Bounded = Literal["run", "backfill", "replay", "maintenance", "reset"]
"""What a deadline bounds (for its messages): every writer of a pipeline's sink and state."""

# Per bounded operation other than a run: its name in messages, what stays after it was stopped, and what to do.
_STOPPED: dict[str, tuple[str, str, str]] = {
    "backfill": (
        "backfill",
        "what it merged before stays in the sink (once), its lease is given up",
        "Run the backfill again: its MERGE inserts only the records the sink lacks. If backfills need longer, raise "
        "max_run_seconds or backfill shorter windows.",
    ),
    "replay": (
        "dead-letter replay",
        "what it landed before stays in the sink (once), nothing was recorded in the run history, its lease is "
        "given up",
        "Replay again: it lands only what the sink lacks and finishes the dead-letter table's update. If replays "
        "need longer, raise max_run_seconds or replay one run's dead letters at a time (--run-seq).",
    ),
    "reset": (
        "offsets reset",
        "nothing was written",
        "Reset again; if the brokers answer slowly, raise max_run_seconds.",
    ),
    "maintenance": (
        "maintenance",
        "the steps done before stand (no row changes), the rest was not done, its lease is given up",
        "Run the maintenance again (a step that ran past the deadline finished: delta-rs steps are not interrupted). "
        "If it needs longer, raise max_run_seconds.",
    ),
}


class RunDeadline:
    """The maximum duration (``max_run_seconds``) of a run, or of a backfill: when it passes, its Spark operations
    (tagged with its tag) are interrupted, so it fails (retriably: a run commits nothing to the state, a backfill
    merges no further) instead of holding the pipeline's lock forever. With ``hard_exit`` (the CLI), a run still
    not finished ``_GRACE_SECONDS`` later (blocked outside Spark) ends its process with exit code 124.

    Args:
        pipeline_id: the pipeline.
        seconds: the maximum duration; None never passes.
        hard_exit: end the process when the work does not stop within the grace period.
        operation: what the work is, for its messages.
    """

    _GRACE_SECONDS = 60.0
    _RECANCEL_SECONDS = 1.0

    def __init__(
        self,
        pipeline_id: str,
        seconds: float | None,
        *,
        hard_exit: bool,
        operation: Bounded = "run",
    ) -> None:
        self.pipeline_id = pipeline_id
        self.operation: Bounded = operation
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
        """Tags the calling thread's Spark jobs with this run, so they can be cancelled.

        Raises:
            RunTimeoutError: the deadline already passed: its cancellation found no job of this work to stop.
        """
        self._tags = RunTags.of(spark)
        self._tags.add(self.tag)
        self.check()

    def check(self) -> None:
        """Raises RunTimeoutError if the deadline passed (called between stages)."""
        if self.expired.is_set():
            raise self.error()

    def error(self) -> RunTimeoutError:
        """The retriable error the work that passed its deadline fails with."""
        if self.operation != "run":
            name, stays, hint = _STOPPED[self.operation]
            return RunTimeoutError(
                f"the {name} of pipeline {self.pipeline_id!r} exceeded max_run_seconds ({self.seconds:g}s) and was "
                f"cancelled; {stays}.",
                hint=hint,
            )
        return RunTimeoutError(
            f"the run of pipeline {self.pipeline_id!r} exceeded max_run_seconds ({self.seconds:g}s) and was "
            "cancelled; nothing was committed to the state.",
            hint="The next run recovers it. If runs need longer, raise max_run_seconds or cap them with "
            "max_records_per_run.",
        )

    def _fire(self) -> None:
        self.expired.set()
        logger.error(
            "pipeline %s: %s exceeded max_run_seconds (%gs); cancelling it",
            self.pipeline_id,
            self.operation,
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
                logger.error("pipeline %s: the run did not stop after its deadline; exiting", self.pipeline_id)
                logging.shutdown()
                os._exit(ExitCode.DEADLINE)

    def _cancel_jobs(self) -> None:
        if self._tags is None:
            return
        try:
            self._tags.cancel(self.tag)
        except Exception as e:  # the session may be stopping; the grace period still applies
            logger.warning("pipeline %s: could not interrupt the Spark job: %s", self.pipeline_id, e)

    def cancel(self) -> None:
        """Disarm the deadline (the work ended) and remove the tag from the session."""
        self.finished.set()
        if self._timer is not None:
            self._timer.cancel()
        if self._tags is not None:
            try:
                self._tags.remove(self.tag)
            except Exception as e:  # a stopped session has no tags left to remove
                logger.debug("pipeline %s: Spark tag not removed: %s", self.pipeline_id, e)


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
