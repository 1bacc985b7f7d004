"""A wall clock the test moves instead of sleeping: pass it where a ``clock`` is taken, or put it in place of
:func:`dynamic_kafka.clock.utc_now` (``monkeypatch.setattr(clock, "utc_now", fake)``) to move the library's time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from dynamic_kafka import clock

if TYPE_CHECKING:
    import pytest

    from dynamic_kafka.state import StateStore


class FakeClock:
    """Starts at the real now (records and leases written meanwhile keep real times) and moves only when told."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        """Moves the clock ``seconds`` forward."""
        self.now += timedelta(seconds=seconds)


def past_the_planned_runs_lease(monkeypatch: pytest.MonkeyPatch, store: StateStore) -> None:
    """Puts the library's clock a second past the lease of the run ``store`` holds planned, and keeps it there.

    A run that crashed in this process leaves its run planned under an owner whose pid is alive (this test's): only
    its lease's end lets the next run recover it, as a restarted process would be let, instead of refusing it as
    another process's run in flight.
    """
    head = store.load().last_run
    assert head is not None, "no run was planned"
    assert head.status == "planned", head.status
    assert head.lease_expires_at is not None, "the planned run holds no lease"
    later = FakeClock()
    later.now = max(later.now, head.lease_expires_at + timedelta(seconds=1))
    monkeypatch.setattr(clock, "utc_now", later)
