"""Fault injection points, so crash safety is tested by really killing a run at a chosen step.

Set ``DYNAMIC_KAFKA_FAULT`` to a point's name and the process kills itself with SIGKILL there: no cleanup, no
``finally``, exactly like ``kill -9``. Unset, these calls cost one environment lookup. The points:

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
  (:mod:`~dynamic_kafka.maintain`);
- ``after_fence``: an abandon fenced the run in the sink, before the dead-letter table's fence and the state's
  abandon commit (:mod:`~dynamic_kafka.sink.fence`);
- ``fence_committed``: a fence's commit returned, before it is read back from the table's log.

In-process, :func:`acting_at` runs an action at a point instead (another actor's move at exactly that step: a
test deleting and recreating a topic between a run's plan and its read).
"""

from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

ENV = "DYNAMIC_KAFKA_FAULT"

_actions: dict[str, Callable[[], None]] = {}


def _kill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def crash_point(name: str) -> None:
    """Runs the action :func:`acting_at` set for this point, then dies here if ``DYNAMIC_KAFKA_FAULT`` names it."""
    action = _actions.get(name)
    if action is not None:
        action()
    if os.environ.get(ENV) == name:
        _kill()


@contextmanager
def acting_at(name: str, action: Callable[[], None]) -> Iterator[None]:
    """Within the block, every time this process reaches the point ``name``, ``action`` runs there first."""
    if name in _actions:
        raise ValueError(f"an action is already set at {name!r}")
    _actions[name] = action
    try:
        yield
    finally:
        del _actions[name]


def arm_timer(name: str) -> None:
    """If ``DYNAMIC_KAFKA_FAULT`` is ``name:SECONDS``, dies that many seconds from now, wherever the run is."""
    wanted, _, seconds = os.environ.get(ENV, "").partition(":")
    if wanted == name and seconds:
        timer = threading.Timer(float(seconds), _kill)
        timer.daemon = True
        timer.start()
