"""Materialization metadata of a run, built from the library's RunSummary.

Keys use the library's names (``records``, ``bytes``, ``lag_after``, ``run_seq``...), so the UI, the CLI's summary
and the state's run history say the same thing. Numeric keys are plotted by Dagster across materializations.
Values absent from a run (no event time in an empty run, no Delta version) are left out rather than faked.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from dagster import MetadataValue, TableColumn, TableRecord, TableSchema

if TYPE_CHECKING:
    from dynamic_kafka.plan.summary import RunSummary

TOPICS_SCHEMA = TableSchema(
    columns=[
        TableColumn("cluster_id", "string"),
        TableColumn("topic", "string"),
        TableColumn("records", "int"),
        TableColumn("bytes", "int"),
    ]
)


def summary_metadata(summary: RunSummary, *, now: datetime | None = None) -> dict[str, MetadataValue]:
    """Records and bytes in total and per (cluster, topic), clusters, lag, event time, Delta version, warnings.

    ``event_time_lag_seconds`` is ``now - max_event_time``: how far behind real time the newest landed record is.
    """
    now = now or datetime.now(UTC)
    metadata: dict[str, MetadataValue] = {
        "run_seq": MetadataValue.int(summary.run_seq),
        "status": MetadataValue.text(summary.status),
        "records": MetadataValue.int(summary.records),
        "bytes": MetadataValue.int(summary.bytes),
        "dead_letters": MetadataValue.int(summary.dead_letters),
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
        "total_seconds": MetadataValue.float(round(summary.total_seconds, 3)),
    }
    if summary.min_event_time is not None:
        metadata["min_event_time"] = MetadataValue.timestamp(_aware(summary.min_event_time))
    if summary.max_event_time is not None:
        metadata["max_event_time"] = MetadataValue.timestamp(_aware(summary.max_event_time))
        metadata["event_time_lag_seconds"] = MetadataValue.float(
            round((now - _aware(summary.max_event_time)).total_seconds(), 3)
        )
    if summary.sink_version is not None:
        metadata["sink_version"] = MetadataValue.int(summary.sink_version)
    if summary.recovered_run_seq is not None:
        metadata["recovered_run_seq"] = MetadataValue.int(summary.recovered_run_seq)
    if summary.skipped_clusters:
        metadata["skipped_clusters"] = MetadataValue.text(", ".join(summary.skipped_clusters))
    return metadata


def _aware(moment: datetime) -> datetime:
    # Spark hands back naive datetimes in the session time zone, which the library pins to UTC.
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
