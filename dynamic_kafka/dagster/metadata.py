"""Dagster metadata for a run, built from the library's RunSummary, PipelineStatus and the table's Delta log.

Keys use the library's names (``records``, ``bytes``, ``lag_after``, ``run_seq``...), so the UI, the CLI's summary
and the state's run history say the same thing; Dagster's standard keys (``dagster/row_count``, ``dagster/uri``,
``dagster/column_schema``, ``dagster/table_name``) are set where Dagster has one. Numeric keys are plotted by Dagster
across materializations, so per-cluster numbers are keys of their own (``records/<cluster>``, ``lag/<cluster>``).
Values absent from a run (no event time in an empty run, no Delta table yet) are left out rather than faked.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from dagster import MetadataValue, TableColumn, TableRecord, TableSchema

if TYPE_CHECKING:
    from dynamic_kafka import GroupCommit, PipelineStatus, RunSummary, TableInfo, TableLocation

TOPICS_SCHEMA = TableSchema(
    columns=[
        TableColumn("cluster_id", "string"),
        TableColumn("topic", "string"),
        TableColumn("records", "int"),
        TableColumn("bytes", "int"),
    ]
)
OFFSETS_SCHEMA = TableSchema(
    columns=[
        TableColumn("cluster_id", "string"),
        TableColumn("topic", "string"),
        TableColumn("partition", "int"),
        TableColumn("status", "string"),
        TableColumn("next_offset", "int", description="The committed next offset (the next run starts here)."),
        TableColumn("latest_offset", "int", description="The broker's latest (last stable) offset; empty: unknown."),
        TableColumn("lag", "int", description="latest_offset - next_offset; empty: the cluster did not answer."),
    ]
)
COMPLETENESS_SCHEMA = TableSchema(
    columns=[
        TableColumn("cluster_id", "string"),
        TableColumn("topic", "string"),
        TableColumn("partition", "int"),
        TableColumn("planned", "int", description="Offsets in the planned range [start, stop)."),
        TableColumn("read", "int", description="Records the Spark read returned in the range."),
        TableColumn("landed", "int", description="Rows of the run in the sink and the dead-letter table."),
        TableColumn("deduplicated", "int", description="Records read that were landed before (a backfill)."),
        TableColumn("skipped", "int", description="planned - read: transaction markers, aborted or compacted."),
        TableColumn("missing", "int", description="read - landed - deduplicated: not 0 is a mismatch."),
    ]
)
CLUSTERS_SCHEMA = TableSchema(
    columns=[
        TableColumn("cluster_id", "string"),
        TableColumn("records", "int", description="Records this run landed from the cluster."),
        TableColumn("lag", "int", description="Records pending on the cluster after the run; empty: unknown."),
        TableColumn("consumer_group", "string", description="The group commit's outcome (monitoring only)."),
    ]
)


def summary_metadata(summary: RunSummary, *, now: datetime | None = None) -> dict[str, MetadataValue]:
    """Records and bytes in total and per (cluster, topic), clusters, lag, event time, Delta version, warnings,
    the run's phase durations and per-cluster records.

    ``event_time_lag_seconds`` is ``now - max_event_time``: how far behind real time the newest landed record is.
    """
    now = now or datetime.now(UTC)
    metadata: dict[str, MetadataValue] = {
        "run_seq": MetadataValue.int(summary.run_seq),
        "status": MetadataValue.text(summary.status),
        "records": MetadataValue.int(summary.records),
        "bytes": MetadataValue.int(summary.bytes),
        "dead_letters": MetadataValue.int(summary.dead_letters),
        "sink_records": MetadataValue.int(summary.sink_records),
        "deduplicated": MetadataValue.int(summary.deduplicated),
        "topics": MetadataValue.table(
            records=[
                TableRecord({"cluster_id": t.cluster_id, "topic": t.topic, "records": t.records, "bytes": t.bytes})
                for t in summary.topics
            ],
            schema=TOPICS_SCHEMA,
        ),
        "cluster_count": MetadataValue.int(len(summary.clusters)),
        "clusters": MetadataValue.text(", ".join(summary.clusters)),
        "lag_after": MetadataValue.int(summary.lag_after),
        "capped": MetadataValue.bool(summary.capped),
        "spark_started": MetadataValue.bool(summary.spark_started),
        "warning_count": MetadataValue.int(len(summary.warnings)),
        "warnings": MetadataValue.json([w.model_dump(mode="json", exclude_none=True) for w in summary.warnings]),
        "metadata_fingerprint": MetadataValue.text(summary.metadata_fingerprint),
        "plan_seconds": MetadataValue.float(round(summary.plan_seconds, 3)),
        "spark_seconds": MetadataValue.float(round(summary.spark_seconds, 3)),
        "commit_seconds": MetadataValue.float(round(summary.commit_seconds, 3)),
        "total_seconds": MetadataValue.float(round(summary.total_seconds, 3)),
    }
    if summary.schemas:
        # Subjects and versions only: the registry's URL and credentials never reach Dagster.
        metadata["schemas"] = MetadataValue.json([s.model_dump(mode="json") for s in summary.schemas])
        metadata["schema_versions"] = MetadataValue.text(
            ", ".join(sorted({f"{s.subject} v{s.version}" for s in summary.schemas}))
        )
    for cluster_id, records in _records_by_cluster(summary).items():
        metadata[f"records/{cluster_id}"] = MetadataValue.int(records)
    if summary.min_event_time is not None:
        metadata["min_event_time"] = MetadataValue.timestamp(_aware(summary.min_event_time))
    if summary.max_event_time is not None:
        metadata["max_event_time"] = MetadataValue.timestamp(_aware(summary.max_event_time))
        metadata["event_time_lag_seconds"] = MetadataValue.float(
            round((now - _aware(summary.max_event_time)).total_seconds(), 3)
        )
    if summary.bootstrap_source is not None:
        metadata["bootstrap_source"] = MetadataValue.text(summary.bootstrap_source)
        metadata["bootstrap_records"] = MetadataValue.int(summary.bootstrap_records or 0)
    if summary.sink_version is not None:
        metadata["sink_version"] = MetadataValue.int(summary.sink_version)
    if summary.recovered_run_seq is not None:
        metadata["recovered_run_seq"] = MetadataValue.int(summary.recovered_run_seq)
    if summary.skipped_clusters:
        metadata["skipped_clusters"] = MetadataValue.text(", ".join(summary.skipped_clusters))
    for commit in summary.group_commits:
        metadata[f"consumer_group/{commit.cluster_id}"] = MetadataValue.text(_group_outcome(commit))
    if summary.group_commits:
        metadata["consumer_group"] = MetadataValue.text(summary.group_commits[0].group)
    return metadata


def table_uri(location: TableLocation) -> str:
    """The table's URI as Dagster shows it (``dagster/uri``): ``file://...`` for a local folder, else as written."""
    return Path(location.uri).as_uri() if location.is_local else location.uri


def table_metadata(uri: str, info: TableInfo | None) -> dict[str, MetadataValue]:
    """Dagster's standard table keys for a Delta table: where it is, and (once it exists) rows and columns."""
    metadata: dict[str, MetadataValue] = {"dagster/uri": MetadataValue.text(uri)}
    if info is not None:
        metadata["dagster/row_count"] = MetadataValue.int(info.rows)
        metadata["dagster/column_schema"] = MetadataValue.table_schema(
            TableSchema(columns=[TableColumn(name, kind) for name, kind in info.columns])
        )
        metadata["delta_version"] = MetadataValue.int(info.version)
    return metadata


def status_metadata(summary: RunSummary, status: PipelineStatus) -> dict[str, MetadataValue]:
    """Where the pipeline stands after a run, as the sink's materialization shows it.

    Per-partition offsets and lag and per-cluster records, lag and group commit as tables, and the per-cluster lag
    as plotted numbers (``lag/<cluster>``; absent for a cluster that did not answer).
    """
    lag: dict[str, int | None] = {}
    for p in status.partitions:
        if p.status != "active":
            continue
        known = lag.get(p.cluster_id, 0)
        lag[p.cluster_id] = None if known is None or p.lag is None else known + p.lag
    records = _records_by_cluster(summary)
    commits = {c.cluster_id: c for c in summary.group_commits}
    clusters = sorted({*lag, *records, *commits})
    metadata: dict[str, MetadataValue] = {
        "total_lag": MetadataValue.int(status.total_lag),
        "offsets": MetadataValue.table(
            records=[
                TableRecord(
                    {
                        "cluster_id": p.cluster_id,
                        "topic": p.topic,
                        "partition": p.partition,
                        "status": p.status,
                        "next_offset": p.next_offset,
                        "latest_offset": p.latest_offset,
                        "lag": p.lag,
                    }
                )
                for p in status.partitions
            ],
            schema=OFFSETS_SCHEMA,
        ),
        "cluster_table": MetadataValue.table(
            records=[
                TableRecord(
                    {
                        "cluster_id": c,
                        "records": records.get(c, 0),
                        "lag": lag.get(c),
                        "consumer_group": _group_outcome(commits[c]) if c in commits else "",
                    }
                )
                for c in clusters
            ],
            schema=CLUSTERS_SCHEMA,
        ),
    }
    for cluster_id, value in sorted(lag.items()):
        if value is not None:
            metadata[f"lag/{cluster_id}"] = MetadataValue.int(value)
    return metadata


def _records_by_cluster(summary: RunSummary) -> dict[str, int]:
    totals: dict[str, int] = defaultdict(int)
    for cluster_id in summary.clusters:
        totals[cluster_id] += 0
    for t in summary.topics:
        totals[t.cluster_id] += t.records
    return dict(sorted(totals.items()))


def _group_outcome(commit: GroupCommit) -> str:
    return "committed" if commit.committed else f"failed: {commit.error}"


def _aware(moment: datetime) -> datetime:
    # Spark hands back naive datetimes in the session time zone, which the library pins to UTC.
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def completeness_metadata(status: PipelineStatus) -> dict[str, MetadataValue]:
    """The completeness check's metadata: the last run's totals, and per range (the mismatched ones first) its
    counts; a run of many ranges shows its mismatches and those with offsets skipped by Kafka only.
    """
    last = status.last_run
    counted = last.completeness if last is not None else None
    if last is None or counted is None:
        return {}
    shown = [
        *counted.mismatches,
        *(p for p in counted.partitions if p.matches and (p.skipped or len(counted.partitions) <= 100)),
    ]
    return {
        "run_seq": MetadataValue.int(last.run_seq),
        "planned": MetadataValue.int(counted.planned),
        "read": MetadataValue.int(counted.read),
        "landed": MetadataValue.int(counted.landed),
        "deduplicated": MetadataValue.int(counted.deduplicated),
        "skipped_by_kafka": MetadataValue.int(counted.skipped),
        "mismatched_partitions": MetadataValue.text(
            ", ".join(f"{p.cluster_id}/{p.topic}[{p.partition}]" for p in counted.mismatches) or "none"
        ),
        "partitions": MetadataValue.table(
            records=[
                TableRecord(
                    {
                        "cluster_id": p.cluster_id,
                        "topic": p.topic,
                        "partition": p.partition,
                        "planned": p.planned,
                        "read": p.read,
                        "landed": p.landed,
                        "deduplicated": p.deduplicated,
                        "skipped": p.skipped,
                        "missing": p.missing,
                    }
                )
                for p in shown
            ],
            schema=COMPLETENESS_SCHEMA,
        ),
        "count_seconds": MetadataValue.float(round(counted.seconds, 3)),
    }
