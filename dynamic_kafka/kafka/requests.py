"""What to ask each broker: the cluster requests of a run's snapshot and of a status report.

Built here, next to :func:`~dynamic_kafka.kafka.snapshot.take_broker_snapshot` that answers them, so resolving the
metadata (``metadata``) and planning (``plan``) never need to know how brokers are queried.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dynamic_kafka.errors import MetadataServiceError
from dynamic_kafka.initializers import EarliestOffsets, LatestOffsets, to_epoch_ms
from dynamic_kafka.kafka.epochs import CommittedPosition
from dynamic_kafka.kafka.snapshot import ClusterRequest
from dynamic_kafka.metadata.models import ClusterMetadata

if TYPE_CHECKING:
    from dynamic_kafka.config.models import PipelineConfig
    from dynamic_kafka.metadata.service import KafkaMetadataService
    from dynamic_kafka.metadata.snapshot import MetadataSnapshot
    from dynamic_kafka.model.snapshots import StateSnapshot


def run_requests(
    pipeline: PipelineConfig,
    metadata: MetadataSnapshot,
    state: StateSnapshot,
    service: KafkaMetadataService,
) -> list[ClusterRequest]:
    """What to ask each cluster for a run: active clusters for their subscribed topics (required), with the
    bootstrap archive's ``until`` looked up when the pipeline has one (a partition's first read starts no lower),
    and, best effort, the clusters of partitions that left the metadata, to drain them or report what was left
    unread.
    """
    subscribed = metadata.topics()  # built once: the state loop below looks every partition up in it
    topics_by_cluster: dict[str, set[str]] = {}
    for cluster_id, topic in subscribed:
        topics_by_cluster.setdefault(cluster_id, set()).add(topic)
    clusters = metadata.clusters()
    started: dict[str, set[str]] = {}
    for key in state.partitions:
        started.setdefault(key.cluster_id, set()).add(key.topic)
    floor_ms = to_epoch_ms(pipeline.bootstrap.until) if pipeline.bootstrap is not None else None
    requests = []
    for cluster_id, topics in sorted(topics_by_cluster.items()):
        starting, stopping = metadata.initializers(cluster_id, pipeline.starting_offsets, pipeline.stopping_offsets)
        requests.append(
            ClusterRequest(
                cluster=clusters[cluster_id],
                topics=frozenset(topics),
                starting=starting,
                stopping=stopping,
                started_topics=frozenset(started.get(cluster_id, set()) & topics),
                required=True,
                skip_unreachable=pipeline.skip_unreachable_clusters,
                floor_ms=floor_ms,
            )
        )
    removed: dict[str, set[str]] = {}
    bootstrap: dict[str, str] = {}
    for key, row in state.partitions.items():
        if row.status == "active" and (key.cluster_id, key.topic) not in subscribed:
            removed.setdefault(key.cluster_id, set()).add(key.topic)
            bootstrap.setdefault(key.cluster_id, row.bootstrap_servers)
    for cluster_id, topics in sorted(removed.items()):
        cluster = clusters.get(cluster_id) or _known_cluster(service, cluster_id, bootstrap[cluster_id])
        if cluster is None:
            continue
        existing = next((r for r in requests if r.cluster.cluster_id == cluster_id), None)
        if existing is not None:
            requests[requests.index(existing)] = existing.with_topics(existing.topics | topics)
        else:
            requests.append(
                ClusterRequest(
                    cluster=cluster,
                    topics=frozenset(topics),
                    starting=pipeline.starting_offsets,
                    stopping=pipeline.stopping_offsets,
                    required=False,
                    skip_unreachable=True,
                )
            )
    return [_with_positions(r, state) for r in requests]


_POSITION_FIELDS = {"topic", "partition", "topic_id", "next_offset", "leader_epoch"}


def _with_positions(request: ClusterRequest, state: StateSnapshot) -> ClusterRequest:
    """``request`` with the committed positions of its topics that recorded a leader epoch (to check them)."""
    positions = tuple(
        CommittedPosition.model_validate(row.model_dump(include=_POSITION_FIELDS))
        for key, row in sorted(state.partitions.items(), key=lambda kv: str(kv[0]))
        if key.cluster_id == request.cluster.cluster_id and key.topic in request.topics and row.leader_epoch is not None
    )
    return request.with_positions(positions) if positions else request


def status_requests(state: StateSnapshot, service: KafkaMetadataService) -> list[ClusterRequest]:
    """What to ask each cluster in a pipeline's state for a status report: its latest offsets, best effort (an
    unreachable cluster shows no lag rather than failing the report).
    """
    by_cluster: dict[str, tuple[str, set[str]]] = {}
    for row in state.partitions.values():
        _, topics = by_cluster.setdefault(row.cluster_id, (row.bootstrap_servers, set()))
        topics.add(row.topic)
    return [
        ClusterRequest(
            cluster=service.describe_cluster(cluster_id)
            or ClusterMetadata(cluster_id=cluster_id, bootstrap_servers=bootstrap),
            topics=frozenset(topics),
            starting=EarliestOffsets(),
            stopping=LatestOffsets(),
            required=False,
            skip_unreachable=True,
        )
        for cluster_id, (bootstrap, topics) in sorted(by_cluster.items())
    ]


def _known_cluster(service: KafkaMetadataService, cluster_id: str, bootstrap: str) -> ClusterMetadata | None:
    """A removed cluster's connection: from the service if it still knows it, else its last bootstrap servers."""
    try:
        known = service.describe_cluster(cluster_id)
    except MetadataServiceError:
        known = None
    if known is not None:
        return known
    if not bootstrap:
        return None
    return ClusterMetadata(cluster_id=cluster_id, bootstrap_servers=bootstrap)
