"""A wall clock the test moves instead of sleeping: pass it where a ``clock`` is taken, or put it in place of
:func:`dynamic_kafka.clock.utc_now` (``monkeypatch.setattr(clock, "utc_now", fake)``) to move the library's time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


class FakeClock:
    """Starts at the real now (records and leases written meanwhile keep real times) and moves only when told."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        """Moves the clock ``seconds`` forward."""
        self.now += timedelta(seconds=seconds)
