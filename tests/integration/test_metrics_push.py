"""Metrics sent by a run on the real "east" cluster and by ``health`` after it to a real Prometheus Pushgateway and
a real OpenTelemetry Collector at once, read back from the gateway's HTTP API and from what the Collector's file
exporter wrote, with ``register.consumer.metrics`` the Kafka clients' own statistics among them; then a run whose
OTLP receiver is down; and without ``register.consumer.metrics`` no client statistics."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from devtools.testing.kafka import produce, unique_name
from dynamic_kafka import Pipeline
from dynamic_kafka._toolchain.process import free_port
from dynamic_kafka.config.loader import load_project_config
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
    h, topics = orders_stream(
        tmp_path,
        kafka_clusters,
        spark,
        {"east": 2},
        consumer_group=unique_name("metrics"),
        properties={"register.consumer.metrics": "true"},
    )
    east, topic = kafka_clusters["east"].bootstrap_servers, topics["east"]
    job = unique_name("job")
    monkeypatch.setenv("DK_TEST_OTLP_TENANT", "tenant-1")
    otlp = {"endpoint": otel_collector.endpoint, "headers": {"x-scope-orgid": "${env:DK_TEST_OTLP_TENANT}"}}
    metrics = {"pushgateway": pushgateway.url, "otlp": otlp, "job": job, "labels": {"env": "test"}}
    pipeline = _exporting(h.config_path, metrics, spark)
    produce(east, topic, numbered(range(5), partitions=2))  # offsets 0..2 on partition 0, 0..1 on partition 1

    summary = pipeline.run()

    assert summary.records == 5

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
    # The clients that looked the offsets up and committed the group: librdkafka's figures, per broker.
    (statistics,) = summary.client_statistics
    assert statistics.cluster_id == "east"
    assert statistics.clients >= 2  # the snapshot's admin client and the group commit's at least
    for got in received("run"):
        assert {k: got.get(k) for k in run} == run
        assert got[("dynamic_kafka_event_time_lag_seconds", ())] >= 0
        _assert_client_figures(got, statistics.brokers)

    produce(east, topic, numbered(range(5, 8), partitions=2))  # one more on partition 0, two on partition 1
    report = pipeline.health()

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
        _assert_client_figures(got, report.client_statistics[0].brokers)
    # The run's group is still there beside the health check's: each operation replaces only its own.
    assert pushgateway.values(job=job, pipeline="p", operation="run")[("dynamic_kafka_run_records", ())] == 5

    down = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    pipeline = _exporting(h.config_path, {"otlp": {"endpoint": down, "timeout_seconds": 2}, "job": job}, spark)
    with caplog.at_level(logging.WARNING, logger="dynamic_kafka.operations.otlp"):
        assert pipeline.run().records == 3

    # Only this run's warnings: the earlier exports' info lines stay in the capture when the suite logs at info.
    otlp = [r for r in caplog.records if r.name == "dynamic_kafka.operations.otlp" and r.levelno >= logging.WARNING]
    [warning] = [r.getMessage() for r in otlp]
    assert f"metrics of run 'p' not exported to {down}/v1/metrics" in warning


def test_without_register_consumer_metrics_no_client_statistics_are_collected_or_pushed(
    kafka_clusters: dict[str, ClusterEndpoint], pushgateway: LocalPushgateway, tmp_path: Path
) -> None:
    h, _ = orders_stream(tmp_path, kafka_clusters, None, {"east": 1})
    job = unique_name("job")
    pipeline = _exporting(h.config_path, {"pushgateway": pushgateway.url, "job": job}, None)

    summary = pipeline.run()  # nothing to read: no Spark, but the brokers' offsets were asked
    report = pipeline.health()

    assert (summary.status, summary.client_statistics, report.client_statistics) == ("empty", (), ())
    for operation in ("run", "health"):
        pushed = pushgateway.values(job=job, pipeline="p", operation=operation)
        assert ("dynamic_kafka_clusters", ()) in pushed
        assert not [name for name, _ in pushed if name.startswith("dynamic_kafka_client_")]


def _exporting(config_path: Path, metrics: dict[str, Any], spark: Any) -> Pipeline:
    """The pipeline ``p`` of the config at ``config_path``, its project's ``metrics`` section set to ``metrics``."""
    config = yaml.safe_load(config_path.read_text())
    config["metrics"] = metrics
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    return Pipeline(load_project_config(config_path), "p", spark=lambda: spark)


def _assert_client_figures(received: dict[Point, float], brokers: Any) -> None:
    """Plausible figures for the broker that answered (node 1 of the local cluster), received as the report has
    them."""
    (answered,) = [b for b in brokers if b.broker.endswith("/1")]
    assert answered.requests_sent > 0
    assert answered.responses_received > 0
    assert answered.bytes_sent > 0
    assert answered.bytes_received > answered.bytes_sent  # metadata and offsets answers outweigh the requests
    assert (answered.errors, answered.request_timeouts) == (0, 0)
    assert answered.rtt_avg_seconds is not None
    assert answered.rtt_p99_seconds is not None
    assert 0 < answered.rtt_avg_seconds < 5
    assert 0 < answered.rtt_p99_seconds < 5
    where = (("broker", answered.broker), ("cluster_id", "east"))
    assert received[("dynamic_kafka_client_requests_sent", where)] == answered.requests_sent
    assert received[("dynamic_kafka_client_bytes_sent", where)] == answered.bytes_sent
    assert received[("dynamic_kafka_client_rtt_avg_seconds", where)] == pytest.approx(answered.rtt_avg_seconds)
