"""Fault injection points, so crash safety is tested by really killing a run at a chosen step.

Set ``DYNAMIC_KAFKA_FAULT`` to a point's name and the process kills itself with SIGKILL there: no cleanup, no
``finally``, exactly like ``kill -9``. Unset, these calls cost one environment lookup. A name that is no point
(:class:`CrashPoint`) is refused at the first point reached, and by :func:`acting_at` at once: a misspelled point
would otherwise never fire, and the test relying on it would pass without testing anything. The points:

- ``after_plan``: an incremental run's plan was written ahead (before any JVM);
- ``before_read``: a run's Spark read is defined (lazily) and about to run: nothing of its plan was read yet;
- ``during_write:SECONDS``: that many seconds after the run's Spark session is obtained (a timer);
- ``after_dead_letter``: the dead-letter table holds the run's txn, the sink does not yet (``dead_letter`` policy
  and a run with undecodable records);
- ``after_staging``: a staged append's files are in the table's folder, not yet in its log
  (:mod:`~dynamic_kafka.sink.staged_append`);
- ``between_tables``: a run (or backfill) landing a table per stream committed one stream's table, not yet the next
  one's (:mod:`~dynamic_kafka.sink.per_stream`; after every table but the last);
- ``after_sink``: the sink holds the run's txn, the state is not committed;
- ``recovering``: a run recovering a crashed planned run took its lease over, before finishing it;
- ``recovery_after_sink``: a recovery re-executed the crashed plan into the sink, the state is not committed;
- ``after_frontier``: a backfill recorded its frontier in the state, before its MERGE;
- ``before_maintenance_step``: a maintenance holds its lease and is about to compact, vacuum or clear a table
  (:mod:`~dynamic_kafka.operations.maintain`);
- ``replay_after_sink``: a dead-letter replay landed a table's decoded records in the sink, before it removes them
  from the dead-letter table (:mod:`~dynamic_kafka.sink.redecode`);
- ``after_fence``: an abandon fenced the run in the sink, before the dead-letter table's fence and the state's
  abandon commit (:mod:`~dynamic_kafka.sink.fence`);
- ``fence_committed``: a fence's commit returned, before it is read back from the table's log;
- ``publish_before_transaction``, ``publish_in_transaction``, ``publish_after_commit``: a publication's run
  before a transaction begins, with its records produced but not committed, and after its commit
  (:mod:`~dynamic_kafka.publish.protocol`);
- ``publish_slice_in_transaction``: a slice task of a large publication run produced its records, not committed
  them (on an executor: the task's Python worker dies); ``publish_slices_committed``: every slice of a large run
  committed, the run's progress did not move yet (:mod:`~dynamic_kafka.publish.slices`).

In-process, :func:`acting_at` runs an action at a point instead (another actor's move at exactly that step: a
test deleting and recreating a topic between a run's plan and its read).
"""

from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager
from enum import StrEnum
from typing import TYPE_CHECKING

from dynamic_kafka.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

ENV = "DYNAMIC_KAFKA_FAULT"


class CrashPoint(StrEnum):
    """The fault injection points (the module's docstring says where each is)."""

    AFTER_PLAN = "after_plan"
    BEFORE_READ = "before_read"
    DURING_WRITE = "during_write"
    AFTER_DEAD_LETTER = "after_dead_letter"
    AFTER_STAGING = "after_staging"
    BETWEEN_TABLES = "between_tables"
    AFTER_SINK = "after_sink"
    RECOVERING = "recovering"
    RECOVERY_AFTER_SINK = "recovery_after_sink"
    AFTER_FRONTIER = "after_frontier"
    BEFORE_MAINTENANCE_STEP = "before_maintenance_step"
    REPLAY_AFTER_SINK = "replay_after_sink"
    AFTER_FENCE = "after_fence"
    FENCE_COMMITTED = "fence_committed"
    PUBLISH_BEFORE_TRANSACTION = "publish_before_transaction"
    PUBLISH_IN_TRANSACTION = "publish_in_transaction"
    PUBLISH_AFTER_COMMIT = "publish_after_commit"
    PUBLISH_SLICE_IN_TRANSACTION = "publish_slice_in_transaction"
    PUBLISH_SLICES_COMMITTED = "publish_slices_committed"

    @classmethod
    def named(cls, name: str, *, source: str) -> CrashPoint:
        """The point called ``name``.

        Raises:
            ConfigError: no point has that name (naming ``source``, where the name came from, and the points).
        """
        try:
            return cls(name)
        except ValueError:
            raise ConfigError(
                f"{name!r} is no crash point, so it would never fire.",
                source=source,
                hint=f"Name one of: {', '.join(p.value for p in cls)}.",
            ) from None


_actions: dict[CrashPoint, Callable[[], None]] = {}


def _kill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def crash_point(point: CrashPoint) -> None:
    """Runs the action :func:`acting_at` set for this point, then dies here if ``DYNAMIC_KAFKA_FAULT`` names it.

    Raises:
        ConfigError: ``DYNAMIC_KAFKA_FAULT`` names no point.
    """
    action = _actions.get(point)
    if action is not None:
        action()
    wanted, _ = _wanted()
    if wanted == point:
        _kill()


@contextmanager
def acting_at(point: CrashPoint | str, action: Callable[[], None]) -> Iterator[None]:
    """Within the block, every time this process reaches ``point``, ``action`` runs there first.

    Raises:
        ConfigError: ``point`` names no crash point.
        ValueError: an action is already set at the point.
    """
    point = CrashPoint.named(point, source="acting_at")
    if point in _actions:
        raise ValueError(f"an action is already set at {point.value!r}")
    _actions[point] = action
    try:
        yield
    finally:
        del _actions[point]


def arm_timer(point: CrashPoint) -> None:
    """If ``DYNAMIC_KAFKA_FAULT`` is ``point:SECONDS``, dies that many seconds from now, wherever the run is.

    Raises:
        ConfigError: ``DYNAMIC_KAFKA_FAULT`` names no point.
    """
    wanted, seconds = _wanted()
    if wanted == point and seconds:
        timer = threading.Timer(float(seconds), _kill)
        timer.daemon = True
        timer.start()


def _wanted() -> tuple[CrashPoint | None, str]:
    """The point ``DYNAMIC_KAFKA_FAULT`` names (None when unset) and the seconds after it (``during_write:5``)."""
    name, _, seconds = os.environ.get(ENV, "").partition(":")
    return (CrashPoint.named(name, source=ENV) if name else None), seconds
