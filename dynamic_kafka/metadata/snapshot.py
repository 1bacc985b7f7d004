"""The metadata snapshot: the subscribed streams as resolved once for a run.

It lives with the metadata (not the planner) because resolving produces it; the planner and the broker requests
only read it. That keeps the dependency one way: ``plan`` and ``kafka`` import ``metadata``, never the reverse.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from pydantic import Field

from dynamic_kafka.frozen import FrozenModel, replaced
from dynamic_kafka.metadata.models import ClusterMetadata, KafkaStream

if TYPE_CHECKING:
    from collections.abc import Callable

    from dynamic_kafka.initializers import PipelineStartingOffsets, PipelineStoppingOffsets, StartingOffsets


class MetadataSnapshot(FrozenModel):
    """The subscribed streams as resolved once for a run."""

    streams: dict[str, KafkaStream] = Field(default_factory=dict, description="By stream_id.")
    fingerprint: str = ""
    unresolved: dict[str, str] = Field(
        default_factory=dict,
        description="Clusters whose topic pattern could not be resolved (unreachable and skipped), with the error.",
    )

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

    def partition_set(self, cluster_id: str, topic: str) -> frozenset[int] | None:
        """The partitions of ``topic`` on ``cluster_id`` to read, or None for all of them. A topic in two streams
        is read once, so their sets add up; a stream that names no set for it reads all partitions.
        """
        found: set[int] = set()
        for stream in self.streams.values():
            cluster = stream.clusters.get(cluster_id)
            if cluster is None or topic not in cluster.topics:
                continue
            chosen = cluster.partitions.get(topic)
            if chosen is None:
                return None
            found |= chosen
        return frozenset(found)

    def map_clusters(self, change: Callable[[ClusterMetadata], ClusterMetadata]) -> MetadataSnapshot:
        """This snapshot with ``change`` applied to each cluster of each stream."""
        return replaced(self, streams={sid: s.map_clusters(change) for sid, s in self.streams.items()})

    def patterns(self, cluster_id: str) -> list[re.Pattern[str]]:
        """The topic patterns the subscribed streams set on ``cluster_id``."""
        found = {
            c.topic_pattern for s in self.streams.values() if (c := s.clusters.get(cluster_id)) and c.topic_pattern
        }
        return [re.compile(pattern) for pattern in sorted(found)]

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
        self, cluster_id: str, starting: PipelineStartingOffsets, stopping: PipelineStoppingOffsets
    ) -> tuple[PipelineStartingOffsets, PipelineStoppingOffsets]:
        """The effective (starting, stopping) initializers of ``cluster_id``: the cluster's override if a stream
        sets one, else the given pipeline defaults.
        """
        override = self.cluster_overrides(cluster_id)
        return (
            self.starting_override(cluster_id) or starting,
            (override.stopping_offsets if override else None) or stopping,
        )
