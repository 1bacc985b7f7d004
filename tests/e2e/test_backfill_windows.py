"""Partition windows of one single-run backfill become contiguous [start, end) blocks."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from dagster import TimeWindow

from dynamic_kafka.dagster.backfill import contiguous_windows

pytestmark = pytest.mark.e2e

H = [datetime(2026, 1, 1, i, tzinfo=UTC) for i in range(8)]


def test_a_contiguous_range_is_one_window_and_a_gap_starts_another() -> None:
    hours = [TimeWindow(H[i], H[i + 1]) for i in (5, 0, 1, 2, 6)]

    assert contiguous_windows(hours) == [(H[0], H[3]), (H[5], H[7])]


def test_one_partition_is_its_own_window() -> None:
    assert contiguous_windows([TimeWindow(H[3], H[4])]) == [(H[3], H[4])]
