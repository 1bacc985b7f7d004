"""Flink's source options in ``properties`` on the real "east" cluster: ``client.id.prefix`` is translated and the run
lands its records; an option with no meaning here stops the run before anything is written, naming the product's key
(not librdkafka's "No such configuration property").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from devtools.testing.kafka import produce
from dynamic_kafka.config.flink_options import FlinkOptionError
from tests.support.metadata_changes import numbered, orders_stream, rows

if TYPE_CHECKING:
    from pathlib import Path

    from devtools.local_kafka import ClusterEndpoint

pytestmark = pytest.mark.integration


def test_flinks_client_id_prefix_is_translated_and_a_meaningless_option_stops_the_run_naming_the_key(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> None:
    harness, topics = orders_stream(
        tmp_path, kafka_clusters, spark, {"east": 2}, properties={"client.id.prefix": "job"}
    )
    east, topic = kafka_clusters["east"].bootstrap_servers, topics["east"]
    expected = rows("east", topic, produce(east, topic, numbered(range(4), partitions=2)))

    assert harness.face().run().records == 4
    assert harness.sink_rows() == sorted(expected)

    harness.set_cluster("east", bootstrap_servers=east, properties={"commit.offsets.on.checkpoint": "true"})
    produce(east, topic, numbered(range(4, 6), partitions=2))
    with pytest.raises(FlinkOptionError) as caught:
        harness.face().run()

    assert (caught.value.key, caught.value.cluster_id) == ("commit.offsets.on.checkpoint", "east")
    assert "`consumer_group`" in str(caught.value)
    assert harness.sink_rows() == sorted(expected)
