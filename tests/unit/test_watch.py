"""The metadata watch: change detection and the consecutive-failure threshold."""

from __future__ import annotations

import pytest

from dynamic_kafka.errors import MetadataServiceError
from dynamic_kafka.watch import WatchCursor, check_metadata


def failing() -> str:
    raise MetadataServiceError("down")


def test_change_detection() -> None:
    first = check_metadata(lambda: "a", WatchCursor(), failure_threshold=1)
    assert first.changed
    assert first.cursor.fingerprint == "a"
    same = check_metadata(lambda: "a", first.cursor, failure_threshold=1)
    assert not same.changed
    assert same.reason == "metadata unchanged"
    moved = check_metadata(lambda: "b", same.cursor, failure_threshold=1)
    assert moved.changed
    assert "from a to b" in moved.reason


def test_threshold_five_tolerates_five_then_raises_and_success_resets() -> None:
    cursor = WatchCursor(fingerprint="a")
    for expected in range(1, 6):
        result = check_metadata(failing, cursor, failure_threshold=5)
        assert not result.changed
        assert result.cursor.consecutive_failures == expected
        cursor = result.cursor
    with pytest.raises(MetadataServiceError, match="failed 6 times in a row"):
        check_metadata(failing, cursor, failure_threshold=5)
    reset = check_metadata(lambda: "a", cursor, failure_threshold=5)
    assert reset.cursor.consecutive_failures == 0
    assert not reset.changed
    assert check_metadata(failing, reset.cursor, failure_threshold=5).cursor.consecutive_failures == 1


def test_default_threshold_one_raises_on_second_failure() -> None:
    once = check_metadata(failing, WatchCursor(), failure_threshold=1)
    with pytest.raises(MetadataServiceError):
        check_metadata(failing, once.cursor, failure_threshold=1)
