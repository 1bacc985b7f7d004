"""The sink table of each pipeline as an asset, and its lag / data-loss check.

Materializing the asset is one incremental run (``PipelineRunner.run``): recover a crashed run if any, plan, read,
write, commit. The check reads the committed state and the brokers' latest offsets (``pipeline_status``); it
contacts Kafka but never starts Spark.
"""

# No `from __future__ import annotations`: Dagster reads the decorated functions' annotations at runtime.

from typing import Any

from dagster import (
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSeverity,
    AssetExecutionContext,
    AssetsDefinition,
    MaterializeResult,
    MetadataValue,
    asset,
    asset_check,
)

from dynamic_kafka.config import PipelineConfig
from dynamic_kafka.status import lag_verdict, pipeline_status
from pipelines.errors import dagster_errors
from pipelines.metadata import summary_metadata
from pipelines.names import GROUP_NAME, LAG_CHECK_NAME, asset_key, pool_name
from pipelines.resources import DynamicKafkaResource


def _describe(pipeline: PipelineConfig) -> str:
    subscription = (
        f"streams {', '.join(pipeline.streams)}"
        if pipeline.streams
        else f"streams matching {pipeline.stream_pattern!r}"
    )
    return f"Delta table landed by pipeline {pipeline.id!r} from {subscription}, exactly once per record."


def build_sink_asset(pipeline: PipelineConfig) -> AssetsDefinition:
    """The pipeline's sink table; one materialization is one incremental run."""
    pipeline_id = pipeline.id

    @asset(
        key=asset_key(pipeline_id),
        group_name=GROUP_NAME,
        description=_describe(pipeline),
        kinds={"kafka", "spark", "delta"},
        pool=pool_name(pipeline_id),
        metadata={
            "sink_path": MetadataValue.path(str(pipeline.sink.path)),
            "state_path": MetadataValue.path(str(pipeline.resolved_state_path)),
            "pipeline_id": MetadataValue.text(pipeline_id),
        },
    )
    def sink_table(context: AssetExecutionContext, dynamic_kafka: DynamicKafkaResource) -> MaterializeResult[Any]:
        with dagster_errors(pipeline_id):
            summary = dynamic_kafka.runner(pipeline_id).run()
        for finding in summary.warnings:
            context.log.warning(f"{finding.kind}: {finding.message}")
        if summary.recovered_run_seq is not None:
            context.log.warning(f"finished run {summary.recovered_run_seq}, left planned by an earlier crash")
        context.log.info(
            f"run {summary.run_seq} {summary.status}: {summary.records} records, {summary.bytes} bytes, "
            f"lag after {summary.lag_after}{' (capped: catching up next)' if summary.capped else ''}"
        )
        return MaterializeResult(metadata=summary_metadata(summary))

    return sink_table


def build_lag_check(pipeline: PipelineConfig) -> AssetChecksDefinition:
    """Fails when the pending records exceed ``max_lag_records`` (or, with a limit, cannot be known because a
    cluster is unreachable or was skipped) or the last run found data loss.
    """
    pipeline_id = pipeline.id
    limit = pipeline.max_lag_records

    @asset_check(
        asset=asset_key(pipeline_id),
        name=LAG_CHECK_NAME,
        description=(
            f"Pending records (broker latest minus committed offsets) at most {limit}, "
            "and no data loss in the last run."
            if limit is not None
            else "No data loss in the last run (no max_lag_records configured, so lag is only reported)."
        ),
    )
    def lag_check(dynamic_kafka: DynamicKafkaResource) -> AssetCheckResult:
        with dagster_errors(pipeline_id):
            status = pipeline_status(dynamic_kafka.context(pipeline_id))
        verdict = lag_verdict(status, limit)
        metadata: dict[str, MetadataValue] = {
            "total_lag": MetadataValue.int(status.total_lag),
            "data_loss_ranges": MetadataValue.json([lost.model_dump() for lost in verdict.lost_ranges]),
            "partitions": MetadataValue.int(len(status.partitions)),
        }
        if limit is not None:
            metadata["max_lag_records"] = MetadataValue.int(limit)
        if status.unreachable_clusters:
            metadata["unreachable_clusters"] = MetadataValue.text(", ".join(status.unreachable_clusters))
        if status.lag_unknown_clusters:
            metadata["lag_unknown_clusters"] = MetadataValue.text(", ".join(status.lag_unknown_clusters))
        return AssetCheckResult(
            passed=verdict.passed,
            severity=AssetCheckSeverity.ERROR if verdict.severity == "error" else AssetCheckSeverity.WARN,
            description=verdict.description,
            metadata=metadata,
        )

    return lag_check
