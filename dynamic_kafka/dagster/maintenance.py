"""Per pipeline: the maintenance job ``<name>_maintenance`` (compaction and vacuum of the sink and dead-letter
table, :func:`dynamic_kafka.operations.maintain.maintain_pipeline`), and its schedule ``<name>_maintenance_schedule``
when ``maintenance.schedule`` is set.

The job's run config takes ``vacuum_retention_hours`` (default: the pipeline's ``maintenance.vacuum_retention_hours``,
else the tables' own). It carries the pipeline's run tag and pool like the incremental and backfill jobs, so the
instance's one-run-per-pipeline limit queues it behind them; the library's run lock and writer lease keep it apart
from any write of the pipeline anyway. Its results are an observation of the sink and dead-letter assets (files and
bytes before and after), and it starts no Spark.
"""

# No `from __future__ import annotations`: Dagster reads the decorated functions' annotations at runtime.

from dagster import (
    AssetObservation,
    Config,
    JobDefinition,
    MetadataValue,
    OpExecutionContext,
    ScheduleDefinition,
    in_process_executor,
    job,
    op,
)
from pydantic import Field

from dynamic_kafka import PipelineConfig, TableMaintenance
from dynamic_kafka.dagster.errors import dagster_errors
from dynamic_kafka.dagster.names import (
    KIND_TAG,
    PIPELINE_TAG,
    dagster_name,
    maintenance_job_name,
    maintenance_schedule_name,
)
from dynamic_kafka.dagster.resources import DynamicKafkaResource
from dynamic_kafka.dagster.schedules import cron_schedule
from dynamic_kafka.dagster.target import Target


class MaintenanceRunConfig(Config):
    """The maintenance job's run config."""

    vacuum_retention_hours: int | None = Field(
        default=None,
        ge=0,
        description="Keep files older versions need for this many hours; default: the pipeline's "
        "maintenance.vacuum_retention_hours, else the tables' own (7 days). At least the pipeline's floor "
        "(max_run_seconds in hours, rounded up, plus one) unless unsafe_vacuum_retention.",
    )
    unsafe_vacuum_retention: bool = Field(
        default=False,
        description="Take a retention below the floor: VACUUM then deletes the files of writes that have not "
        "committed yet; only when no writer of the tables runs anywhere.",
    )


def build_maintenance_job(pipeline: PipelineConfig, target: Target) -> JobDefinition:
    """The pipeline's maintenance job (one op, in process)."""
    pipeline_id, translator = pipeline.id, target.translator
    keys = {"sink": translator.asset_key(pipeline_id), "dead_letter": translator.dead_letter_asset_key(pipeline_id)}

    @op(name=f"{dagster_name(pipeline_id)}_maintain", pool=translator.pool_name(pipeline_id))
    def maintain(
        context: OpExecutionContext, config: MaintenanceRunConfig, dynamic_kafka: DynamicKafkaResource
    ) -> None:
        with dagster_errors(pipeline_id):
            summary = dynamic_kafka.pipeline(target.config_path, pipeline_id).maintain(
                vacuum_retention_hours=config.vacuum_retention_hours,
                unsafe_vacuum_retention=config.unsafe_vacuum_retention,
            )
        for table in summary.tables:
            if table.before is None:
                context.log.info(f"{table.role} {table.table}: no table yet; nothing to do")
                continue
            context.log_event(AssetObservation(asset_key=keys[table.role], metadata=_metadata(table)))

    @job(
        name=maintenance_job_name(pipeline_id),
        description=f"Compacts and vacuums the sink and dead-letter table of {pipeline_id!r}, never beside a run or "
        "backfill of it.",
        tags={PIPELINE_TAG: pipeline_id, KIND_TAG: "maintenance"},
        executor_def=in_process_executor,
    )
    def maintenance() -> None:
        maintain()

    return maintenance


def _metadata(table: TableMaintenance) -> dict[str, MetadataValue]:
    assert table.before is not None
    assert table.after is not None
    return {
        "rows": MetadataValue.int(table.after.rows),
        "files_before": MetadataValue.int(table.before.current.files),
        "files_after": MetadataValue.int(table.after.current.files),
        "bytes_before": MetadataValue.int(table.before.current.bytes),
        "bytes_after": MetadataValue.int(table.after.current.bytes),
        "stored_files_before": MetadataValue.int(table.before.stored.files),
        "stored_files_after": MetadataValue.int(table.after.stored.files),
        "stored_bytes_before": MetadataValue.int(table.before.stored.bytes),
        "stored_bytes_after": MetadataValue.int(table.after.stored.bytes),
        "compacted_files": MetadataValue.int(table.compacted_files),
        "vacuumed_files": MetadataValue.int(table.vacuumed_files),
        "leftovers_removed": MetadataValue.int(table.leftovers_removed),
    }


def build_maintenance_schedule(
    pipeline: PipelineConfig, maintenance: JobDefinition, *, source: str | None = None
) -> ScheduleDefinition | None:
    """The maintenance job on ``maintenance.schedule`` (UTC), starting as
    ``orchestration.automation_default_status`` says; None when no schedule is set.

    Raises:
        ConfigError: the cron expression is invalid; names the pipeline and the value.
    """
    cron = pipeline.maintenance.schedule
    if cron is None:
        return None
    return cron_schedule(
        pipeline,
        maintenance_schedule_name(pipeline.id),
        maintenance,
        key="maintenance.schedule",
        cron=cron,
        description=f"Maintenance of {pipeline.id!r}'s tables on '{cron}' (UTC).",
        example="0 3 * * 0",
        source=source,
    )
