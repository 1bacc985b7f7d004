"""The metadata snapshot: the subscribed streams as resolved once for a run.

It lives with the metadata (not the planner) because resolving produces it; the planner and the broker requests
only read it. That keeps the dependency one way: ``plan`` and ``kafka`` import ``metadata``, never the reverse.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from dynamic_kafka.frozen import FrozenModel
from dynamic_kafka.metadata.models import ClusterMetadata, KafkaStream

if TYPE_CHECKING:
    from dynamic_kafka.offsets import StartingOffsets, StoppingOffsets


class MetadataSnapshot(FrozenModel):
    """The subscribed streams as resolved once for a run."""

    streams: dict[str, KafkaStream] = Field(default_factory=dict, description="By stream_id.")
    fingerprint: str = ""

    def clusters(self) -> dict[str, ClusterMetadata]:
        """Each cluster's connection (first stream in stream-id order wins if streams disagree)."""
        found: dict[str, ClusterMetadata] = {}
        for stream_id in sorted(self.streams):
            for cid, cluster in self.streams[stream_id].clusters.items():
                found.setdefault(cid, cluster.connection())
        return found

    def topics(self) -> dict[tuple[str, str], tuple[str, ...]]:
        """``(cluster_id, topic) -> sorted stream ids`` containing it. A topic in two streams is read once."""
        found: dict[tuple[str, str], set[str]] = {}
        for stream_id, stream in self.streams.items():
            for cid, cluster in stream.clusters.items():
                for topic in cluster.topics:
                    found.setdefault((cid, topic), set()).add(stream_id)
        return {k: tuple(sorted(v)) for k, v in sorted(found.items())}

    def cluster_overrides(self, cluster_id: str) -> ClusterMetadata | None:
        """The metadata of ``cluster_id`` carrying per-cluster initializer overrides, if any stream sets them."""
        for stream_id in sorted(self.streams):
            cluster = self.streams[stream_id].clusters.get(cluster_id)
            if cluster is not None and (cluster.starting_offsets or cluster.stopping_offsets):
                return cluster
        return None

    def starting_override(self, cluster_id: str) -> StartingOffsets | None:
        """The cluster's own ``starting_offsets`` in the metadata, or None when it sets none."""
        override = self.cluster_overrides(cluster_id)
        return override.starting_offsets if override else None

    def initializers(
        self, cluster_id: str, starting: StartingOffsets, stopping: StoppingOffsets
    ) -> tuple[StartingOffsets, StoppingOffsets]:
        """The effective (starting, stopping) initializers of ``cluster_id``: the cluster's override if a stream
        sets one, else the given pipeline defaults.
        """
        override = self.cluster_overrides(cluster_id)
        return (
            self.starting_override(cluster_id) or starting,
            (override.stopping_offsets if override else None) or stopping,
        )
