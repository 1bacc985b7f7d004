"""Builds the Dagster definitions of a project config.

Per pipeline ``<id>`` (Dagster names use ``<name>``, the id with ``-`` replaced by ``_``):

- assets ``dynamic_kafka/<id>`` (the sink table) and ``dynamic_kafka/<id>_dead_letter``, materialized together by
  one incremental run, downstream of the external assets ``kafka/<stream id>`` of the streams it lists;
- checks ``lag`` (WARN), ``data_loss`` (ERROR) and ``dead_letters`` (WARN) on the sink, and Dagster's freshness
  policy when ``freshness_minutes`` is set;
- job ``<name>_incremental`` (materializes the assets), schedule ``<name>_schedule`` when ``schedule`` is set;
- jobs ``<name>_offsets_show``, ``<name>_offsets_reset`` and ``<name>_dead_letter_replay``, launched with run
  config (operations between runs);
- sensors ``<name>_metadata_sensor`` (metadata fingerprint changed) and ``<name>_catch_up_sensor`` (capped run);
- when ``backfill`` is set: asset ``dynamic_kafka/<id>_backfill``, partitioned by ``backfill.granularity`` from
  ``backfill.start`` with a single-run backfill policy, and job ``<name>_backfill`` that materializes it;
- job ``<name>_maintenance`` (compaction and vacuum of both tables, :mod:`dynamic_kafka.dagster.maintenance`), and
  schedule ``<name>_maintenance_schedule`` when ``maintenance.schedule`` is set;
- with a table per stream (``sink.path`` with ``{stream}``): asset ``dynamic_kafka/<id>_tables`` (a dynamic
  partition per stream), checks ``lag``, ``data_loss`` and ``dead_letters`` on it per partition, and job
  ``<name>_table_checks`` that evaluates them for the chosen streams;
- checks ``idle_partitions``, ``stuck_transactions`` and ``event_time_lag`` on the sink, job ``<name>_health`` (every
  check of the sink, evaluated between runs, :mod:`dynamic_kafka.dagster.health`) and schedule
  ``<name>_health_schedule`` on ``health.schedule``.

Loading reads the config file and nothing else: no secret, no metadata service, no broker, no Spark.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from dagster import (
    AssetChecksDefinition,
    AssetsDefinition,
    AssetSpec,
    Definitions,
    JobDefinition,
    ScheduleDefinition,
    SensorDefinition,
)

from dynamic_kafka import ConfigError, load_project_config
from dynamic_kafka.dagster.assets import build_checks, build_sink_asset, build_table_checks, stream_tables_spec
from dynamic_kafka.dagster.backfill import build_backfill_asset
from dynamic_kafka.dagster.health import build_health_checks, build_health_job, build_health_schedule
from dynamic_kafka.dagster.jobs import AssetJob, build_backfill_job, build_incremental_job, build_operation_jobs
from dynamic_kafka.dagster.maintenance import build_maintenance_job, build_maintenance_schedule
from dynamic_kafka.dagster.names import RESOURCE_KEY, dagster_name
from dynamic_kafka.dagster.resources import DynamicKafkaResource
from dynamic_kafka.dagster.schedules import build_schedule
from dynamic_kafka.dagster.sensors import build_catch_up_sensor, build_metadata_sensor
from dynamic_kafka.dagster.streams import stream_specs


def build_definitions(config_path: str | Path) -> Definitions:
    """Every pipeline's Dagster definitions.

    Raises:
        ConfigError: the config is invalid, two pipeline ids map to one Dagster name, or a schedule is not cron.

    Example:
        >>> defs = build_definitions("examples/demo/dynamic_kafka.yaml")  # doctest: +SKIP
        >>> defs.get_job_def("orders_incremental")  # doctest: +SKIP
    """
    path = Path(config_path).resolve()
    project = load_project_config(path)
    source = str(path)
    clashes = sorted(name for name, n in Counter(dagster_name(p.id) for p in project.pipelines).items() if n > 1)
    if clashes:
        raise ConfigError(
            f"pipeline ids that differ only in '-' and '_' would share Dagster names: {', '.join(clashes)}.",
            source=source,
            hint="Rename one of them.",
        )
    assets: list[AssetsDefinition | AssetSpec] = [*stream_specs(project.pipelines)]
    checks: list[AssetChecksDefinition] = []
    jobs: list[JobDefinition | AssetJob] = []
    schedules: list[ScheduleDefinition] = []
    sensors: list[SensorDefinition] = []
    for pipeline in project.pipelines:
        incremental = build_incremental_job(pipeline)
        assets.append(build_sink_asset(pipeline))
        tables = stream_tables_spec(pipeline)
        if tables is not None:
            assets.append(tables)
        table_checks = build_table_checks(pipeline)
        if table_checks is not None:
            checks.append(table_checks[0])
            jobs.append(table_checks[1])
        checks.append(build_checks(pipeline))
        jobs.append(incremental)
        jobs.extend(build_operation_jobs(pipeline))
        backfill_asset, backfill = build_backfill_asset(pipeline), build_backfill_job(pipeline)
        if backfill_asset is not None and backfill is not None:
            assets.append(backfill_asset)
            jobs.append(backfill)
        schedule = build_schedule(pipeline, incremental, source=source)
        if schedule is not None:
            schedules.append(schedule)
        maintenance = build_maintenance_job(pipeline)
        jobs.append(maintenance)
        maintenance_schedule = build_maintenance_schedule(pipeline, maintenance, source=source)
        if maintenance_schedule is not None:
            schedules.append(maintenance_schedule)
        checks.append(build_health_checks(pipeline))
        health = build_health_job(pipeline)
        jobs.append(health)
        health_schedule = build_health_schedule(pipeline, health, source=source)
        if health_schedule is not None:
            schedules.append(health_schedule)
        sensors.extend([build_metadata_sensor(pipeline, incremental), build_catch_up_sensor(pipeline, incremental)])
    return Definitions(
        assets=assets,
        asset_checks=checks,
        jobs=jobs,
        schedules=schedules,
        sensors=sensors,
        resources={RESOURCE_KEY: DynamicKafkaResource(config_path=source)},
    )
