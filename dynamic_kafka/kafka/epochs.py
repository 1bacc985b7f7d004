"""KIP-320's truncation check through librdkafka: has a partition's log diverged below an offset read before?

Kafka answers it with OffsetForLeaderEpoch: given the leader epoch a position was read under, the leader returns
the end offset of that epoch in its own log (where the next epoch starts). After a clean leader change the new
leader has every committed record, so the end is at or beyond the position; after an unclean one it is where the
new leader's log stopped, below the position even when producers have refilled the offsets above it since.

confluent-kafka has no call for the request. librdkafka sends it when a consumer seeks to an offset that carries
a leader epoch, and with ``auto.offset.reset=error`` reports a divergence as an ``_AUTO_OFFSET_RESET`` consumer
error whose text holds the end offset (checked on Kafka 4.1 with librdkafka 2.16: "Partition log truncation
detected at offset 5 (leader epoch 0): broker end offset is 0 (offset leader epoch 0). Reset to INVALID."). A
position that checks out is fetched from, so a record or the end-of-partition event for it says so. Any other
outcome (no epoch the leader knows, a broker without the request, no answer in time) tells nothing.
"""

from __future__ import annotations

import re

from confluent_kafka import KafkaError
from pydantic import Field

from dynamic_kafka.frozen import FrozenModel

_DIVERGED = re.compile(r"log truncation detected at .*?: broker end offset is (\d+)")


class CommittedPosition(FrozenModel):
    """A partition's committed next offset and the leader epoch it was planned under, as the state recorded them."""

    topic: str
    partition: int = Field(ge=0)
    topic_id: str | None = Field(None, description="The topic incarnation the position belongs to.")
    next_offset: int = Field(ge=0)
    leader_epoch: int = Field(ge=0)


def consumer_settings(group_id: str) -> dict[str, object]:
    """Settings of the checking consumer, on top of the cluster's connection settings. It is assigned
    partitions and never joins ``group_id`` nor commits; it reads one batch per partition at most.
    """
    return {
        "group.id": group_id,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        # A divergence must surface as an error naming the end offset, not as a silent seek to it.
        "auto.offset.reset": "error",
        # A position that checks out is fetched from: a record, or this event when nothing is above it yet.
        "enable.partition.eof": True,
        # Up to the high watermark: a position below it is reachable under either isolation level.
        "isolation.level": "read_uncommitted",
        "queued.min.messages": 1,
    }


def outcome(error: KafkaError | None, offset: int) -> int | bool | None:
    """What one consumer event for a checked partition says: ``True`` the position checks out (a record, or the
    end of the partition); an ``int`` the log diverged there, below ``offset``; ``None`` nothing usable.
    """
    if error is None or error.code() == KafkaError._PARTITION_EOF:
        return True
    if error.code() != KafkaError._AUTO_OFFSET_RESET:
        return None
    found = _DIVERGED.search(error.str())
    if found is None:
        return None  # e.g. "No epoch found less or equal to ...": the leader knows no such epoch
    end = int(found.group(1))
    return end if end < offset else None
