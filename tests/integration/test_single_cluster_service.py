"""The ``single_cluster`` metadata service on the real "east" cluster: every topic is a stream of its name, Kafka's
internal topics are not streams, and a run over it reads a topic exactly as a metadata file naming it would.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
import yaml

from devtools.testing.kafka import create_topic, produce, unique_name
from devtools.testing.pipeline import PipelineHarness
from dynamic_kafka.config.loader import load_project_config
from dynamic_kafka.metadata.models import ClusterMetadata
from dynamic_kafka.protocol.context import build_metadata_service
from tests.support.metadata_changes import numbered, rows

if TYPE_CHECKING:
    from pathlib import Path

    from devtools.local_kafka import ClusterEndpoint

pytestmark = pytest.mark.integration


def test_single_cluster_service_lists_each_topic_as_a_stream_and_a_run_reads_it(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> None:
    east = kafka_clusters["east"].bootstrap_servers
    topic, internal = unique_name("single"), unique_name("__internal")
    create_topic(east, topic, 2)
    create_topic(east, internal)
    harness = PipelineHarness(tmp_path, clusters={}, spark=lambda: spark)
    config = {
        "metadata_service": {"type": "single_cluster", "cluster_id": "east", "bootstrap_servers": east},
        "pipelines": [{"id": "p", "streams": [topic], "sink": {"path": "sink"}}],
    }
    harness.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    service = build_metadata_service(load_project_config(harness.config_path).metadata_service)

    ids = {s.stream_id for s in service.get_all_streams()}
    assert topic in ids
    assert not any(i.startswith("__") for i in ids)
    described = service.describe_streams([topic, internal, unique_name("absent")])
    assert list(described) == [topic]
    assert described[topic].clusters == {
        "east": ClusterMetadata(cluster_id="east", bootstrap_servers=east, topics=frozenset({topic}))
    }
    assert (service.is_cluster_active("east"), service.is_cluster_active("west")) == (True, False)
    assert service.describe_cluster("east") == ClusterMetadata(cluster_id="east", bootstrap_servers=east)
    assert service.describe_cluster("west") is None

    expected = rows("east", topic, produce(east, topic, numbered(range(6), partitions=2)))
    assert harness.face().run().records == 6
    assert harness.sink_rows() == sorted(expected)
