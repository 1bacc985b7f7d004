"""Metrics sent by a run on the real "east" cluster and by ``health`` after it to a real Prometheus Pushgateway and
a real OpenTelemetry Collector at once, read back from the gateway's HTTP API and from what the Collector's file
exporter wrote; then a run whose OTLP receiver is down."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from devtools.testing.kafka import produce, unique_name
from dynamic_kafka import Pipeline
from dynamic_kafka._toolchain.process import free_port
from dynamic_kafka.config.models import load_project_config
from tests.support.metadata_changes import numbered, orders_stream

if TYPE_CHECKING:
    from pathlib import Path

    from devtools.local_kafka import ClusterEndpoint
    from devtools.testing.collector import LocalCollector, Point
    from devtools.testing.pushgateway import LocalPushgateway

pytestmark = pytest.mark.integration


def test_a_run_then_health_send_their_records_offsets_and_lag_to_a_pushgateway_and_an_otlp_collector(
    kafka_clusters: dict[str, ClusterEndpoint],
    spark: Any,
    pushgateway: LocalPushgateway,
    otel_collector: LocalCollector,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    h, topics = orders_stream(tmp_path, kafka_clusters, spark, {"east": 2}, consumer_group=unique_name("metrics"))
    east, topic = kafka_clusters["east"].bootstrap_servers, topics["east"]
    job = unique_name("job")
    monkeypatch.setenv("DK_TEST_OTLP_TENANT", "tenant-1")
    otlp = {"endpoint": otel_collector.endpoint, "headers": {"x-scope-orgid": "${env:DK_TEST_OTLP_TENANT}"}}
    config = yaml.safe_load(h.config_path.read_text())
    config["metrics"] = {"pushgateway": pushgateway.url, "otlp": otlp, "job": job, "labels": {"env": "test"}}
    h.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    pipeline = Pipeline(load_project_config(h.config_path), "p", spark=lambda: spark)
    produce(east, topic, numbered(range(5), partitions=2))  # offsets 0..2 on partition 0, 0..1 on partition 1

    assert pipeline.run().records == 5

    def at(partition: int) -> tuple[tuple[str, str], ...]:
        return (("cluster_id", "east"), ("partition", str(partition)), ("topic", topic))

    def received(operation: str) -> list[dict[Point, float]]:
        """What the Pushgateway's group and the Collector hold of ``operation``, as the same points."""
        group = {"pipeline": "p", "operation": operation, "env": "test"}
        return [pushgateway.values(job=job, **group), otel_collector.values(**{"service.name": job, **group})]

    run = {
        ("dynamic_kafka_run_records", ()): 5,
        ("dynamic_kafka_run_seq", ()): 1,
        ("dynamic_kafka_run_status", (("status", "committed"),)): 1,
        ("dynamic_kafka_clusters", ()): 1,
        ("dynamic_kafka_pending_records", ()): 0,
        ("dynamic_kafka_topic_records", (("cluster_id", "east"), ("topic", topic))): 5,
        ("dynamic_kafka_partition_committed_offset", at(0)): 3,
        ("dynamic_kafka_partition_committed_offset", at(1)): 2,
        ("dynamic_kafka_commits_succeeded", (("cluster_id", "east"),)): 1,
        ("dynamic_kafka_commits_failed", (("cluster_id", "east"),)): 0,
    }
    for got in received("run"):
        assert {k: got.get(k) for k in run} == run
        assert got[("dynamic_kafka_event_time_lag_seconds", ())] >= 0

    produce(east, topic, numbered(range(5, 8), partitions=2))  # one more on partition 0, two on partition 1
    pipeline.health()

    health = {
        ("dynamic_kafka_pending_records", ()): 3,
        ("dynamic_kafka_clusters", ()): 1,
        ("dynamic_kafka_unreachable_clusters", ()): 0,
        ("dynamic_kafka_partition_committed_offset", at(0)): 3,
        ("dynamic_kafka_partition_high_watermark", at(0)): 4,
        ("dynamic_kafka_partition_pending_records", at(0)): 1,
        ("dynamic_kafka_partition_pending_records", at(1)): 2,
        ("dynamic_kafka_health_check_passed", (("check", "data_loss"),)): 1,
    }
    for got in received("health"):
        assert {k: got.get(k) for k in health} == health
        assert got[("dynamic_kafka_partition_idle_seconds", at(0))] >= 0
    # The run's group is still there beside the health check's: each operation replaces only its own.
    assert pushgateway.values(job=job, pipeline="p", operation="run")[("dynamic_kafka_run_records", ())] == 5

    down = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    config["metrics"] = {"otlp": {"endpoint": down, "timeout_seconds": 2}, "job": job}
    h.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    pipeline = Pipeline(load_project_config(h.config_path), "p", spark=lambda: spark)
    with caplog.at_level(logging.WARNING, logger="dynamic_kafka.operations.otlp"):
        assert pipeline.run().records == 3

    [warning] = [r.getMessage() for r in caplog.records if r.name == "dynamic_kafka.operations.otlp"]
    assert f"metrics of run 'p' not exported to {down}/v1/metrics" in warning
