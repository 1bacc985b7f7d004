"""Which table a topic's records land in with a table per stream (issue 35, rows 7, 8 and 11): the plan's table of
each split routes its rows, a partition keeps the table it first landed in when the streams that list its topic
change, and a run refuses a table the state never knew that holds the pipeline's later runs. On the real broker,
Spark and Delta.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import pytest

from devtools.testing.kafka import create_topic, produce, unique_name
from dynamic_kafka.faults import acting_at
from tests.integration.test_table_per_stream import (
    LEASE_SECONDS,
    SimulatedCrashError,
    crash,
    per_stream_harness,
    table_rows,
)
from tests.support.metadata_changes import numbered, rows

if TYPE_CHECKING:
    from pathlib import Path

    from devtools.local_kafka import ClusterEndpoint

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


def test_a_drained_partition_lands_in_its_splits_table_beside_a_new_partition_of_its_topic_in_another_once(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> None:
    east = kafka_clusters["east"].bootstrap_servers
    topic, other = unique_name("orders"), unique_name("orders-other")
    create_topic(east, topic, 2)
    create_topic(east, other, 1)
    h = per_stream_harness(kafka_clusters, spark, tmp_path, drain_removed=True, run_lease_seconds=LEASE_SECONDS)
    h.set_streams({"orders-b": {"east": {"topics": {topic: [1]}}}})
    old = rows("east", topic, produce(east, topic, numbered(range(2), partitions=2)))
    assert h.runner().run().records == 1  # partition 1 only, in orders-b's table

    # Partition 1 leaves orders-b (drained there: its split's table is orders-b's), partition 0 joins orders-a.
    h.set_streams({"orders-a": {"east": {"topics": {topic: [0]}}}, "orders-b": {"east": [other]}})
    new = rows("east", topic, produce(east, topic, numbered(range(2, 6), partitions=2)))
    # The run dies after orders-a's commit, before orders-b's; its recovery writes orders-b only.
    with acting_at("between_tables", crash), pytest.raises(SimulatedCrashError):
        h.runner().run()
    zero = sorted(r for r in old + new if r[2] == 0)
    assert table_rows(h, "orders-a") == zero
    time.sleep(LEASE_SECONDS + 0.5)
    recovering = h.runner().run()
    assert recovering.recovered_run_seq == 2
    assert table_rows(h, "orders-a") == zero
    assert table_rows(h, "orders-b") == sorted(r for r in old + new if r[2] == 1)
