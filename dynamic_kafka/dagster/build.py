"""Builds the Dagster definitions of a project config.

Per pipeline ``<id>`` (Dagster names use ``<name>``, the id with ``-`` replaced by ``_``):

- assets ``dynamic_kafka/<id>`` (the sink table) and ``dynamic_kafka/<id>_dead_letter``, materialized together by
  one incremental run, downstream of the external assets ``kafka/<stream id>`` of the streams it lists;
- checks ``lag`` (WARN), ``data_loss`` (ERROR) and ``dead_letters`` (WARN) on the sink, and Dagster's freshness
  policy when ``freshness_minutes`` is set;
- job ``<name>_incremental`` (materializes the assets), schedule ``<name>_schedule`` when ``schedule`` is set and
  no automation condition is given;
- jobs ``<name>_offsets_show``, ``<name>_offsets_reset`` and ``<name>_dead_letter_replay``, launched with run
  config (operations between runs);
- sensors ``<name>_metadata_sensor`` (metadata fingerprint changed) and ``<name>_catch_up_sensor`` (capped run);
- when ``orchestration.backfill`` is set: asset ``dynamic_kafka/<id>_backfill``, partitioned by its
  ``granularity`` from its ``start`` with a single-run backfill policy, and job ``<name>_backfill`` that
  materializes it;
- job ``<name>_maintenance`` (compaction and vacuum of both tables, :mod:`dynamic_kafka.dagster.maintenance`), and
  schedule ``<name>_maintenance_schedule`` when ``maintenance.schedule`` is set;
- with a table per stream (``sink.path`` with ``{stream}``): asset ``dynamic_kafka/<id>_tables`` (a dynamic
  partition per stream), checks ``lag``, ``data_loss`` and ``dead_letters`` on it per partition, and job
  ``<name>_table_checks`` that evaluates them for the chosen streams;
- checks ``idle_partitions``, ``stuck_transactions`` and ``event_time_lag`` on the sink, job ``<name>_health`` (every
  check of the sink, evaluated between runs, :mod:`dynamic_kafka.dagster.health`) and schedule
  ``<name>_health_schedule`` on ``health.schedule``.

Per publication ``<id>``: asset ``dynamic_kafka/<id>_publication`` downstream of the published table (a pipeline's
sink asset, else the external asset ``dynamic_kafka/<id>_table``) and job ``<name>_publish`` that materializes it
(:mod:`dynamic_kafka.dagster.publications`).

Asset keys (``dynamic_kafka/...``, ``kafka/...``), groups, owners, tags and kinds are the translator's
(:class:`~dynamic_kafka.dagster.translator.DynamicKafkaTranslator`); the one resource is shared by every config's
definitions, so several configs' definitions merge.

Loading reads the config file and nothing else: no secret, no metadata service, no broker, no Spark.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dagster import (
    AssetChecksDefinition,
    AssetsDefinition,
    AssetSpec,
    Definitions,
    JobDefinition,
    ScheduleDefinition,
    SensorDefinition,
)

from dynamic_kafka import ConfigError, PipelineConfig, load_project_config
from dynamic_kafka.dagster.assets import build_checks, build_sink_asset, build_table_checks, stream_tables_spec
from dynamic_kafka.dagster.backfill import build_backfill_asset
from dynamic_kafka.dagster.health import build_health_checks, build_health_job, build_health_schedule
from dynamic_kafka.dagster.jobs import AssetJob, build_backfill_job, build_incremental_job, build_operation_jobs
from dynamic_kafka.dagster.maintenance import build_maintenance_job, build_maintenance_schedule
from dynamic_kafka.dagster.names import RESOURCE_KEY, dagster_name
from dynamic_kafka.dagster.publications import publication_parts
from dynamic_kafka.dagster.resources import SHARED
from dynamic_kafka.dagster.schedules import build_schedule
from dynamic_kafka.dagster.sensors import build_catch_up_sensor, build_metadata_sensor
from dynamic_kafka.dagster.streams import stream_specs
from dynamic_kafka.dagster.target import Target
from dynamic_kafka.dagster.translator import DynamicKafkaTranslator

if TYPE_CHECKING:
    from dagster import AutomationCondition, RetryPolicy


def build_definitions(
    config_path: str | Path,
    *,
    translator: DynamicKafkaTranslator | None = None,
    retry_policy: RetryPolicy | None = None,
    automation_condition: AutomationCondition[Any] | None = None,
) -> Definitions:
    """Every pipeline's Dagster definitions.

    Args:
        config_path: the project config (``dynamic_kafka.yaml``).
        translator: asset keys, groups, owners, tags and kinds; the defaults when None.
        retry_policy: the retry policy of the incremental and backfill steps. None keeps the built-in one: a
            retriable error (the library's ``retriable``) is retried 3 times, 15 s apart; any other fails at once.
            With a policy, the policy retries the retriable errors, and the others still fail at once.
        automation_condition: materializes the sink by Dagster's declarative automation instead of a schedule:
            set, the pipelines' ``schedule`` is not built (the sensors are, as they see what automation cannot:
            metadata changes and capped runs).

    Raises:
        ConfigError: the config is invalid, two pipeline ids map to one Dagster name, or a schedule is not cron.

    Example:
        >>> defs = build_definitions("examples/demo/dynamic_kafka.yaml")  # doctest: +SKIP
        >>> defs.get_job_def("orders_incremental")  # doctest: +SKIP
        >>> both = Definitions.merge(defs, build_definitions("billing.yaml", translator=DynamicKafkaTranslator(
        ...     key_prefix=("billing",))))  # doctest: +SKIP
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
    target = Target(
        config_path=source,
        translator=translator or DynamicKafkaTranslator(),
        retry_policy=retry_policy,
        automation_condition=automation_condition,
    )
    parts = _Parts(assets=[*stream_specs(project.pipelines, target.translator)])
    for pipeline in project.pipelines:
        parts.add(pipeline, target)
    for publication in project.publications:
        assets, job = publication_parts(publication, project.pipelines, target)
        parts.assets.extend(assets)
        parts.jobs.append(job)
    return Definitions(
        assets=parts.assets,
        asset_checks=parts.checks,
        jobs=parts.jobs,
        schedules=parts.schedules,
        sensors=parts.sensors,
        resources={RESOURCE_KEY: SHARED},
    )


class _Parts:
    """The definitions gathered pipeline by pipeline."""

    def __init__(self, assets: list[AssetsDefinition | AssetSpec]) -> None:
        self.assets = assets
        self.checks: list[AssetChecksDefinition] = []
        self.jobs: list[JobDefinition | AssetJob] = []
        self.schedules: list[ScheduleDefinition] = []
        self.sensors: list[SensorDefinition] = []

    def add(self, pipeline: PipelineConfig, target: Target) -> None:
        """One pipeline's definitions."""
        source = target.config_path
        incremental = build_incremental_job(pipeline, target)
        self.assets.append(build_sink_asset(pipeline, target))
        tables = stream_tables_spec(pipeline, target.translator)
        if tables is not None:
            self.assets.append(tables)
        table_checks = build_table_checks(pipeline, target)
        if table_checks is not None:
            self.checks.append(table_checks[0])
            self.jobs.append(table_checks[1])
        self.checks.append(build_checks(pipeline, target))
        self.jobs.append(incremental)
        self.jobs.extend(build_operation_jobs(pipeline, target))
        backfill_asset, backfill = build_backfill_asset(pipeline, target), build_backfill_job(pipeline, target)
        if backfill_asset is not None and backfill is not None:
            self.assets.append(backfill_asset)
            self.jobs.append(backfill)
        # An automation condition decides when the sink runs: a schedule beside it would run it twice as often.
        schedule = None if target.automation_condition else build_schedule(pipeline, incremental, source=source)
        maintenance = build_maintenance_job(pipeline, target)
        self.jobs.append(maintenance)
        health = build_health_job(pipeline, target)
        self.jobs.append(health)
        self.checks.append(build_health_checks(pipeline, target))
        for built in (
            schedule,
            build_maintenance_schedule(pipeline, maintenance, source=source),
            build_health_schedule(pipeline, health, source=source),
        ):
            if built is not None:
                self.schedules.append(built)
        self.sensors.extend(
            [build_metadata_sensor(pipeline, incremental, target), build_catch_up_sensor(pipeline, incremental, target)]
        )
