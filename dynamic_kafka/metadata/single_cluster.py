"""The single-cluster metadata service: every topic of one cluster is a stream named after the topic.

For teams with one cluster today who want the same pipelines, state and orchestration that a multi-cluster
setup gets later. Internal topics (names starting with ``__``) are not streams.

The service is given the function that lists a cluster's topics (``dynamic_kafka.kafka.list_topic_names`` in
production, wired by :mod:`dynamic_kafka.protocol.context`) rather than importing the Kafka client: the ``kafka``
package depends on ``metadata`` (a client is built from a :class:`ClusterMetadata`), so ``metadata`` must not depend on
it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dynamic_kafka.errors import KafkaClientError, MetadataServiceError
from dynamic_kafka.metadata.models import ClusterMetadata, KafkaStream
from dynamic_kafka.metadata.service import KafkaMetadataService

if TYPE_CHECKING:
    from collections.abc import Callable, Collection


class SingleClusterMetadataService(KafkaMetadataService):
    """Lists the cluster's topics on every call; each topic ``t`` is the stream ``t`` on that cluster."""

    def __init__(self, cluster: ClusterMetadata, list_topics: Callable[[ClusterMetadata], list[str]]) -> None:
        """Args:
        cluster: the one cluster.
        list_topics: lists a cluster's topic names; raises KafkaClientError when the cluster cannot answer.
        """
        self.cluster = cluster.connection()
        self._list_topics = list_topics

    def _streams(self) -> dict[str, KafkaStream]:
        try:
            names = self._list_topics(self.cluster)
        except KafkaClientError as e:
            raise MetadataServiceError(f"single-cluster metadata service: {e}") from e
        return {
            name: KafkaStream(
                stream_id=name,
                clusters={self.cluster.cluster_id: self.cluster.with_topics(frozenset({name}))},
            )
            for name in sorted(names)
            if not name.startswith("__")
        }

    def get_all_streams(self) -> set[KafkaStream]:
        """Return one stream per topic of the cluster, named after the topic."""
        return set(self._streams().values())

    def describe_streams(self, stream_ids: Collection[str]) -> dict[str, KafkaStream]:
        """Return the named topics of the cluster as streams (unknown ids are left out)."""
        streams = self._streams()
        return {i: streams[i] for i in stream_ids if i in streams}

    def is_cluster_active(self, cluster_id: str) -> bool:
        """Tell whether ``cluster_id`` is this service's cluster."""
        return cluster_id == self.cluster.cluster_id

    def describe_cluster(self, cluster_id: str) -> ClusterMetadata | None:
        """Return this service's cluster when asked for it, else None."""
        return self.cluster if cluster_id == self.cluster.cluster_id else None
