"""Watching metadata for changes, with a tolerance for a flaky metadata service.

The watch is a pure step over a serializable cursor, so an orchestrator (the Dagster sensor) can keep the cursor
across daemon restarts: ``check_metadata(poll, cursor, threshold)`` polls once and says whether the resolved layout
changed. Flink's ``stream-metadata-discovery-failure-threshold`` semantics: a failure before any poll succeeded
raises at once (there is no layout to keep watching, and a broken service should not look like a quiet one); after
that, up to ``threshold`` consecutive failures are tolerated (the result says so; 0 tolerates none), the next one
raises, and any success resets the count.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from dynamic_kafka.errors import DynamicKafkaError, MetadataServiceError
from dynamic_kafka.frozen import FrozenModel

if TYPE_CHECKING:
    from collections.abc import Callable


class WatchCursor(FrozenModel):
    """What the watch remembers between polls."""

    fingerprint: str | None = Field(None, description="The last fingerprint seen; None before the first poll.")
    consecutive_failures: int = Field(0, ge=0)
    changes: int = Field(
        0,
        ge=0,
        description="How many changes were seen, so a layout that comes back (A -> B -> A) is a new change.",
    )


class WatchResult(FrozenModel):
    """One poll's outcome."""

    cursor: WatchCursor
    changed: bool = Field(description="The fingerprint differs from the cursor's (a run should be requested).")
    fingerprint: str | None = None
    reason: str = Field(description="Why a run is or is not requested, for people reading sensor ticks.")

    @property
    def run_key(self) -> str | None:
        """A key unique to this change: the same for a repeated poll of it (an orchestrator that dedupes run
        requests by key requests it once), different for a later change back to an earlier layout.
        """
        if not self.changed or self.fingerprint is None:
            return None
        return f"{self.fingerprint}#{self.cursor.changes}"


def check_metadata(poll: Callable[[], str], cursor: WatchCursor, *, failure_threshold: int) -> WatchResult:
    """Polls once.

    Args:
        poll: returns the current metadata fingerprint, raising DynamicKafkaError when the service fails.
        cursor: the previous cursor.
        failure_threshold: consecutive failures tolerated before raising, once a poll has succeeded.

    Raises:
        MetadataServiceError: the service failed before any poll succeeded, or more than ``failure_threshold`` times
            in a row.
    """
    try:
        fingerprint = poll()
    except DynamicKafkaError as e:
        if cursor.fingerprint is None:
            raise MetadataServiceError(
                f"the metadata service failed on the first poll, before any metadata was seen: {e}",
                hint="Check the metadata service; a failure is only tolerated once a poll has succeeded (Flink's "
                "rule for the first discovery).",
            ) from e
        failures = cursor.consecutive_failures + 1
        if failures > failure_threshold:
            raise MetadataServiceError(
                f"the metadata service failed {failures} times in a row (threshold {failure_threshold}): {e}",
                hint="Check the metadata service; the sensor resets after one successful poll.",
            ) from e
        return WatchResult(
            cursor=WatchCursor(fingerprint=cursor.fingerprint, consecutive_failures=failures, changes=cursor.changes),
            changed=False,
            reason=f"metadata service failed ({failures} of {failure_threshold} tolerated): {e}",
        )
    if fingerprint == cursor.fingerprint:
        unchanged = WatchCursor(fingerprint=fingerprint, changes=cursor.changes)
        return WatchResult(cursor=unchanged, changed=False, fingerprint=fingerprint, reason="metadata unchanged")
    previous = cursor.fingerprint or "none"
    return WatchResult(
        cursor=WatchCursor(fingerprint=fingerprint, changes=cursor.changes + 1),
        changed=True,
        fingerprint=fingerprint,
        reason=f"metadata fingerprint changed from {previous} to {fingerprint}",
    )
