"""Metrics pushed to a real Prometheus Pushgateway by a run on the real "east" cluster and by ``health`` after it,
read back from the gateway's own HTTP API."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
import yaml

from devtools.testing.kafka import produce, unique_name
from dynamic_kafka import Pipeline
from dynamic_kafka.config.loader import load_project_config
from tests.support.metadata_changes import numbered, orders_stream

if TYPE_CHECKING:
    from pathlib import Path

    from devtools.local_kafka import ClusterEndpoint
    from devtools.testing.pushgateway import LocalPushgateway

pytestmark = pytest.mark.integration


def test_a_run_then_health_push_their_records_offsets_and_lag_to_the_pushgateway(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, pushgateway: LocalPushgateway, tmp_path: Path
) -> None:
    h, topics = orders_stream(tmp_path, kafka_clusters, spark, {"east": 2}, consumer_group=unique_name("metrics"))
    east, topic = kafka_clusters["east"].bootstrap_servers, topics["east"]
    job = unique_name("job")
    config = yaml.safe_load(h.config_path.read_text())
    config["metrics"] = {"pushgateway": pushgateway.url, "job": job, "labels": {"env": "test"}}
    h.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    pipeline = Pipeline(load_project_config(h.config_path), "p", spark=lambda: spark)
    produce(east, topic, numbered(range(5), partitions=2))  # offsets 0..2 on partition 0, 0..1 on partition 1

    assert pipeline.run().records == 5

    def at(partition: int) -> tuple[tuple[str, str], ...]:
        return (("cluster_id", "east"), ("partition", str(partition)), ("topic", topic))

    run = pushgateway.values(job=job, pipeline="p", operation="run", env="test")
    assert run[("dynamic_kafka_run_records", ())] == 5
    assert run[("dynamic_kafka_run_seq", ())] == 1
    assert run[("dynamic_kafka_run_status", (("status", "committed"),))] == 1
    assert run[("dynamic_kafka_clusters", ())] == 1
    assert run[("dynamic_kafka_pending_records", ())] == 0
    assert run[("dynamic_kafka_topic_records", (("cluster_id", "east"), ("topic", topic)))] == 5
    assert run[("dynamic_kafka_partition_committed_offset", at(0))] == 3
    assert run[("dynamic_kafka_partition_committed_offset", at(1))] == 2
    assert run[("dynamic_kafka_commits_succeeded", (("cluster_id", "east"),))] == 1
    assert run[("dynamic_kafka_commits_failed", (("cluster_id", "east"),))] == 0
    assert run[("dynamic_kafka_event_time_lag_seconds", ())] >= 0

    produce(east, topic, numbered(range(5, 8), partitions=2))  # one more on partition 0, two on partition 1
    pipeline.health()

    health = pushgateway.values(job=job, pipeline="p", operation="health", env="test")
    assert health[("dynamic_kafka_pending_records", ())] == 3
    assert health[("dynamic_kafka_clusters", ())] == 1
    assert health[("dynamic_kafka_unreachable_clusters", ())] == 0
    assert health[("dynamic_kafka_partition_committed_offset", at(0))] == 3
    assert health[("dynamic_kafka_partition_high_watermark", at(0))] == 4
    assert health[("dynamic_kafka_partition_pending_records", at(0))] == 1
    assert health[("dynamic_kafka_partition_pending_records", at(1))] == 2
    assert health[("dynamic_kafka_partition_idle_seconds", at(0))] >= 0
    assert health[("dynamic_kafka_health_check_passed", (("check", "data_loss"),))] == 1
    # The run's group is still there beside the health check's: each operation replaces only its own.
    assert pushgateway.values(job=job, pipeline="p", operation="run")[("dynamic_kafka_run_records", ())] == 5
