"""Per pipeline: the checks between runs. The health checks on the sink (``idle_partitions``,
``stuck_transactions``, ``event_time_lag``, from :meth:`dynamic_kafka.Pipeline.health`), the job
``<name>_health`` that evaluates every check of the sink without a run (these and ``lag``, ``data_loss``,
``dead_letters`` of :mod:`dynamic_kafka.dagster.assets`), and its schedule ``<name>_health_schedule`` on
``health.schedule``.

The health job materializes nothing and starts no Spark: it asks the brokers. It does not carry the pipeline's run
tag, so the instance's one-run-per-pipeline limit never queues it behind a long run (which is when a stuck
transaction or a growing lag matters). The incremental job leaves the health checks out: right after a run they
only repeat what the run just saw, at the cost of a read per partition. Freshness stays Dagster's own policy on the
sink (``freshness_minutes``), which Dagster evaluates between runs by itself.
"""

# No `from __future__ import annotations`: Dagster reads the decorated functions' annotations at runtime.

from collections.abc import Iterator, Sequence

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetKey,
    AssetSelection,
    MetadataValue,
    ScheduleDefinition,
    TableColumn,
    TableRecord,
    TableSchema,
    define_asset_job,
    in_process_executor,
    multi_asset_check,
)

from dynamic_kafka import HealthReport, PartitionHealth, PipelineConfig
from dynamic_kafka.dagster.errors import dagster_errors
from dynamic_kafka.dagster.jobs import AssetJob
from dynamic_kafka.dagster.names import (
    EVENT_TIME_LAG_CHECK_NAME,
    IDLE_CHECK_NAME,
    KIND_TAG,
    STUCK_TRANSACTION_CHECK_NAME,
    dagster_name,
    health_job_name,
    health_schedule_name,
)
from dynamic_kafka.dagster.resources import DynamicKafkaResource
from dynamic_kafka.dagster.schedules import cron_schedule
from dynamic_kafka.dagster.target import Target

_PARTITION_COLUMNS = TableSchema(
    columns=[
        TableColumn("cluster_id", "string"),
        TableColumn("topic", "string"),
        TableColumn("partition", "int"),
        TableColumn("high_watermark", "int"),
        TableColumn("last_stable_offset", "int"),
        TableColumn("newest_record_at", "string"),
        TableColumn("idle_seconds", "float"),
        TableColumn("open_transaction_since", "string"),
    ]
)


def build_health_checks(pipeline: PipelineConfig, target: Target) -> AssetChecksDefinition:
    """The sink's health checks, from one health report: idle partitions, stuck transactions, event-time lag."""
    pipeline_id = pipeline.id
    key = target.translator.asset_key(pipeline_id)
    health = pipeline.health
    idle_rule = "fails" if health.fail_on_idle else "reports"
    event_limit = health.max_event_time_lag_seconds
    specs = [
        AssetCheckSpec(
            IDLE_CHECK_NAME,
            asset=key,
            description=f"{idle_rule.capitalize()} partitions without a record (by Kafka timestamp) for over "
            f"{health.idle_after_seconds}s.",
        ),
        AssetCheckSpec(
            STUCK_TRANSACTION_CHECK_NAME,
            asset=key,
            description="No partition holds a transaction open (last stable offset below the high watermark) for "
            f"over {health.stuck_transaction_seconds}s.",
        ),
        AssetCheckSpec(
            EVENT_TIME_LAG_CHECK_NAME,
            asset=key,
            description=f"The newest landed event time is at most {event_limit}s old."
            if event_limit is not None
            else "Reports the age of the newest landed event time (no max_event_time_lag_seconds configured).",
        ),
    ]

    @multi_asset_check(name=f"{dagster_name(pipeline_id)}_health_checks", specs=specs)
    def health_checks(
        context: AssetCheckExecutionContext, dynamic_kafka: DynamicKafkaResource
    ) -> Iterator[AssetCheckResult]:
        with dagster_errors(pipeline_id):
            report = dynamic_kafka.pipeline(target.config_path, pipeline_id).health()
        idle = [p for p in report.partitions if p.idle]
        held = [p for p in report.partitions if p.pending_in_transaction]
        yield _result(key, IDLE_CHECK_NAME, report, {"idle_partitions": _partitions(idle)})
        yield _result(key, STUCK_TRANSACTION_CHECK_NAME, report, {"open_transactions": _partitions(held)})
        event_metadata: dict[str, MetadataValue] = {}
        if report.event_time_lag_seconds is not None:
            event_metadata["event_time_lag_seconds"] = MetadataValue.float(report.event_time_lag_seconds)
        if report.newest_event_time is not None:
            event_metadata["newest_event_time"] = MetadataValue.timestamp(report.newest_event_time)
        yield _result(key, EVENT_TIME_LAG_CHECK_NAME, report, event_metadata)

    return health_checks


def _result(key: AssetKey, name: str, report: HealthReport, metadata: dict[str, MetadataValue]) -> AssetCheckResult:
    verdict = next(v for v in report.verdicts if v.name == name)
    return AssetCheckResult(
        check_name=name,
        asset_key=key,
        passed=verdict.passed,
        severity=AssetCheckSeverity.ERROR if verdict.severity == "error" else AssetCheckSeverity.WARN,
        description=verdict.description,
        metadata=metadata,
    )


def _partitions(rows: Sequence[PartitionHealth]) -> MetadataValue:
    return MetadataValue.table(
        [
            TableRecord(
                {
                    "cluster_id": p.cluster_id,
                    "topic": p.topic,
                    "partition": p.partition,
                    "high_watermark": p.high_watermark,
                    "last_stable_offset": p.last_stable_offset,
                    "newest_record_at": p.newest_record_at.isoformat() if p.newest_record_at else None,
                    "idle_seconds": p.idle_seconds,
                    "open_transaction_since": p.open_transaction_since.isoformat()
                    if p.open_transaction_since
                    else None,
                }
            )
            for p in rows
        ],
        schema=_PARTITION_COLUMNS,
    )


def build_health_job(pipeline: PipelineConfig, target: Target) -> AssetJob:
    """The job that evaluates every check of the sink between runs (no materialization, no Spark)."""
    return define_asset_job(
        name=health_job_name(pipeline.id),
        selection=AssetSelection.checks_for_assets(target.translator.asset_key(pipeline.id)),
        description=f"Evaluates the checks of {pipeline.id!r}'s sink against the brokers between runs: lag, data "
        "loss, dead letters, idle partitions, stuck transactions, event-time lag.",
        tags={KIND_TAG: "health"},
        executor_def=in_process_executor,
    )


def build_health_schedule(
    pipeline: PipelineConfig, job: AssetJob, *, source: str | None = None
) -> ScheduleDefinition | None:
    """The health job on ``health.schedule`` (UTC), starting as ``orchestration.automation_default_status`` says;
    None when the schedule is null.

    Raises:
        ConfigError: the cron expression is invalid; names the pipeline and the value.
    """
    cron = pipeline.health.schedule
    if cron is None:
        return None
    return cron_schedule(
        pipeline,
        health_schedule_name(pipeline.id),
        job,
        key="health.schedule",
        cron=cron,
        description=f"The checks of {pipeline.id!r}'s sink between runs, on '{cron}' (UTC).",
        example="*/15 * * * *",
        source=source,
    )
