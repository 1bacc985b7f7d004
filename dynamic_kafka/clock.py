"""The library's one reading of the wall clock where time decides something: leases (taken, renewed, judged
fresh), the run lock's report of a writer lease, health (idle partitions, stuck transactions), and the times a
plan and its broker snapshot carry. File ages (leftovers of killed writes) are measured against the file system's
own clock instead.

Everything reads it as ``clock.utc_now()`` at call time, so replacing :func:`utc_now` on this module moves time
for all of them at once (the tests advance it instead of sleeping a lease out). Durations of work are measured
with :func:`time.monotonic` instead, and ``max_run_seconds`` is a timer thread (it must interrupt Spark jobs from
outside the work).
"""

from __future__ import annotations

from datetime import UTC, datetime


def utc_now() -> datetime:
    """Now, in UTC."""
    return datetime.now(UTC)
