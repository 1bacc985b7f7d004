"""Per pipeline with a ``schedule`` (cron, UTC): the incremental job on that cron. Pipelines without one get none.

It starts running or stopped as the pipeline's ``automation_default_status`` says (default stopped).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dagster import DagsterInvalidDefinitionError, DefaultScheduleStatus, ScheduleDefinition
from dynamic_kafka import ConfigError

from pipelines.names import TRIGGER_TAG, schedule_name

if TYPE_CHECKING:
    from dynamic_kafka import PipelineConfig

    from pipelines.jobs import AssetJob


def build_schedule(pipeline: PipelineConfig, job: AssetJob, *, source: str | None = None) -> ScheduleDefinition | None:
    """The pipeline's schedule, or None when it has no ``schedule``.

    Raises:
        ConfigError: the cron expression is invalid; names the pipeline and the value.
    """
    if pipeline.schedule is None:
        return None
    try:
        return ScheduleDefinition(
            name=schedule_name(pipeline.id),
            cron_schedule=pipeline.schedule,
            job=job,
            execution_timezone="UTC",
            tags={TRIGGER_TAG: "schedule"},
            default_status=DefaultScheduleStatus(pipeline.automation_default_status.upper()),
            description=f"Incremental runs of {pipeline.id!r} on '{pipeline.schedule}' (UTC).",
        )
    except DagsterInvalidDefinitionError as e:
        raise ConfigError(
            f"pipeline {pipeline.id!r}: schedule {pipeline.schedule!r} is not a valid cron expression.",
            source=source,
            hint="Use five fields, e.g. '*/15 * * * *'.",
        ) from e
