"""Issue 24, item 1: a stream fails over to a mirrored cluster, handed over by timestamp (docs/failover.md), on the
real "east"/"west" clusters, Spark and Delta.

The mirror is made as MirrorMaker 2 makes it: every record of east copied to the same partition of west with its
original (CreateTime) timestamp. The sink is compared with exactly the rows the records must become, duplicates
kept, so a mirrored record landed twice or a post-switch record lost fails the test.
"""

from __future__ import annotations

import dataclasses
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pytest

from devtools.testing.kafka import Record, create_topic, produce, unique_name
from dynamic_kafka.cli.main import main
from tests.support.metadata_changes import harness, numbered, rows

if TYPE_CHECKING:
    from pathlib import Path

    from devtools.local_kafka import ClusterEndpoint

pytestmark = pytest.mark.integration


def stamped(records: list[Record], first_ms: int) -> list[Record]:
    """``records`` with CreateTime timestamps ``first_ms``, ``first_ms + 1``, ... in order."""
    return [dataclasses.replace(r, timestamp_ms=first_ms + i) for i, r in enumerate(records)]


def iso(ms: int) -> str:
    """Epoch milliseconds as the metadata file writes a time (UTC, milliseconds, ``Z``)."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def test_failover_to_a_mirror_by_timestamp_lands_no_mirrored_record_twice_and_loses_none_after_the_switch(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    east, west = kafka_clusters["east"].bootstrap_servers, kafka_clusters["west"].bootstrap_servers
    topic = unique_name("orders")  # one name on both, as MirrorMaker 2's identity replication policy keeps it
    create_topic(east, topic, 2)
    create_topic(west, topic, 2)
    h = harness(tmp_path, kafka_clusters, spark)
    h.set_streams({"orders": {"east": [topic]}})
    first_ms = int(time.time() * 1000) - 60_000
    history = produce(east, topic, stamped(numbered(range(40), partitions=2), first_ms))
    assert h.face().run().records == 40

    produce(west, topic, history)  # the mirror: same partitions, same timestamps
    switch_ms = first_ms + 40  # producers move to west: from here on, records go to west only
    after = produce(west, topic, stamped(numbered(range(40, 50), partitions=2), switch_ms))
    h.set_cluster("west", bootstrap_servers=west, starting_offsets={"timestamp": iso(switch_ms)})
    h.set_streams({"orders": {"west": [topic]}})

    # What docs/failover.md tells an operator to check before the run: each partition of the mirror starts after
    # its 20 mirrored records, at the first record at or after the switch time.
    plan = h.face().plan()
    assert {(s.cluster_id, s.partition): (s.start_offset, s.stop_offset) for s in plan.splits} == {
        ("west", 0): (20, 25),
        ("west", 1): (20, 25),
    }
    assert any(
        f.message.endswith(f"starting at timestamp {iso(switch_ms)} (the starting_offsets of cluster 'west')")
        for f in plan.findings
        if f.kind == "new_topic"
    )

    failover = h.face().run()

    assert failover.records == 10
    assert h.sink_rows() == sorted(rows("east", topic, history) + rows("west", topic, after))
    assert sorted(int(v) for v in h.sink_values()) == list(range(50))

    # A backfill of the whole history after the failover reads the mirror from its handover on: west's copies of
    # east's records (same timestamps, other offsets) are not merged again (docs/failover.md, "Backfills").
    start = datetime.fromtimestamp(first_ms / 1000, tz=UTC)
    backfill = h.face().backfill(start, datetime.now(UTC))

    assert backfill.records == 10  # the records produced to west after the switch, already landed
    assert sorted(int(v) for v in h.sink_values()) == list(range(50))

    # An offsets reset to earliest after the failover rewinds west no further than the handover, and says so
    # (docs/failover.md, "Offsets resets after a failover"): the copies before it are never read again.
    reset = ["offsets", "reset", "--to", "earliest", "--reason", "rewind", "--yes", "--pipeline", "p"]
    assert main([*reset, "--config", str(h.config_path)]) == 0
    out = capsys.readouterr().out
    assert f"west/{topic}[0] stops at 20, not at 0: the first offset at or after {iso(switch_ms)}" in out
    assert "the handover of cluster 'west'" in out
    assert h.face().run().sink_records == 0  # the post-switch records read again are in the sink already
    assert sorted(int(v) for v in h.sink_values()) == list(range(50))
