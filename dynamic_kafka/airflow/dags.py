"""The DAG factory: one set of DAGs per pipeline of a project config.

Per pipeline ``<id>``:

- ``<id>``: the incremental run on the pipeline's ``orchestration.schedule`` (none: triggered only), then the
  checks after it.
  One run at a time (``max_active_runs=1``); the run task takes a slot of the Spark Connect pool and declares the
  sink and dead-letter tables as Airflow Assets, so downstream DAGs can be scheduled on them.
- ``<id>_backfill`` (with ``orchestration.backfill``): one task merging the DAG run's data interval, on the
  backfill's granularity (``@hourly`` / ``@daily``) from its ``start``, never catching up by itself: ``airflow
  backfill create`` over a date range runs one backfill per interval, each window merged exactly once beside the
  incremental runs (the library's backfill never moves the incremental offsets).
- ``<id>_health``: the checks between runs on ``health.schedule`` (none: triggered only).
- ``<id>_offsets``: ``offsets show``, triggered only.
- ``<id>_watch``: a deferrable wait for a metadata change, then a trigger of ``<id>``; continuous, paused at creation
  unless ``orchestration.automation_default_status`` is ``running``.

Reading the config file is the only I/O at parse time; nothing contacts Kafka, Spark or the metadata service.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import DAG, Asset
from airflow.timetables.interval import CronDataIntervalTimetable

from dynamic_kafka import load_project_config
from dynamic_kafka.airflow.operators import (
    BackfillOperator,
    ChecksOperator,
    HealthOperator,
    IncrementalRunOperator,
    OffsetsOperator,
)
from dynamic_kafka.airflow.triggers import MetadataChangeOperator

if TYPE_CHECKING:
    from collections.abc import Mapping

    from airflow.timetables.base import Timetable

    from dynamic_kafka import PipelineConfig, TableLocation

SPARK_POOL = "dynamic_kafka_spark"
"""The default pool of the tasks that run Spark (runs and backfills): size it to what the Spark Connect server
takes at once (``airflow pools set dynamic_kafka_spark 1 "Spark Connect"``)."""
START_DATE = datetime(2026, 1, 1, tzinfo=UTC)
"""The start date of the DAGs with a schedule (they never catch up); a backfill DAG starts at
``orchestration.backfill.start``."""
TAGS = ("dynamic_kafka",)


def table_asset(pipeline_id: str, role: str, location: TableLocation) -> Asset:
    """A Delta table as an Airflow Asset: named ``dynamic_kafka/<pipeline>/<role>``, its URI where it is."""
    uri = Path(location.uri).as_uri() if location.is_local else location.uri
    return Asset(name=f"dynamic_kafka/{pipeline_id}/{role}", uri=uri, group="dynamic_kafka")


def sink_assets(pipeline: PipelineConfig) -> list[Asset]:
    """The sink and dead-letter tables one run writes."""
    return [
        table_asset(pipeline.id, "sink", pipeline.sink.path),
        table_asset(pipeline.id, "dead_letters", pipeline.sink.resolved_dead_letter_path),
    ]


def build_dags(
    config_path: str | Path,
    *,
    pool: str = SPARK_POOL,
    default_args: Mapping[str, Any] | None = None,
) -> dict[str, DAG]:
    """Every pipeline of one project config as Airflow DAGs, by DAG id (put them in the DAG file's globals).

    Args:
        config_path: the project config; made absolute, every task re-reads it.
        pool: the pool of the tasks that run Spark.
        default_args: Airflow's default arguments of every task (owner, retries, ...).

    Example:
        >>> globals().update(build_dags("/opt/airflow/dynamic_kafka.yaml"))  # doctest: +SKIP
    """
    path = str(Path(config_path).resolve())
    dags: dict[str, DAG] = {}
    for pipeline in load_project_config(path).pipelines:
        for dag in _pipeline_dags(pipeline, path, pool, dict(default_args or {})):
            dags[dag.dag_id] = dag
    return dags


def _dag(
    dag_id: str, description: str, schedule: str | Timetable | None, default_args: dict[str, Any], **kwargs: Any
) -> DAG:
    kwargs.setdefault("start_date", START_DATE)
    return DAG(
        dag_id,
        description=description,
        schedule=schedule,
        catchup=False,
        max_active_runs=1,
        default_args=default_args,
        tags=set(TAGS),
        **kwargs,
    )


def _pipeline_dags(pipeline: PipelineConfig, path: str, pool: str, default_args: dict[str, Any]) -> list[DAG]:
    pid = pipeline.id
    verb: dict[str, Any] = {"config_path": path, "pipeline_id": pid}
    with _dag(
        pid, f"One incremental run of pipeline {pid!r}, then its checks.", pipeline.orchestration.schedule, default_args
    ) as run:
        landed = IncrementalRunOperator(task_id="run", pool=pool, outlets=sink_assets(pipeline), **verb)
        landed >> ChecksOperator(task_id="checks", **verb)
    dags = [run]
    if pipeline.orchestration.backfill is not None:
        backfill = pipeline.orchestration.backfill
        with _dag(
            f"{pid}_backfill",
            f"Merges {backfill.granularity} windows of record timestamps into the sink of {pid!r} (airflow backfill "
            "create), without duplicates and without moving the incremental offsets.",
            # A data interval per window: Airflow 3's plain cron schedules give runs no interval.
            CronDataIntervalTimetable("@hourly" if backfill.granularity == "hourly" else "@daily", timezone="UTC"),
            default_args,
            start_date=backfill.start,
        ) as windows:
            BackfillOperator(task_id="backfill", pool=pool, outlets=sink_assets(pipeline)[:1], **verb)
        dags.append(windows)
    with _dag(
        f"{pid}_health", f"The checks of {pid!r} between runs.", pipeline.health.schedule, default_args
    ) as health:
        HealthOperator(task_id="health", **verb)
    with _dag(f"{pid}_offsets", f"Pipeline {pid!r}: offsets show.", None, default_args) as offsets:
        OffsetsOperator(task_id="offsets", **verb)
    with _dag(
        f"{pid}_watch",
        f"Runs {pid!r} when its resolved metadata fingerprint changes.",
        "@continuous",
        default_args,
        is_paused_upon_creation=pipeline.orchestration.automation_default_status == "stopped",
    ) as watch:
        changed = MetadataChangeOperator(task_id="wait_for_metadata_change", **verb)
        changed >> TriggerDagRunOperator(task_id="trigger_run", trigger_dag_id=pid)
    return [*dags, health, offsets, watch]
