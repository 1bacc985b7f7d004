"""Per pipeline: the incremental job (materializes the sink asset and runs its check) and the partitioned
backfill job (merges one time window into the sink; never moves the incremental offsets).

Both run in process (one step, one Spark session per run process). At most one run per pipeline at a time: every
run carries the tag ``dynamic_kafka/pipeline=<id>``, which the instance's run queue limits to one per value
(``examples/demo/dagster.yaml``); the steps also share the pool ``dynamic_kafka/<id>``. Where no limit is
configured, the library's state guard is the backstop: a second run fails with ``RunInProgressError``, which
``pipelines.errors`` turns into a bounded retry.
"""

# No `from __future__ import annotations`: Dagster reads the decorated functions' annotations at runtime.

from dagster import (
    AssetMaterialization,
    AssetSelection,
    JobDefinition,
    MetadataValue,
    OpExecutionContext,
    define_asset_job,
    in_process_executor,
    job,
    op,
)

# What define_asset_job returns. The dagster package does not export the class; this is the one place the
# pipelines layer names it (sensors, schedules and the definitions import AssetJob from here).
from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition

from dynamic_kafka.backfill import run_backfill
from dynamic_kafka.config import PipelineConfig
from pipelines.errors import dagster_errors
from pipelines.metadata import summary_metadata
from pipelines.names import (
    KIND_TAG,
    PIPELINE_TAG,
    asset_key,
    backfill_job_name,
    dagster_name,
    incremental_job_name,
    pool_name,
)
from pipelines.partitions import backfill_partitions
from pipelines.resources import DynamicKafkaResource

AssetJob = UnresolvedAssetJobDefinition


def build_incremental_job(pipeline: PipelineConfig) -> AssetJob:
    """One incremental run of the pipeline: materializes its sink asset, then runs its check."""
    return define_asset_job(
        name=incremental_job_name(pipeline.id),
        selection=AssetSelection.assets(asset_key(pipeline.id)),
        description=f"One incremental run of pipeline {pipeline.id!r}: every record since the last run, once.",
        tags={PIPELINE_TAG: pipeline.id, KIND_TAG: "incremental"},
        executor_def=in_process_executor,
    )


def build_backfill_job(pipeline: PipelineConfig) -> JobDefinition | None:
    """The partitioned backfill job, or None when the pipeline has no ``backfill`` config."""
    if pipeline.backfill is None:
        return None
    pipeline_id = pipeline.id
    key = asset_key(pipeline_id)

    @op(name=f"{dagster_name(pipeline_id)}_backfill_window", pool=pool_name(pipeline_id))
    def backfill_window(context: OpExecutionContext, dynamic_kafka: DynamicKafkaResource) -> None:
        window = context.partition_time_window
        with dagster_errors(pipeline_id):
            summary = run_backfill(dynamic_kafka.context(pipeline_id), window.start, window.end)
        for finding in summary.warnings:
            context.log.warning(f"{finding.kind}: {finding.message}")
        context.log.info(f"backfill [{window.start}, {window.end}): {summary.status}, {summary.records} records merged")
        if summary.status == "empty":
            return
        metadata = summary_metadata(summary)
        # A backfill has no run_seq of its own and leaves the incremental lag unchanged.
        for name in ("run_seq", "lag_after", "capped"):
            metadata.pop(name, None)
        metadata["window_start"] = MetadataValue.timestamp(window.start)
        metadata["window_end"] = MetadataValue.timestamp(window.end)
        metadata["partition"] = MetadataValue.text(context.partition_key)
        context.log_event(
            AssetMaterialization(asset_key=key, description=f"backfill of {context.partition_key}", metadata=metadata)
        )

    @job(
        name=backfill_job_name(pipeline_id),
        description=f"Merges one {pipeline.backfill.granularity} window of record timestamps into {pipeline_id!r}'s "
        "sink, without duplicates and without moving the incremental offsets.",
        partitions_def=backfill_partitions(pipeline.backfill),
        tags={PIPELINE_TAG: pipeline_id, KIND_TAG: "backfill"},
        executor_def=in_process_executor,
    )
    def backfill_job() -> None:
        backfill_window()

    return backfill_job
