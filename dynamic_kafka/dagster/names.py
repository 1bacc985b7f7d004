"""Dagster names for a pipeline's definitions, in one place so the UI, tests and docs agree.

Pipeline ids may contain ``-``; Dagster names may not, so ``-`` becomes ``_`` in job, schedule, sensor and check
names. Asset keys keep the id as written (``["dynamic_kafka", "<pipeline id>"]``).
"""

from __future__ import annotations

import re

from dagster import AssetKey

ASSET_PREFIX = "dynamic_kafka"
STREAM_PREFIX = "kafka"
GROUP_NAME = "dynamic_kafka"
STREAM_GROUP_NAME = "kafka_streams"
RESOURCE_KEY = "dynamic_kafka"
LAG_CHECK_NAME = "lag"
DATA_LOSS_CHECK_NAME = "data_loss"
DEAD_LETTER_CHECK_NAME = "dead_letters"
COMPLETENESS_CHECK_NAME = "completeness"
# The health checks between runs (dynamic_kafka.dagster.health); the names are the library's verdict names.
IDLE_CHECK_NAME = "idle_partitions"
STUCK_TRANSACTION_CHECK_NAME = "stuck_transactions"
EVENT_TIME_LAG_CHECK_NAME = "event_time_lag"
HEALTH_CHECK_NAMES = (IDLE_CHECK_NAME, STUCK_TRANSACTION_CHECK_NAME, EVENT_TIME_LAG_CHECK_NAME)

# Run tags. Every run of a pipeline carries PIPELINE_TAG (the run queue's one-run-per-pipeline limit counts it);
# KIND_TAG says incremental or backfill; TRIGGER_TAG says what requested the run.
PIPELINE_TAG = "dynamic_kafka/pipeline"
KIND_TAG = "dynamic_kafka/kind"
TRIGGER_TAG = "dynamic_kafka/trigger"
AFTER_RUN_TAG = "dynamic_kafka/after_run"


def dagster_name(pipeline_id: str) -> str:
    """The pipeline id as a valid Dagster name (letters, digits and underscores)."""
    return re.sub(r"[^A-Za-z0-9_]", "_", pipeline_id)


def asset_key(pipeline_id: str) -> AssetKey:
    """The sink table's asset key."""
    return AssetKey([ASSET_PREFIX, pipeline_id])


def dead_letter_asset_key(pipeline_id: str) -> AssetKey:
    """The dead-letter table's asset key (records the run could not decode, kept with the reason)."""
    return AssetKey([ASSET_PREFIX, f"{pipeline_id}_dead_letter"])


def stream_tables_asset_key(pipeline_id: str) -> AssetKey:
    """The asset of a pipeline with a table per stream: one dynamic partition per stream's table."""
    return AssetKey([ASSET_PREFIX, f"{pipeline_id}_tables"])


def stream_partitions_name(pipeline_id: str) -> str:
    """The dynamic partitions (one per stream's table) of :func:`stream_tables_asset_key`."""
    return f"{dagster_name(pipeline_id)}_streams"


def backfill_asset_key(pipeline_id: str) -> AssetKey:
    """The partitioned asset of the sink's time windows merged by backfills."""
    return AssetKey([ASSET_PREFIX, f"{pipeline_id}_backfill"])


def stream_asset_key(stream_id: str) -> AssetKey:
    """A Kafka stream's (external) asset key."""
    return AssetKey([STREAM_PREFIX, stream_id])


def pool_name(pipeline_id: str) -> str:
    """The concurrency pool shared by the pipeline's incremental and backfill steps (limit 1 per pool)."""
    return f"{ASSET_PREFIX}/{pipeline_id}"


def incremental_job_name(pipeline_id: str) -> str:
    """Return the name of a pipeline's incremental job."""
    return f"{dagster_name(pipeline_id)}_incremental"


def backfill_job_name(pipeline_id: str) -> str:
    """Return the name of a pipeline's backfill job."""
    return f"{dagster_name(pipeline_id)}_backfill"


def schedule_name(pipeline_id: str) -> str:
    """Return the name of a pipeline's schedule."""
    return f"{dagster_name(pipeline_id)}_schedule"


def metadata_sensor_name(pipeline_id: str) -> str:
    """Return the name of a pipeline's metadata sensor."""
    return f"{dagster_name(pipeline_id)}_metadata_sensor"


def catch_up_sensor_name(pipeline_id: str) -> str:
    """Return the name of a pipeline's catch-up sensor."""
    return f"{dagster_name(pipeline_id)}_catch_up_sensor"


def offsets_show_job_name(pipeline_id: str) -> str:
    """Return the name of a pipeline's ``offsets show`` job."""
    return f"{dagster_name(pipeline_id)}_offsets_show"


def offsets_reset_job_name(pipeline_id: str) -> str:
    """Return the name of a pipeline's ``offsets reset`` job."""
    return f"{dagster_name(pipeline_id)}_offsets_reset"


def dead_letter_replay_job_name(pipeline_id: str) -> str:
    """Return the name of a pipeline's ``dead-letters replay`` job."""
    return f"{dagster_name(pipeline_id)}_dead_letter_replay"


def maintenance_job_name(pipeline_id: str) -> str:
    """Return the name of a pipeline's maintenance job."""
    return f"{dagster_name(pipeline_id)}_maintenance"


def maintenance_schedule_name(pipeline_id: str) -> str:
    """Return the name of a pipeline's maintenance schedule (when ``maintenance.schedule`` is set)."""
    return f"{dagster_name(pipeline_id)}_maintenance_schedule"


def health_job_name(pipeline_id: str) -> str:
    """Return the name of a pipeline's health job (the sink's checks, evaluated between runs)."""
    return f"{dagster_name(pipeline_id)}_health"


def health_schedule_name(pipeline_id: str) -> str:
    """Return the name of a pipeline's health schedule (when ``health.schedule`` is set)."""
    return f"{dagster_name(pipeline_id)}_health_schedule"


def table_checks_job_name(pipeline_id: str) -> str:
    """Return the name of the job evaluating the checks of one stream's table (a pipeline with a table per stream;
    partitioned by stream).
    """
    return f"{dagster_name(pipeline_id)}_table_checks"
