"""What Spark says of the jobs in flight, for a :class:`~dynamic_kafka.progress.Tracker`: bytes read and tasks.

A Spark Connect session streams each operation's stages to its progress handlers
(``SparkSession.registerProgressHandler``); an in-process session has a status tracker, polled once a second
(it knows tasks, not bytes). Spark counts neither records nor offsets per stage while they run, so the records are
the plan's; the bytes and tasks are Spark's own.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from pyspark.sql import SparkSession

    from dynamic_kafka.progress import Tracker

POLL_SECONDS = 1.0


@contextmanager
def watching_spark(spark: SparkSession, tracker: Tracker) -> Iterator[None]:
    """Reports the Spark work done inside to ``tracker`` (nothing is registered when nobody listens)."""
    if not tracker.watched:
        yield
        return
    from dynamic_kafka.spark.remote import is_remote

    if is_remote(spark):
        with _connect_handler(spark, tracker):
            yield
    else:
        with _status_polling(spark, tracker):
            yield


@contextmanager
def _connect_handler(spark: SparkSession, tracker: Tracker) -> Iterator[None]:
    # Each operation (query) reports its own stages from the start: the work's totals are the sum over operations.
    seen: dict[str | None, tuple[int, int, int]] = {}

    def handler(stages: Iterable[Any] | None, inflight_tasks: int, operation_id: str | None, done: bool) -> None:
        listed = list(stages or ())
        if not listed:
            return
        seen[operation_id] = (
            sum(s.num_bytes_read for s in listed),
            sum(s.num_completed_tasks for s in listed),
            sum(s.num_tasks for s in listed),
        )
        bytes_read, finished, total = (sum(column) for column in zip(*seen.values(), strict=True))
        tracker.update(bytes_done=bytes_read, tasks_done=finished, tasks_total=total)

    spark.registerProgressHandler(handler)
    try:
        yield
    finally:
        spark.removeProgressHandler(handler)


@contextmanager
def _status_polling(spark: SparkSession, tracker: Tracker) -> Iterator[None]:
    status = spark.sparkContext.statusTracker()
    stopped = threading.Event()
    stages: dict[int, tuple[int, int]] = {}

    def sample(stage_ids: Iterable[int]) -> None:
        for stage_id in stage_ids:
            info = status.getStageInfo(stage_id)
            if info is not None:
                stages[stage_id] = (info.numCompletedTasks, info.numTasks)
        if stages:
            tracker.update(
                tasks_done=sum(done for done, _ in stages.values()),
                tasks_total=sum(total for _, total in stages.values()),
            )

    def poll() -> None:
        while not stopped.wait(POLL_SECONDS):
            sample(status.getActiveStageIds())

    poller = threading.Thread(target=poll, name="spark-progress", daemon=True)
    poller.start()
    try:
        yield
    finally:
        stopped.set()
        poller.join(timeout=POLL_SECONDS * 2)
        sample(list(stages))  # a stage that ended between two polls: its final count
