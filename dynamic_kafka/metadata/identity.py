"""One pipeline's view of the metadata service: every cluster it returns carries the pipeline's Kafka client
properties, so every client built from it (the driver's confluent-kafka clients and Spark's Kafka consumers) does.

Per cluster the properties are, lowest precedence first: ``client.id: dynamic-kafka-<pipeline>-<cluster>`` (so
broker quotas, request logs and audits tell pipelines apart, like Flink's ``client.id.prefix``), the pipeline's
``properties``, then the cluster's own ``properties`` from the metadata. A value set at a higher level wins. Flink's
``client.id.prefix`` is honoured as ``client.id: <prefix>-<cluster>`` below any explicit ``client.id``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dynamic_kafka.config.flink_options import translate_flink_options
from dynamic_kafka.metadata.service import KafkaMetadataService

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping

    from dynamic_kafka.metadata.models import ClusterMetadata, KafkaStream


def client_id(pipeline_id: str, cluster_id: str) -> str:
    """The default ``client.id`` of a pipeline's clients on one cluster.

    Example:
        >>> client_id("orders", "east")
        'dynamic-kafka-orders-east'
    """
    return f"dynamic-kafka-{pipeline_id}-{cluster_id}"


def with_pipeline_properties(
    cluster: ClusterMetadata, pipeline_id: str, properties: Mapping[str, str]
) -> ClusterMetadata:
    """``cluster`` with the default ``client.id`` and the pipeline's ``properties`` under its own properties, Flink's
    source options translated or refused (:mod:`dynamic_kafka.config.flink_options`).

    Raises:
        FlinkOptionError: a Flink source option that has no meaning here.
    """
    explicit = translate_flink_options({**properties, **cluster.properties}, cluster_id=cluster.cluster_id)
    merged = {"client.id": client_id(pipeline_id, cluster.cluster_id), **explicit}
    return cluster.with_properties(merged)


class PipelineClientProperties(KafkaMetadataService):
    """``inner`` with the pipeline's client properties under every cluster's own (see the module docstring).

    Args:
        inner: the service to ask.
        pipeline_id: the pipeline, for the default ``client.id``.
        properties: the pipeline's ``properties`` (references such as ``${env:NAME}`` allowed, resolved only when a
            client is built, like a cluster's).
    """

    def __init__(self, inner: KafkaMetadataService, pipeline_id: str, properties: Mapping[str, str]) -> None:
        self.inner = inner
        self.pipeline_id = pipeline_id
        self.properties = dict(properties)

    def cluster(self, cluster: ClusterMetadata) -> ClusterMetadata:
        """``cluster`` with the pipeline's properties merged under its own."""
        return with_pipeline_properties(cluster, self.pipeline_id, self.properties)

    def _stream(self, stream: KafkaStream) -> KafkaStream:
        return stream.map_clusters(self.cluster)

    def get_all_streams(self) -> set[KafkaStream]:
        """Return the inner service's streams, their clusters carrying the pipeline's properties."""
        return {self._stream(s) for s in self.inner.get_all_streams()}

    def describe_streams(self, stream_ids: Collection[str]) -> dict[str, KafkaStream]:
        """Return the inner service's named streams, their clusters carrying the pipeline's properties."""
        return {sid: self._stream(s) for sid, s in self.inner.describe_streams(stream_ids).items()}

    def is_cluster_active(self, cluster_id: str) -> bool:
        """Ask the inner service."""
        return self.inner.is_cluster_active(cluster_id)

    def describe_cluster(self, cluster_id: str) -> ClusterMetadata | None:
        """Return the inner service's cluster carrying the pipeline's properties, or None if it does not know it."""
        found = self.inner.describe_cluster(cluster_id)
        return self.cluster(found) if found is not None else None

    def close(self) -> None:
        """Close the inner service."""
        self.inner.close()
