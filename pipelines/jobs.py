"""Per pipeline: the incremental job (materializes the sink and dead-letter assets and runs the checks) and the
partitioned backfill job (merges time windows into the sink in one run; never moves the incremental offsets).

Both run in process (one step, one Spark session per run process). At most one run per pipeline at a time: every
run carries the tag ``dynamic_kafka/pipeline=<id>``, which the instance's run queue limits to one per value
(``examples/demo/dagster.yaml``); the steps also share the pool ``dynamic_kafka/<id>``. Where no limit is
configured, the library's state guard is the backstop: a second run fails with ``RunInProgressError``, which
``pipelines.errors`` turns into a bounded retry.
"""

# No `from __future__ import annotations`: Dagster reads the decorated functions' annotations at runtime.

from dagster import AssetSelection, define_asset_job, in_process_executor

# What define_asset_job returns. The dagster package does not export the class; this is the one place the
# pipelines layer names it (sensors, schedules and the definitions import AssetJob from here).
from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition
from dynamic_kafka import PipelineConfig

from pipelines.names import (
    KIND_TAG,
    PIPELINE_TAG,
    asset_key,
    backfill_asset_key,
    backfill_job_name,
    dead_letter_asset_key,
    incremental_job_name,
)

AssetJob = UnresolvedAssetJobDefinition


def build_incremental_job(pipeline: PipelineConfig) -> AssetJob:
    """One incremental run of the pipeline: materializes its sink and dead-letter assets, then runs the checks."""
    return define_asset_job(
        name=incremental_job_name(pipeline.id),
        selection=AssetSelection.assets(asset_key(pipeline.id), dead_letter_asset_key(pipeline.id)),
        description=f"One incremental run of pipeline {pipeline.id!r}: every record since the last run, once.",
        tags={PIPELINE_TAG: pipeline.id, KIND_TAG: "incremental"},
        executor_def=in_process_executor,
    )


def build_backfill_job(pipeline: PipelineConfig) -> AssetJob | None:
    """The partitioned backfill job (materializes the backfill asset).

    A range of partitions launched together is one run (the asset's single-run backfill policy).

    Returns:
        None when the pipeline has no ``backfill`` config.
    """
    if pipeline.backfill is None:
        return None
    return define_asset_job(
        name=backfill_job_name(pipeline.id),
        selection=AssetSelection.assets(backfill_asset_key(pipeline.id)),
        description=f"Merges {pipeline.backfill.granularity} windows of record timestamps into the sink of "
        f"{pipeline.id!r}, without duplicates and without moving the incremental offsets.",
        tags={PIPELINE_TAG: pipeline.id, KIND_TAG: "backfill"},
        executor_def=in_process_executor,
    )
