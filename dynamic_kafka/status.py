"""A pipeline's status: per partition the committed next offset, the broker's latest offset and the lag, plus the
last run and the warnings of recent runs (data-loss gaps, unread ranges of removed clusters, skipped clusters)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from dynamic_kafka.kafka import ClusterRequest, take_broker_snapshot
from dynamic_kafka.metadata.models import ClusterMetadata
from dynamic_kafka.offsets import EarliestOffsets, LatestOffsets
from dynamic_kafka.plan.model import Finding
from dynamic_kafka.runner import PipelineRunner, summary_from_json


class PartitionLag(BaseModel):
    """One partition's position and lag."""

    model_config = ConfigDict(frozen=True)

    cluster_id: str
    topic: str
    partition: int
    status: str
    next_offset: int
    latest_offset: int | None
    lag: int | None
    removed_at: datetime | None = None


class PipelineStatus(BaseModel):
    """What ``dynamic-kafka status`` shows."""

    model_config = ConfigDict(frozen=True)

    pipeline_id: str
    partitions: tuple[PartitionLag, ...]
    total_lag: int
    unreachable_clusters: tuple[str, ...]
    lag_unknown_clusters: tuple[str, ...] = Field(
        (),
        description="Clusters whose lag ``total_lag`` cannot include: unreachable now, or skipped by the last run "
        "(a cluster never read has no state to ask about).",
    )
    last_run: dict[str, Any] | None
    last_run_status: str | None
    warnings: tuple[Finding, ...]


def pipeline_status(runner: PipelineRunner, *, history: int = 20) -> PipelineStatus:
    """Reads the state and asks every cluster in it for its latest offsets (best effort: an unreachable cluster
    shows no lag rather than failing the report)."""
    state = runner.store.load()
    by_cluster: dict[str, tuple[str, set[str]]] = {}
    for row in state.partitions.values():
        bootstrap, topics = by_cluster.setdefault(row.cluster_id, (row.bootstrap_servers, set()))
        topics.add(row.topic)
    requests = []
    for cluster_id, (bootstrap, topics) in sorted(by_cluster.items()):
        cluster = runner.service.describe_cluster(cluster_id) or ClusterMetadata(
            cluster_id=cluster_id, bootstrap_servers=bootstrap
        )
        requests.append(
            ClusterRequest(
                cluster=cluster,
                topics=frozenset(topics),
                starting=EarliestOffsets(),
                stopping=LatestOffsets(),
                required=False,
                skip_unreachable=True,
            )
        )
    brokers = take_broker_snapshot(requests, isolation_level=runner.pipeline.isolation_level, now=datetime.now(UTC))
    rows = []
    for key, row in sorted(state.partitions.items(), key=lambda kv: str(kv[0])):
        answered = brokers.clusters.get(key.cluster_id)
        topic = answered.topics.get(key.topic) if answered and answered.reachable else None
        offsets = topic.partitions.get(key.partition) if topic else None
        latest = offsets.latest if offsets else None
        rows.append(
            PartitionLag(
                cluster_id=key.cluster_id,
                topic=key.topic,
                partition=key.partition,
                status=row.status,
                next_offset=row.next_offset,
                latest_offset=latest,
                lag=None if latest is None else max(0, latest - row.next_offset),
                removed_at=row.removed_at,
            )
        )
    runs = runner.store.run_history(limit=history)
    warnings = tuple(f for run in runs for f in run.plan.findings if f.is_warning)
    last = state.last_run
    last_run = summary_from_json(last.summary_json) if last else None
    unreachable = tuple(c for c, s in sorted(brokers.clusters.items()) if not s.reachable)
    return PipelineStatus(
        pipeline_id=runner.pipeline.id,
        partitions=tuple(rows),
        total_lag=sum(r.lag or 0 for r in rows if r.status == "active"),
        unreachable_clusters=unreachable,
        lag_unknown_clusters=tuple(sorted({*unreachable, *(last_run or {}).get("skipped_clusters", ())})),
        last_run=last_run,
        last_run_status=last.status if last else None,
        warnings=warnings,
    )
