"""Time-window partitions for backfills: hourly or daily in UTC, from the pipeline's ``backfill.start``.

A partition ``[start, end)`` is a window of record timestamps; the backfill job reads it with the library's
timestamp offsets initializers. Only complete windows exist (the current hour or day is not a partition yet).
"""

from __future__ import annotations

from datetime import UTC, datetime

from dagster import DailyPartitionsDefinition, HourlyPartitionsDefinition, TimeWindowPartitionsDefinition

from dynamic_kafka.config import BackfillConfig
from dynamic_kafka.errors import ConfigError


def parse_start(backfill: BackfillConfig, *, source: str | None = None) -> datetime:
    """``backfill.start`` as an aware UTC datetime (a value without an offset is taken as UTC)."""
    try:
        start = datetime.fromisoformat(backfill.start)
    except ValueError as e:
        raise ConfigError(
            f"backfill.start {backfill.start!r} is not an ISO-8601 timestamp.",
            source=source,
            hint="Write it like '2026-01-01T00:00:00Z'.",
        ) from e
    return start.replace(tzinfo=UTC) if start.tzinfo is None else start.astimezone(UTC)


def backfill_partitions(backfill: BackfillConfig, *, source: str | None = None) -> TimeWindowPartitionsDefinition:
    """The partitions definition for one pipeline's backfill job."""
    start = parse_start(backfill, source=source)
    if backfill.granularity == "hourly":
        return HourlyPartitionsDefinition(start_date=start, timezone="UTC")
    return DailyPartitionsDefinition(start_date=start, timezone="UTC")
