"""The ``KafkaMetadataService`` interface: the source of truth for which clusters and topics make up a stream."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Collection

    from dynamic_kafka.metadata.models import ClusterMetadata, KafkaStream


class KafkaMetadataService(ABC):
    """Answers which physical clusters and topics make up each logical stream, at the moment it is asked.

    Implementations raise :class:`~dynamic_kafka.errors.MetadataServiceError` when they cannot answer; the runner
    retries those with backoff and fails the run with nothing written.
    """

    @abstractmethod
    def get_all_streams(self) -> set[KafkaStream]:
        """Every stream the service knows."""

    @abstractmethod
    def describe_streams(self, stream_ids: Collection[str]) -> dict[str, KafkaStream]:
        """The named streams that exist, by stream id; unknown ids are absent from the result."""

    @abstractmethod
    def is_cluster_active(self, cluster_id: str) -> bool:
        """Whether any stream currently uses ``cluster_id``."""

    def describe_cluster(self, cluster_id: str) -> ClusterMetadata | None:
        """How to reach a cluster that no stream uses any more, if the service still knows it.

        Used to drain removed clusters (``drain_removed: true``). The default knows only active clusters.
        """
        for stream in self.get_all_streams():
            if cluster_id in stream.clusters:
                return stream.clusters[cluster_id].connection()
        return None

    def close(self) -> None:  # noqa: B027 - most services hold nothing to release
        """Releases resources held by the service."""

    def __enter__(self) -> KafkaMetadataService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def clusters_in_use(streams: Collection[KafkaStream]) -> set[str]:
    """The cluster ids that any of ``streams`` uses."""
    return {cid for s in streams for cid in s.clusters}
