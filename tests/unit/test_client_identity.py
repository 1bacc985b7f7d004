"""Kafka client identity: every client a pipeline builds, the driver's confluent-kafka clients and Spark's Kafka
consumers, carries ``client.id`` ``dynamic-kafka-<pipeline>-<cluster>`` unless the user's properties set one, and
the pipeline's ``properties`` sit under each cluster's own. Built from real config and metadata files; no broker is
contacted (clients are created lazily).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dynamic_kafka.config.loader import load_project_config
from dynamic_kafka.kafka.connection import AdminConnection
from dynamic_kafka.protocol.context import PipelineContext
from dynamic_kafka.spark.reader import kafka_read_options
from tests.support.builders import a_split

if TYPE_CHECKING:
    from pathlib import Path

    from dynamic_kafka.model.plan import Split

METADATA = """
clusters:
  east: {bootstrap_servers: "127.0.0.1:19092", properties: {fetch.max.bytes: "2000000"}}
  west: {bootstrap_servers: "127.0.0.1:29092", properties: {client.id: "west-audit"}}
  old: {bootstrap_servers: "127.0.0.1:39092"}
streams:
  orders: {east: [orders], west: [orders-v2]}
  legacy: {old: [legacy]}
"""


def context(tmp_path: Path, pipeline_extra: str = "") -> PipelineContext:
    (tmp_path / "metadata.yaml").write_text(METADATA)
    config = tmp_path / "dynamic_kafka.yaml"
    config.write_text(
        "metadata_service: {type: file, path: metadata.yaml}\n"
        f"pipelines:\n  - id: orders\n    streams: [orders]\n    sink: {{path: sink}}\n{pipeline_extra}"
    )
    return PipelineContext(load_project_config(config), "orders")


def split(cluster_id: str, topic: str) -> Split:
    return a_split(topic=topic, cluster=cluster_id, bootstrap="127.0.0.1:19092")


def test_every_client_of_a_pipeline_carries_its_client_id(tmp_path: Path) -> None:
    clusters = context(tmp_path).resolve().clusters()

    east = clusters["east"]
    assert AdminConnection(east)._conf()["client.id"] == "dynamic-kafka-orders-east"
    options = kafka_read_options(east, [split("east", "orders")], isolation_level="read_committed")
    assert options["kafka.client.id"] == "dynamic-kafka-orders-east"
    # A cluster that sets its own client.id keeps it.
    assert clusters["west"].client_properties()["client.id"] == "west-audit"


def test_a_removed_cluster_described_by_the_service_carries_it_too(tmp_path: Path) -> None:
    old = context(tmp_path).service.describe_cluster("old")

    assert old is not None
    assert old.client_properties()["client.id"] == "dynamic-kafka-orders-old"


def test_pipeline_properties_sit_under_each_clusters_own(tmp_path: Path) -> None:
    extra = '    properties: {client.id: "team-orders", fetch.max.bytes: "1000", receive.buffer.bytes: "65536"}\n'
    clusters = context(tmp_path, extra).resolve().clusters()

    east = clusters["east"].client_properties()
    assert (east["client.id"], east["fetch.max.bytes"], east["receive.buffer.bytes"]) == (
        "team-orders",
        "2000000",
        "65536",
    )
    west = kafka_read_options(clusters["west"], [split("west", "orders-v2")], isolation_level="read_committed")
    assert (west["kafka.client.id"], west["kafka.fetch.max.bytes"]) == ("west-audit", "1000")
