"""Custom initializers (``starting_offsets`` / ``stopping_offsets: {custom: {function: ...}}``) the tests name in
config."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from dynamic_kafka.initializers import OffsetLookups, PartitionBounds


def two_before_latest(partitions: Sequence[PartitionBounds], lookups: OffsetLookups) -> dict[tuple[str, int], int]:
    """Each partition's last two records (fewer when it holds fewer)."""
    return {(p.topic, p.partition): max(p.earliest, p.latest - 2) for p in partitions}


def group_then_time(
    partitions: Sequence[PartitionBounds], lookups: OffsetLookups, group_id: str, since_ms: int
) -> dict[tuple[str, int], int]:
    """Where ``group_id`` got to; where it has no offset, the first record at or after ``since_ms`` (else latest):
    a function that asks the brokers both questions it may ask."""
    committed = lookups.committed(group_id)
    at = lookups.offsets_for_times(since_ms)
    starts = {}
    for p in partitions:
        key = (p.topic, p.partition)
        found = committed[key]
        if found is None:
            found = at[key]
        starts[key] = p.latest if found is None else found
    return starts


def hold_back(partitions: Sequence[PartitionBounds], lookups: OffsetLookups, back: int) -> dict[tuple[str, int], int]:
    """A stopping point ``back`` records before each partition's latest (never below its earliest): every run leaves
    the newest records for a later one."""
    return {(p.topic, p.partition): max(p.earliest, p.latest - back) for p in partitions}
