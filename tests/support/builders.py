"""The small objects many unit tests build by hand: a pipeline config, a split, a plan, and the planner's inputs
(the metadata, the brokers' offsets, the state). Defaults are the ones most tests share: pipeline ``p`` reading
stream ``orders`` from topic ``orders`` on cluster ``east``; a test names only what it is about.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from dynamic_kafka.config.models import PipelineConfig
from dynamic_kafka.metadata.models import ClusterMetadata, KafkaStream, metadata_fingerprint
from dynamic_kafka.metadata.snapshot import MetadataSnapshot
from dynamic_kafka.model.plan import Plan, Split, TopicPartition
from dynamic_kafka.model.snapshots import (
    BrokerSnapshot,
    ClusterSnapshot,
    PartitionOffsets,
    PartitionState,
    StateSnapshot,
    TopicSnapshot,
)

PIPELINE_ID = "p"
NOW = datetime(2026, 11, 21, tzinfo=UTC)


def a_pipeline(**settings: Any) -> PipelineConfig:
    """Pipeline ``p`` reading ``orders`` into ``/tmp/s`` (nothing is written there), with ``settings`` on top."""
    return PipelineConfig.model_validate(
        {"id": PIPELINE_ID, "streams": ["orders"], "sink": {"path": "/tmp/s"}, **settings}
    )


def a_split(
    partition: int = 0,
    start: int = 0,
    stop: int = 1,
    *,
    topic: str = "orders",
    cluster: str = "east",
    streams: tuple[str, ...] = ("orders",),
    bootstrap: str | None = None,
    **more: Any,
) -> Split:
    """The range ``[start, stop)`` of ``cluster/topic[partition]`` (bootstrap servers ``<cluster>:9092``)."""
    return Split(
        cluster_id=cluster,
        topic=topic,
        partition=partition,
        start_offset=start,
        stop_offset=stop,
        stream_ids=streams,
        bootstrap_servers=bootstrap or f"{cluster}:9092",
        **more,
    )


def a_plan(run_seq: int, *splits: Split, planned_at: datetime | None = None, **more: Any) -> Plan:
    """Run ``run_seq`` of pipeline ``p`` reading ``splits``."""
    return Plan(
        pipeline_id=PIPELINE_ID, run_seq=run_seq, splits=splits, planned_at=planned_at or datetime.now(UTC), **more
    )


def nth_run(run_seq: int, stop: int = 10) -> Plan:
    """Run ``n`` reading ``[(n-1)*stop, n*stop)`` of ``east/orders[0]`` (topic id ``tid``): consecutive runs."""
    return a_plan(run_seq, a_split(0, (run_seq - 1) * stop, run_seq * stop, topic_id="tid"))


# --- the planner's inputs ---------------------------------------------------------------------------------------


def a_stream(stream_id: str = "orders", **placements: list[str]) -> KafkaStream:
    """A stream placed on clusters (keyword: cluster id, value: its topics)."""
    return KafkaStream(
        stream_id=stream_id,
        clusters={
            cid: ClusterMetadata(cluster_id=cid, bootstrap_servers=f"{cid}:9092", topics=frozenset(topics))
            for cid, topics in placements.items()
        },
    )


def metadata_of(*streams: KafkaStream) -> MetadataSnapshot:
    """The metadata service's answer listing ``streams``."""
    return MetadataSnapshot(streams={s.stream_id: s for s in streams}, fingerprint=metadata_fingerprint(streams))


def a_topic(name: str, ranges: dict[int, tuple[int, int]], topic_id: str = "id-1", **lookups: Any) -> TopicSnapshot:
    """A topic as the brokers describe it: per partition its ``(earliest, latest)`` offsets."""
    return TopicSnapshot(
        topic=name,
        topic_id=topic_id,
        partitions={p: PartitionOffsets(earliest=lo, latest=hi) for p, (lo, hi) in ranges.items()},
        **lookups,
    )


def brokers_of(**clusters: list[TopicSnapshot] | None) -> BrokerSnapshot:
    """The brokers' snapshot: per cluster its topics, or None for a cluster that did not answer."""
    return BrokerSnapshot(
        clusters={
            cid: ClusterSnapshot(cluster_id=cid, reachable=False, error="connection refused")
            if topics is None
            else ClusterSnapshot(cluster_id=cid, topics={t.topic: t for t in topics})
            for cid, topics in clusters.items()
        },
        taken_at=NOW,
    )


def a_row(
    key: TopicPartition, next_offset: int, *, topic_id: str | None = "id-1", status: str = "active", **more: Any
) -> PartitionState:
    """A partition's committed state: the next offset to read."""
    return PartitionState(
        **key.model_dump(),
        next_offset=next_offset,
        topic_id=topic_id,
        bootstrap_servers=f"{key.cluster_id}:9092",
        stream_ids=("orders",),
        status=status,  # type: ignore[arg-type]
        **more,
    )


def state_of(*rows: PartitionState, table_version: int | None = 3) -> StateSnapshot:
    """Pipeline ``p``'s state holding ``rows``."""
    return StateSnapshot(pipeline_id=PIPELINE_ID, table_version=table_version, partitions={r.key: r for r in rows})
