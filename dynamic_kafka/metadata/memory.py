"""An in-memory metadata service for programs and tests: mutable, with a switch that makes it fail."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from dynamic_kafka.errors import MetadataServiceError
from dynamic_kafka.metadata.service import KafkaMetadataService, clusters_in_use

if TYPE_CHECKING:
    from collections.abc import Collection

    from dynamic_kafka.metadata.models import ClusterMetadata, KafkaStream


class InMemoryMetadataService(KafkaMetadataService):
    """Holds streams in memory. ``set_streams`` replaces them; ``set_active`` switches a cluster off and on;
    ``fail_next(n)`` makes the next n calls fail.

    Example:
        >>> service = InMemoryMetadataService()
        >>> service.set_streams([])
        >>> service.get_all_streams()
        set()
    """

    def __init__(self, streams: Collection[KafkaStream] = (), clusters: Collection[ClusterMetadata] = ()) -> None:
        self._lock = threading.Lock()
        self._streams = {s.stream_id: s for s in streams}
        self._known_clusters = {c.cluster_id: c.connection() for c in clusters}
        self._failures_left = 0
        self._inactive: set[str] = set()

    def set_streams(self, streams: Collection[KafkaStream]) -> None:
        """Replaces every stream at once (a metadata change)."""
        with self._lock:
            self._streams = {s.stream_id: s for s in streams}
            for s in streams:
                for cid, c in s.clusters.items():
                    self._known_clusters[cid] = c.connection()

    def set_active(self, cluster_id: str, active: bool) -> None:
        """Marks a cluster active (the default) or inactive: an inactive one is not read, though streams list it."""
        with self._lock:
            if active:
                self._inactive.discard(cluster_id)
            else:
                self._inactive.add(cluster_id)

    def fail_next(self, calls: int = 1) -> None:
        """Makes the next ``calls`` calls raise MetadataServiceError, as an unreachable service would."""
        with self._lock:
            self._failures_left = calls

    def _check(self) -> None:
        with self._lock:
            if self._failures_left > 0:
                self._failures_left -= 1
                raise MetadataServiceError("in-memory metadata service: simulated failure.")

    def get_all_streams(self) -> set[KafkaStream]:
        """Return every stream held now."""
        self._check()
        with self._lock:
            return set(self._streams.values())

    def describe_streams(self, stream_ids: Collection[str]) -> dict[str, KafkaStream]:
        """Return the named streams held now (unknown ids are left out)."""
        self._check()
        with self._lock:
            return {i: self._streams[i] for i in stream_ids if i in self._streams}

    def is_cluster_active(self, cluster_id: str) -> bool:
        """Tell whether any stream held now lists the cluster and it was not marked inactive."""
        self._check()
        with self._lock:
            return cluster_id in clusters_in_use(list(self._streams.values())) and cluster_id not in self._inactive

    def describe_cluster(self, cluster_id: str) -> ClusterMetadata | None:
        """Return how to reach a cluster any stream lists; None if none does."""
        with self._lock:
            return self._known_clusters.get(cluster_id)
