"""Dagster names for a pipeline's definitions, in one place so the UI, tests and docs agree.

Pipeline ids may contain ``-``; Dagster names may not, so ``-`` becomes ``_`` in job, schedule, sensor and check
names. Asset keys keep the id as written (``["dynamic_kafka", "<pipeline id>"]`` by default); they and the groups
are the translator's (:class:`dynamic_kafka.dagster.translator.DynamicKafkaTranslator`).
"""

from __future__ import annotations

import re

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
# Every run of a publication's job carries PUBLICATION_TAG (a run queue may limit it to one per value).
PUBLICATION_TAG = "dynamic_kafka/publication"


def dagster_name(pipeline_id: str) -> str:
    """The pipeline id as a valid Dagster name (letters, digits and underscores)."""
    return re.sub(r"[^A-Za-z0-9_]", "_", pipeline_id)


def stream_partitions_name(pipeline_id: str) -> str:
    """The dynamic partitions (one per stream's table) of :func:`stream_tables_asset_key`."""
    return f"{dagster_name(pipeline_id)}_streams"


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


def publish_job_name(publication_id: str) -> str:
    """The job that materializes a publication's asset (one run of ``publish``)."""
    return f"{dagster_name(publication_id)}_publish"
