"""The metadata watch: change detection and the consecutive-failure threshold."""

from __future__ import annotations

import pytest

from dynamic_kafka.config.models import PipelineConfig
from dynamic_kafka.errors import MetadataServiceError
from dynamic_kafka.metadata.watch import WatchCursor, check_metadata


def failing() -> str:
    raise MetadataServiceError("down")


def test_change_detection() -> None:
    first = check_metadata(lambda: "a", WatchCursor(), failure_threshold=1)
    assert first.changed
    assert first.cursor.fingerprint == "a"
    same = check_metadata(lambda: "a", first.cursor, failure_threshold=1)
    assert not same.changed
    assert same.reason == "metadata unchanged"
    assert same.run_key is None
    moved = check_metadata(lambda: "b", same.cursor, failure_threshold=1)
    assert moved.changed
    assert "from a to b" in moved.reason


def test_every_change_has_its_own_run_key_also_back_to_an_earlier_layout() -> None:
    first = check_metadata(lambda: "a", WatchCursor(), failure_threshold=1)
    to_b = check_metadata(lambda: "b", first.cursor, failure_threshold=1)
    back_to_a = check_metadata(lambda: "a", to_b.cursor, failure_threshold=1)
    keys = [first.run_key, to_b.run_key, back_to_a.run_key]
    assert keys == ["a#1", "b#2", "a#3"]
    # A repeated poll of the same change (the orchestrator lost the new cursor) asks with the same key.
    assert check_metadata(lambda: "b", first.cursor, failure_threshold=1).run_key == to_b.run_key
    failed = check_metadata(failing, back_to_a.cursor, failure_threshold=1)
    assert failed.cursor.changes == 3
    assert check_metadata(lambda: "a", failed.cursor, failure_threshold=1).run_key is None


def test_a_cursor_of_an_earlier_version_still_reads() -> None:
    cursor = WatchCursor.model_validate_json('{"fingerprint": "a", "consecutive_failures": 0}')
    assert cursor.changes == 0
    assert check_metadata(lambda: "b", cursor, failure_threshold=1).run_key == "b#1"


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
    once = check_metadata(failing, WatchCursor(fingerprint="a"), failure_threshold=1)
    assert once.cursor.consecutive_failures == 1
    with pytest.raises(MetadataServiceError):
        check_metadata(failing, once.cursor, failure_threshold=1)


@pytest.mark.parametrize("threshold", [0, 1, 5])
def test_a_failure_on_the_first_poll_fails_whatever_the_threshold(threshold: int) -> None:
    # Flink's first discovery: no metadata to fall back on, so the failure is not swallowed.
    with pytest.raises(MetadataServiceError, match="failed on the first poll"):
        check_metadata(failing, WatchCursor(), failure_threshold=threshold)


def test_threshold_zero_tolerates_no_failure() -> None:
    with pytest.raises(MetadataServiceError, match=r"failed 1 times in a row \(threshold 0\)"):
        check_metadata(failing, WatchCursor(fingerprint="a"), failure_threshold=0)
    assert (
        PipelineConfig.model_validate(
            {
                "id": "p",
                "streams": ["s"],
                "sink": {"path": "/tmp/s"},
                "orchestration": {"sensor": {"failure_threshold": 0}},
            }
        ).orchestration.sensor.failure_threshold
        == 0
    )
