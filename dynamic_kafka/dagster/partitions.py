"""Time-window partitions for backfills: hourly or daily in UTC, from the pipeline's ``orchestration.backfill.start``.

A partition ``[start, end)`` is a window of record timestamps; the backfill job reads it with the library's
timestamp offsets initializers. Only complete windows exist (the current hour or day is not a partition yet).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dagster import DailyPartitionsDefinition, HourlyPartitionsDefinition, TimeWindowPartitionsDefinition

if TYPE_CHECKING:
    from dynamic_kafka import BackfillConfig


def backfill_partitions(backfill: BackfillConfig) -> TimeWindowPartitionsDefinition:
    """The partitions definition for one pipeline's backfill job (``orchestration.backfill.start`` was validated,
    as aware UTC, when the config was loaded).
    """
    start = backfill.start
    if backfill.granularity == "hourly":
        return HourlyPartitionsDefinition(start_date=start, timezone="UTC")
    return DailyPartitionsDefinition(start_date=start, timezone="UTC")
