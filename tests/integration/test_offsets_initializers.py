"""Offsets initializers on the real "east"/"west" clusters, Spark and Delta: where a run stops, per cluster."""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any

import pytest

from devtools.testing.kafka import commit_group, produce, unique_name
from tests.support.metadata_changes import numbered, orders_stream, rows

if TYPE_CHECKING:
    from pathlib import Path

    from devtools.local_kafka import ClusterEndpoint

pytestmark = pytest.mark.integration


def test_a_clusters_own_stopping_offsets_bound_its_reads_and_the_others_read_to_latest(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> None:
    h, topics = orders_stream(tmp_path, kafka_clusters, spark, {"east": 1, "west": 1})
    east, west = kafka_clusters["east"].bootstrap_servers, kafka_clusters["west"].bootstrap_servers
    cut = int(time.time() * 1000)
    # Records 0..2 stamped a minute before ``cut``, 3..4 a minute after: east's own stop is the first at ``cut``.
    stamped = [
        dataclasses.replace(r, timestamp_ms=cut + (60_000 if i >= 3 else -60_000))
        for i, r in enumerate(numbered(range(5)))
    ]
    on_east = rows("east", topics["east"], produce(east, topics["east"], stamped))
    on_west = rows("west", topics["west"], produce(west, topics["west"], numbered(range(5, 9))))
    h.set_cluster("east", bootstrap_servers=east, stopping_offsets={"timestamp": cut})

    first = h.face().run()

    by_topic = {(t.cluster_id, t.topic): t.records for t in first.topics}
    assert by_topic == {("east", topics["east"]): 3, ("west", topics["west"]): 4}
    assert h.sink_rows() == sorted(on_east[:3] + on_west)

    # Without the override east reads on from where its stop left it, each record once.
    h.set_cluster("east", bootstrap_servers=east)
    assert h.face().run().records == 2
    assert h.sink_rows() == sorted(on_east + on_west)


def test_committed_offsets_as_a_stopping_point_never_read_past_the_group(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> None:
    group = unique_name("ahead")
    stopping = {"committed": {"group_id": group, "reset": "earliest"}}
    h, topics = orders_stream(tmp_path, kafka_clusters, spark, {"east": 2}, stopping_offsets=stopping)
    east, topic = kafka_clusters["east"].bootstrap_servers, topics["east"]
    produced = rows("east", topic, produce(east, topic, numbered(range(10), partitions=2)))
    commit_group(east, group, {(topic, 0): 2})

    # Partition 0 stops at the group's offset 2; partition 1, which the group has no offset for, reads nothing.
    assert h.face().run().records == 2
    assert h.sink_rows() == sorted(r for r in produced if r[2] == 0 and r[3] < 2)

    commit_group(east, group, {(topic, 0): 4, (topic, 1): 1})
    assert h.face().run().records == 3
    assert h.sink_rows() == sorted(r for r in produced if r[3] < (4 if r[2] == 0 else 1))


def test_specific_offsets_place_the_rest_at_the_groups_offsets_then_the_fallback(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> None:
    group = unique_name("placing")
    h, topics = orders_stream(tmp_path, kafka_clusters, spark, {"east": 3})
    east, topic = kafka_clusters["east"].bootstrap_servers, topics["east"]
    produced = rows("east", topic, produce(east, topic, numbered(range(12), partitions=3)))
    commit_group(east, group, {(topic, 1): 3})
    h.configure(starting_offsets={"specific": {"offsets": {topic: {0: 2}}, "group_id": group, "fallback": "latest"}})

    # Partition 0 from its listed offset 2, partition 1 from the group's 3, partition 2 (neither) from latest.
    assert h.face().run().records == 2 + 1
    assert h.sink_rows() == sorted(r for r in produced if (r[2], r[3]) in {(0, 2), (0, 3), (1, 3)})


def test_a_custom_initializer_asks_the_brokers_and_places_each_partitions_first_start(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> None:
    group = unique_name("custom")
    h, topics = orders_stream(tmp_path, kafka_clusters, spark, {"east": 2})
    east, topic = kafka_clusters["east"].bootstrap_servers, topics["east"]
    cut = int(time.time() * 1000)
    stamped = [
        dataclasses.replace(r, timestamp_ms=cut + (60_000 if r.partition == 1 and i >= 6 else -60_000))
        for i, r in enumerate(numbered(range(10), partitions=2))
    ]
    produced = rows("east", topic, produce(east, topic, stamped))
    commit_group(east, group, {(topic, 0): 4})
    function = "tests.support.initializers:group_then_time"
    h.configure(starting_offsets={"custom": {"function": function, "args": {"group_id": group, "since_ms": cut}}})

    # Partition 0 from the group's offset 4; partition 1 (no group offset) from its first record at ``cut``, 3.
    assert h.face().run().records == 1 + 2
    assert h.sink_rows() == sorted(r for r in produced if r[3] >= (4 if r[2] == 0 else 3))


def test_a_custom_stopping_initializer_stops_every_run_where_the_function_says(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> None:
    stopping = {"custom": {"function": "tests.support.initializers:hold_back", "args": {"back": 2}}}
    h, topics = orders_stream(tmp_path, kafka_clusters, spark, {"east": 2}, stopping_offsets=stopping)
    east, topic = kafka_clusters["east"].bootstrap_servers, topics["east"]
    produced = rows("east", topic, produce(east, topic, numbered(range(10), partitions=2)))

    # Offsets 0..4 on each partition: each run stops two before the end, the second where the first left off.
    first = h.face().run()
    assert (first.records, first.lag_after) == (6, 4)
    assert h.sink_rows() == sorted(r for r in produced if r[3] < 3)
    assert h.face().run().records == 0

    more = rows("east", topic, produce(east, topic, numbered(range(10, 12), partitions=2)))
    assert h.face().run().records == 2
    assert h.sink_rows() == sorted(r for r in produced + more if r[3] < 4)
