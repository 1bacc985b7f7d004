"""``is_cluster_active`` at run time: a cluster its service calls inactive is left out of every stream."""

from __future__ import annotations

from dynamic_kafka.metadata.active import ActiveClustersOnly
from dynamic_kafka.metadata.memory import InMemoryMetadataService
from dynamic_kafka.metadata.models import ClusterMetadata, KafkaStream


def _stream(sid: str, *clusters: str) -> KafkaStream:
    return KafkaStream(
        stream_id=sid,
        clusters={
            c: ClusterMetadata(cluster_id=c, bootstrap_servers=f"{c}:9092", topics=frozenset({sid})) for c in clusters
        },
    )


def test_an_inactive_cluster_leaves_every_stream_and_comes_back_when_active() -> None:
    inner = InMemoryMetadataService([_stream("orders", "east", "west"), _stream("refunds", "east")])
    service = ActiveClustersOnly(inner)

    inner.set_active("east", False)

    assert service.describe_streams(["orders", "refunds"]) == {
        "orders": _stream("orders", "west"),
        "refunds": _stream("refunds"),
    }
    assert service.get_all_streams() == {_stream("orders", "west"), _stream("refunds")}
    assert not service.is_cluster_active("east")

    inner.set_active("east", True)

    assert service.describe_streams(["orders"]) == {"orders": _stream("orders", "east", "west")}
