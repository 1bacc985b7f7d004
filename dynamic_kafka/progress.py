"""Progress of long work (a run, a backfill, a first jar download) for whoever watches it.

The work reports through a :class:`Tracker`: its stage as it moves on (planning, reading and writing, committing),
what is known of its size (the offsets planned), and what Spark or the download says so far (bytes, tasks). A
tracker is silent unless the caller asked for progress with :func:`reporting_progress`: the command line shows a
live line on a terminal and periodic log lines otherwise (never on stdout, never with ``--json``); the Dagster
integration logs the periodic lines as the step's log events. Progress is advisory: a listener that fails is
logged and ignored, never a failed run.

Example:
    >>> with reporting_progress(every(print, 10)):  # doctest: +SKIP
    ...     Pipeline.from_config("dynamic_kafka.yaml", "orders").run()
    run orders: planning, 0s
    run orders: checking Spark and the sink, 1200 offsets planned, 0s
    run orders: reading and writing, 1200 offsets planned, 1s
    run orders: committing, 1200 offsets planned, 2/2 tasks, 3s
    run orders: done, 1200 offsets planned, 2/2 tasks, 3s
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING

from pydantic import Field

from dynamic_kafka.frozen import FrozenModel, replaced

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

logger = logging.getLogger(__name__)


class Progress(FrozenModel):
    """Where one piece of long work stands now."""

    operation: str = Field(description="What works: 'run', 'backfill', 'download'.")
    subject: str = Field(description="Of what: the pipeline id, or the name of the jars downloaded.")
    stage: str = Field(description="What it does now: 'planning', 'reading and writing', 'committing', 'done'.")
    elapsed_seconds: float
    planned_offsets: int | None = Field(None, description="The offsets its plan reads (known once planned).")
    bytes_done: int | None = Field(None, description="Bytes read by Spark, or downloaded, so far.")
    tasks_done: int | None = Field(None, description="Spark tasks finished so far.")
    tasks_total: int | None = Field(None, description="Spark tasks of the jobs started so far.")
    done: bool = Field(False, description="The work ended (whether it succeeded or failed).")

    def line(self, *, elapsed: bool = True) -> str:
        """One line for a person: ``run orders: reading and writing, 1200 offsets planned, 1/2 tasks, 3s``."""
        parts = [f"{self.operation} {self.subject}: {self.stage}"]
        if self.planned_offsets is not None:
            parts.append(f"{self.planned_offsets} offsets planned")
        if self.operation == "download" and self.bytes_done is not None:
            parts.append(f"{_size(self.bytes_done)} downloaded")
        elif self.bytes_done:  # Spark's Kafka source reports no input bytes: only what else was read
            parts.append(f"{_size(self.bytes_done)} read")
        if self.tasks_total:
            parts.append(f"{self.tasks_done or 0}/{self.tasks_total} tasks")
        if elapsed:
            parts.append(f"{self.elapsed_seconds:.0f}s")
        return ", ".join(parts)


_LISTENER: ContextVar[Callable[[Progress], None] | None] = ContextVar("dynamic_kafka_progress", default=None)


@contextmanager
def reporting_progress(listener: Callable[[Progress], None]) -> Iterator[None]:
    """Sends the progress of the work started inside (in this thread or context) to ``listener``; it is called
    from Spark's threads too, so it must be quick and thread-safe.
    """
    token = _LISTENER.set(listener)
    try:
        yield
    finally:
        _LISTENER.reset(token)


def _size(count: int) -> str:
    if count < 1000:
        return f"{count} B"
    unit, scale = next(((u, f) for u, f in (("KB", 1e3), ("MB", 1e6)) if count < f * 1000), ("GB", 1e9))
    return f"{count / scale:.1f} {unit}"


def every(emit: Callable[[str], None], seconds: float) -> Callable[[Progress], None]:
    """A listener that emits a line at each new stage and at the end, and at most every ``seconds`` in between:
    what a log (a file, a CI job, Dagster's event log) can take.
    """
    last: dict[tuple[str, str], tuple[str, float]] = {}

    def listener(progress: Progress) -> None:
        key = (progress.operation, progress.subject)
        stage, at = last.get(key, ("", float("-inf")))
        now = time.monotonic()
        if progress.done or progress.stage != stage or now - at >= seconds:
            last[key] = (progress.stage, now)
            emit(progress.line())

    return listener


class Tracker:
    """One piece of work's progress; every method is a no-op when nobody asked for progress."""

    def __init__(self, operation: str, subject: str) -> None:
        self._listener = _LISTENER.get()
        self._started = time.monotonic()
        self._lock = threading.Lock()
        self._now = Progress(operation=operation, subject=subject, stage="starting", elapsed_seconds=0.0)

    @property
    def watched(self) -> bool:
        """Whether anyone listens (what only a listener needs, such as polling Spark, is skipped otherwise)."""
        return self._listener is not None

    def stage(self, name: str, **known: int | None) -> None:
        """Moves on to stage ``name``, with what is now known (``planned_offsets=...``)."""
        self.update(stage=name, **known)

    def update(self, **fields: str | int | bool | None) -> None:
        """Reports what changed (``bytes_done``, ``tasks_done``, ``tasks_total``)."""
        if self._listener is None:
            return
        with self._lock:
            elapsed = time.monotonic() - self._started
            self._now = replaced(self._now, **fields, elapsed_seconds=elapsed)
            try:
                self._listener(self._now)
            except Exception:  # a display that fails must not fail the work it displays
                logger.debug("a progress listener failed", exc_info=True)


@contextmanager
def tracking(operation: str, subject: str) -> Iterator[Tracker]:
    """A :class:`Tracker` for the work inside, reported ``done`` (or ``failed``) when it ends."""
    tracker = Tracker(operation, subject)
    try:
        yield tracker
    except BaseException:
        tracker.update(stage="failed", done=True)
        raise
    tracker.update(stage="done", done=True)
