"""Helpers of the metadata-change acceptance tests (test_metadata_changes.py, test_metadata_faults.py).

Records are numbered: record ``i`` has value ``b"i"`` and key ``b"k<i>"``, so a sink compared with :func:`rows` of
what was produced shows exactly which numbers landed, from which cluster and topic, and how often.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from devtools.testing.kafka import Record, create_topic, unique_name
from devtools.testing.pipeline import PipelineHarness, Row

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from pathlib import Path

    from devtools.local_kafka import ClusterEndpoint
    from dynamic_kafka.model.plan import Finding
    from dynamic_kafka.model.snapshots import PartitionState

Range = tuple[str, str, int, int | None, int | None]


def numbered(numbers: Iterable[int], *, partitions: int = 1) -> list[Record]:
    """Records ``i`` for every number, record ``i`` sent to partition ``i % partitions``."""
    return [Record(value=str(i).encode(), key=f"k{i}".encode(), partition=i % partitions) for i in numbers]


def placed(record: Record) -> tuple[int, int]:
    """``(partition, offset)`` of a record returned by ``produce()``."""
    if record.partition is None or record.offset is None:
        raise ValueError(f"{record!r} was not produced; pass records as returned by produce()")
    return record.partition, record.offset


def rows(cluster: str, topic: str, produced: Iterable[Record]) -> list[Row]:
    """The sink rows ``(cluster, topic, partition, offset, value)`` that produced records must become."""
    return [(cluster, topic, *placed(r), r.value) for r in produced]


def unread_ranges(cluster: str, topic: str, produced: Iterable[Record]) -> set[Range]:
    """Per partition, the offset range ``[first, last + 1)`` that produced (and unread) records occupy."""
    by_partition: dict[int, list[int]] = {}
    for partition, offset in map(placed, produced):
        by_partition.setdefault(partition, []).append(offset)
    return {(cluster, topic, p, min(o), max(o) + 1) for p, o in by_partition.items()}


def finding_ranges(findings: Iterable[Finding], kind: str) -> set[Range]:
    """``(cluster, topic, partition, from_offset, to_offset)`` of the findings of one kind."""
    return {
        (f.cluster_id or "", f.topic or "", -1 if f.partition is None else f.partition, f.from_offset, f.to_offset)
        for f in findings
        if f.kind == kind
    }


def harness(folder: Path, clusters: Mapping[str, ClusterEndpoint], spark: Any, **pipeline: Any) -> PipelineHarness:
    """A pipeline harness over the session's clusters, named as in the fixture ("east", "west")."""
    return PipelineHarness(
        folder,
        clusters={name: c.bootstrap_servers for name, c in clusters.items()},
        spark=lambda: spark,
        **pipeline,
    )


def orders_stream(
    folder: Path, clusters: Mapping[str, ClusterEndpoint], spark: Any, partitions: Mapping[str, int], **pipeline: Any
) -> tuple[PipelineHarness, dict[str, str]]:
    """A harness whose stream "orders" is one new topic on each cluster of ``partitions`` (``{cluster: number of
    partitions}``). Returns the harness and the topic names by cluster."""
    topics = {cluster: unique_name(f"orders-{cluster}") for cluster in partitions}
    for cluster, count in partitions.items():
        create_topic(clusters[cluster].bootstrap_servers, topics[cluster], count)
    h = harness(folder, clusters, spark, **pipeline)
    h.set_streams({"orders": {cluster: [topic] for cluster, topic in topics.items()}})
    return h, topics


def positions(h: PipelineHarness, cluster: str | None = None) -> dict[tuple[str, str, int], tuple[str, int]]:
    """The committed state per partition (of one cluster, or all): ``(cluster, topic, partition) -> (status,
    next_offset)``."""
    found: dict[tuple[str, str, int], tuple[str, int]] = {}
    for key, p in h.runner().store.load().partitions.items():
        if cluster is None or key.cluster_id == cluster:
            found[(key.cluster_id, key.topic, key.partition)] = (p.status, p.next_offset)
    return found


def state_rows(h: PipelineHarness) -> dict[tuple[str, str, int], PartitionState]:
    """The committed state's partition rows, by ``(cluster, topic, partition)``."""
    return {(k.cluster_id, k.topic, k.partition): p for k, p in h.runner().store.load().partitions.items()}


def sink_streams(h: PipelineHarness) -> list[tuple[str, str, str, bytes]]:
    """Every sink row as ``(stream, cluster, topic, value)``, sorted, duplicates kept."""
    from deltalake import DeltaTable

    table = DeltaTable(str(h.sink_path)).to_pyarrow_table(columns=["stream", "cluster", "topic", "value"])
    return sorted(zip(*(table.column(c).to_pylist() for c in table.column_names), strict=True))
