"""The data path's foundation: exact Kafka offset ranges from two clusters, read by Spark, landed in Delta."""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING, Any

import pytest

from devtools.testing.kafka import Record, create_topic, produce, unique_name

if TYPE_CHECKING:
    from pathlib import Path

    from devtools.local_kafka import ClusterEndpoint, LocalCluster

pytestmark = pytest.mark.integration

PARTITIONS = 3
BASE_TS_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z

Landed = tuple[str, str, int, int, bytes | None, bytes | None, int, tuple[tuple[str, bytes | None], ...], int]


def _records(cluster: str, tag: str, count: int, first_ts_ms: int) -> list[Record]:
    """Records covering every partition, with and without keys, headers (one null-valued) and a null value."""
    return [
        Record(
            value=None if i == 4 else f"{cluster}-{tag}-{i}".encode(),
            key=None if i % 3 == 0 else f"key-{i}".encode(),
            headers=() if i % 2 else (("source", cluster.encode()), ("seq", str(i).encode()), ("empty", None)),
            timestamp_ms=first_ts_ms + i * 1_000,
            partition=i % PARTITIONS,
        )
        for i in range(count)
    ]


def _kafka_range(spark: Any, cluster: ClusterEndpoint, topic: str, start: dict[int, int], end: dict[int, int]) -> Any:
    from pyspark.sql import functions as F  # noqa: N812 (the conventional alias)

    return (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", cluster.bootstrap_servers)
        .option("assign", json.dumps({topic: sorted(start)}))
        .option("startingOffsets", json.dumps({topic: {str(p): o for p, o in start.items()}}))
        .option("endingOffsets", json.dumps({topic: {str(p): o for p, o in end.items()}}))
        .option("includeHeaders", "true")
        .load()
        .withColumn("cluster", F.lit(cluster.name))
    )


@pytest.mark.timeout(600)
def test_exact_offset_ranges_of_two_clusters_land_in_delta(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> None:
    expected: set[Landed] = set()
    frames = []
    for name in ("east", "west"):
        cluster = kafka_clusters[name]
        topic = unique_name(f"orders-{name}")
        create_topic(cluster.bootstrap_servers, topic, PARTITIONS)
        # Records before and after the range prove the read honours the numeric offsets, not earliest/latest.
        before = produce(cluster.bootstrap_servers, topic, _records(name, "before", PARTITIONS, BASE_TS_MS - 60_000))
        wanted = produce(cluster.bootstrap_servers, topic, _records(name, "wanted", 12, BASE_TS_MS))
        produce(cluster.bootstrap_servers, topic, _records(name, "after", PARTITIONS, BASE_TS_MS + 60_000))
        assert sorted(r.partition for r in before) == list(range(PARTITIONS))
        offsets = {p: [r.offset for r in wanted if r.partition == p] for p in range(PARTITIONS)}
        start = {p: min(o) for p, o in offsets.items()}
        end = {p: max(o) + 1 for p, o in offsets.items()}
        assert start == dict.fromkeys(range(PARTITIONS), 1)
        frames.append(_kafka_range(spark, cluster, topic, start, end))
        expected |= {(name, topic, r.partition, r.offset, r.key, r.value, r.timestamp_ms, r.headers, 0) for r in wanted}

    sink = str(tmp_path / "sink")
    functools.reduce(lambda a, b: a.unionByName(b), frames).write.format("delta").mode("append").save(sink)

    rows = spark.read.format("delta").load(sink).selectExpr("*", "unix_millis(timestamp) AS timestamp_ms").collect()
    landed = {
        (
            row.cluster,
            row.topic,
            row.partition,
            row.offset,
            None if row.key is None else bytes(row.key),
            None if row.value is None else bytes(row.value),
            row.timestamp_ms,
            tuple((h.key, None if h.value is None else bytes(h.value)) for h in row.headers or ()),
            row.timestampType,
        )
        for row in rows
    }
    assert len(rows) == len(landed) == 24
    assert landed == expected


def test_spark_reads_a_sasl_cluster_without_showing_the_password(
    sasl_cluster: LocalCluster, sasl_password: str, spark: Any
) -> None:
    config = sasl_cluster.client_config(sasl_password)
    topic = unique_name("secured")
    create_topic(config, topic, 1)
    produce(config, topic, [Record(value=b"only")])
    jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{sasl_cluster.sasl_user}" password="{sasl_password}";'
    )
    frame = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", sasl_cluster.bootstrap_servers)
        .option("kafka.security.protocol", "SASL_PLAINTEXT")
        .option("kafka.sasl.mechanism", "PLAIN")
        .option("kafka.sasl.jaas.config", jaas)
        .option("subscribe", topic)
        .load()
    )
    assert [bytes(row.value) for row in frame.collect()] == [b"only"]
    plans = frame._jdf.queryExecution().toString()
    assert topic in plans
    assert sasl_password not in plans
    assert all(sasl_password not in value for _, value in spark.sparkContext.getConf().getAll())
