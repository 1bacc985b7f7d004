"""Per pipeline: a sensor that requests a run when the resolved metadata changes, and one that catches up.

Metadata sensor: each tick asks the library (``Pipeline.check_metadata``) whether the resolved fingerprint changed. The
cursor is the library's ``WatchCursor`` as JSON, so the last fingerprint and the count of consecutive metadata
service failures survive daemon restarts. A change requests one run keyed by the new fingerprint and the count of
changes seen (Dagster never launches two runs with one key, so a repeated tick cannot duplicate it, while a layout
that comes back, A -> B -> A, is a new key); once a tick has succeeded, up to ``orchestration.sensor.failure_threshold``
consecutive failures are skipped ticks that say why, and the next one fails the tick until the service answers again;
a failure before any tick succeeded fails the tick (Flink's first discovery). The first successful tick (no cursor)
requests a run, which records the baseline fingerprint. It starts running or stopped as
the pipeline's ``orchestration.automation_default_status`` says (default stopped).

Catch-up sensor: after a successful incremental run whose materialization says ``capped`` (a per-run or
per-partition cap left records behind), it requests the next run at once instead of waiting for the schedule.
It is keyed by the capped run's id, so each capped run is followed by exactly one catch-up run.
"""

# No `from __future__ import annotations`: Dagster reads the decorated functions' annotations at runtime.

import logging
from typing import TYPE_CHECKING

from dagster import (
    DagsterEventType,
    DagsterRunStatus,
    DefaultSensorStatus,
    RunRequest,
    RunStatusSensorContext,
    RunStatusSensorDefinition,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    run_status_sensor,
    sensor,
)
from pydantic import ValidationError

from dynamic_kafka import PipelineConfig, WatchCursor
from dynamic_kafka.dagster.names import (
    AFTER_RUN_TAG,
    TRIGGER_TAG,
    catch_up_sensor_name,
    metadata_sensor_name,
)
from dynamic_kafka.dagster.resources import DynamicKafkaResource

if TYPE_CHECKING:
    from dynamic_kafka.dagster.jobs import AssetJob
    from dynamic_kafka.dagster.target import Target

logger = logging.getLogger(__name__)

CATCH_UP_INTERVAL_SECONDS = 5


def read_cursor(raw: str | None) -> WatchCursor:
    """The stored cursor; an unreadable one (older format, hand-edited) starts over rather than failing ticks."""
    if not raw:
        return WatchCursor()
    try:
        return WatchCursor.model_validate_json(raw)
    except ValidationError:
        logger.warning("metadata sensor: discarding an unreadable cursor %r", raw[:200])
        return WatchCursor()


def build_metadata_sensor(pipeline: PipelineConfig, job: "AssetJob", target: "Target") -> SensorDefinition:
    """Requests an incremental run when the pipeline's resolved clusters/topics/properties change."""
    pipeline_id = pipeline.id
    threshold = pipeline.orchestration.sensor.failure_threshold

    @sensor(
        name=metadata_sensor_name(pipeline_id),
        job=job,
        minimum_interval_seconds=pipeline.orchestration.sensor.interval_seconds,
        default_status=DefaultSensorStatus(pipeline.orchestration.automation_default_status.upper()),
        description=f"Runs {pipeline_id!r} when its resolved metadata fingerprint changes "
        f"(tolerates {threshold} consecutive metadata service failure(s)).",
    )
    def metadata_sensor(context: SensorEvaluationContext, dynamic_kafka: DynamicKafkaResource) -> SensorResult:
        result = dynamic_kafka.pipeline(target.config_path, pipeline_id).check_metadata(
            read_cursor(context.cursor), failure_threshold=threshold
        )
        cursor = result.cursor.model_dump_json()
        if result.run_key is None:
            return SensorResult(skip_reason=SkipReason(result.reason), cursor=cursor)
        context.log.info(result.reason)
        request = RunRequest(run_key=result.run_key, tags={TRIGGER_TAG: "metadata_change"})
        return SensorResult(run_requests=[request], cursor=cursor)

    return metadata_sensor


def build_catch_up_sensor(pipeline: PipelineConfig, job: "AssetJob", target: "Target") -> RunStatusSensorDefinition:
    """Requests the next incremental run right after a successful run that a cap left unfinished."""
    pipeline_id = pipeline.id
    key = target.translator.asset_key(pipeline_id)

    @run_status_sensor(
        run_status=DagsterRunStatus.SUCCESS,
        name=catch_up_sensor_name(pipeline_id),
        monitored_jobs=[job],
        request_job=job,
        minimum_interval_seconds=CATCH_UP_INTERVAL_SECONDS,
        default_status=DefaultSensorStatus.RUNNING,
        description=f"Runs {pipeline_id!r} again at once when its last run was capped (lag left behind).",
    )
    def catch_up_sensor(context: RunStatusSensorContext) -> RunRequest | SkipReason:
        run_id = context.dagster_run.run_id
        records = context.instance.get_records_for_run(
            run_id=run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION
        ).records
        for record in records:
            materialization = record.event_log_entry.asset_materialization
            if materialization is None or materialization.asset_key != key:
                continue
            capped = materialization.metadata.get("capped")
            if capped is not None and capped.value is True:
                context.log.info(f"run {run_id} was capped; requesting the next run now")
                return RunRequest(run_key=f"catch-up:{run_id}", tags={TRIGGER_TAG: "catch_up", AFTER_RUN_TAG: run_id})
        return SkipReason(f"run {run_id} was not capped")

    return catch_up_sensor
