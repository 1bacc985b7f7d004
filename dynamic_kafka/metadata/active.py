"""Honouring ``is_cluster_active``: a cluster its service calls inactive is left out of every stream, as if the
metadata no longer listed it.

Flink's Dynamic Kafka Source asks the same question to stop reading a cluster that still appears in the metadata
(a cluster being drained by its operators, say). Here an inactive cluster is exactly a removed one: it is not
read, its partitions' state rows are marked removed with their offsets kept, and a run after it becomes active
again resumes at those offsets. With ``drain_removed`` it is drained as a removed cluster is (read up to its latest
offsets once, then left): Flink has no drain, and one meaning for both is simpler to reason about than two.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dynamic_kafka.metadata.service import KafkaMetadataService

if TYPE_CHECKING:
    from collections.abc import Collection

    from dynamic_kafka.metadata.models import KafkaStream


class ActiveClustersOnly(KafkaMetadataService):
    """``inner`` without the clusters ``inner.is_cluster_active`` calls inactive (see the module docstring).

    Each answer asks about each cluster once, in the same call: a cluster that changes state during a resolution
    is seen in one state throughout it.

    Args:
        inner: the service to ask.
    """

    def __init__(self, inner: KafkaMetadataService) -> None:
        self.inner = inner

    def _active(self, streams: Collection[KafkaStream]) -> dict[str, bool]:
        return {cid: self.inner.is_cluster_active(cid) for cid in sorted({c for s in streams for c in s.clusters})}

    @staticmethod
    def _without_inactive(stream: KafkaStream, active: dict[str, bool]) -> KafkaStream:
        return stream.with_clusters({cid: c for cid, c in stream.clusters.items() if active[cid]})

    def get_all_streams(self) -> set[KafkaStream]:
        """Return the inner service's streams without their inactive clusters."""
        streams = self.inner.get_all_streams()
        active = self._active(streams)
        return {self._without_inactive(s, active) for s in streams}

    def describe_streams(self, stream_ids: Collection[str]) -> dict[str, KafkaStream]:
        """Return the inner service's named streams without their inactive clusters."""
        streams = self.inner.describe_streams(stream_ids)
        active = self._active(list(streams.values()))
        return {sid: self._without_inactive(s, active) for sid, s in streams.items()}

    def is_cluster_active(self, cluster_id: str) -> bool:
        """Ask the inner service."""
        return self.inner.is_cluster_active(cluster_id)

    def close(self) -> None:
        """Close the inner service."""
        self.inner.close()
