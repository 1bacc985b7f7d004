"""Per pipeline with a ``schedule`` (cron, UTC): the incremental job on that cron. Pipelines without one get none.

It starts running or stopped as the pipeline's ``orchestration.automation_default_status`` says (default stopped).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dagster import DagsterInvalidDefinitionError, DefaultScheduleStatus, ScheduleDefinition

from dynamic_kafka import ConfigError
from dynamic_kafka.dagster.names import TRIGGER_TAG, schedule_name

if TYPE_CHECKING:
    from dagster import JobDefinition

    from dynamic_kafka import PipelineConfig
    from dynamic_kafka.dagster.jobs import AssetJob


def build_schedule(pipeline: PipelineConfig, job: AssetJob, *, source: str | None = None) -> ScheduleDefinition | None:
    """The pipeline's schedule, or None when it has no ``orchestration.schedule``.

    Raises:
        ConfigError: the cron expression is invalid; names the pipeline and the value.
    """
    if pipeline.orchestration.schedule is None:
        return None
    return cron_schedule(
        pipeline,
        schedule_name(pipeline.id),
        job,
        key="orchestration.schedule",
        cron=pipeline.orchestration.schedule,
        description=f"Incremental runs of {pipeline.id!r} on '{pipeline.orchestration.schedule}' (UTC).",
        example="*/15 * * * *",
        source=source,
    )


def cron_schedule(
    pipeline: PipelineConfig,
    name: str,
    job: AssetJob | JobDefinition,
    *,
    key: str,
    cron: str,
    description: str,
    example: str,
    source: str | None,
) -> ScheduleDefinition:
    """A schedule of one of the pipeline's jobs on ``cron`` (UTC), starting as
    ``orchestration.automation_default_status`` says.

    Raises:
        ConfigError: ``cron`` (the config's ``key``) is not a valid cron expression; names the pipeline and the
            value, with ``example`` as the fix.
    """
    try:
        return ScheduleDefinition(
            name=name,
            cron_schedule=cron,
            job=job,
            execution_timezone="UTC",
            tags={TRIGGER_TAG: "schedule"},
            default_status=DefaultScheduleStatus(pipeline.orchestration.automation_default_status.upper()),
            description=description,
        )
    except DagsterInvalidDefinitionError as e:
        raise ConfigError(
            f"pipeline {pipeline.id!r}: {key} {cron!r} is not a valid cron expression.",
            source=source,
            hint=f"Use five fields, e.g. '{example}'.",
        ) from e
