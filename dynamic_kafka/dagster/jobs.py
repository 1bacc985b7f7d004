"""Per pipeline: the incremental job (materializes the sink and dead-letter assets and runs the checks), the
partitioned backfill job (merges time windows into the sink in one run; never moves the incremental offsets), and
the operation jobs launched with run config: ``offsets show``, ``offsets reset`` and ``dead-letters replay``
(:func:`build_operation_jobs`; the library guards them: never beside a run).

Both run in process (one step, one Spark session per run process). At most one run per pipeline at a time: every
run carries the tag ``dynamic_kafka/pipeline=<id>``, which the instance's run queue limits to one per value
(``examples/demo/dagster.yaml``); the steps also share the pool named by the sink's asset key
(``dynamic_kafka/<id>`` by default). Where no limit is
configured, the library's state guard is the backstop: a second run fails with ``RunInProgressError``, which
``dynamic_kafka.dagster.errors`` turns into a bounded retry.
"""

# No `from __future__ import annotations`: Dagster reads the decorated functions' annotations at runtime.

from typing import Any

from dagster import (
    AssetCheckKey,
    AssetSelection,
    Config,
    GraphDefinition,
    JobDefinition,
    MetadataValue,
    OpExecutionContext,
    Output,
    define_asset_job,
    in_process_executor,
    op,
)

# What define_asset_job returns. The dagster package does not export the class; this is the one place the
# pipelines layer names it (sensors, schedules and the definitions import AssetJob from here).
from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition
from pydantic import Field

from dynamic_kafka import PipelineConfig
from dynamic_kafka.dagster.errors import dagster_errors
from dynamic_kafka.dagster.names import (
    HEALTH_CHECK_NAMES,
    KIND_TAG,
    PIPELINE_TAG,
    backfill_job_name,
    dagster_name,
    dead_letter_replay_job_name,
    incremental_job_name,
    offsets_reset_job_name,
    offsets_show_job_name,
)
from dynamic_kafka.dagster.resources import DynamicKafkaResource
from dynamic_kafka.dagster.target import Target

AssetJob = UnresolvedAssetJobDefinition


def build_incremental_job(pipeline: PipelineConfig, target: Target) -> AssetJob:
    """One incremental run of the pipeline: materializes its sink and dead-letter assets, then runs the checks."""
    sink = target.translator.asset_key(pipeline.id)
    return define_asset_job(
        name=incremental_job_name(pipeline.id),
        # The health checks are for between runs (dynamic_kafka.dagster.health): the run's job leaves them out.
        selection=AssetSelection.assets(sink, target.translator.dead_letter_asset_key(pipeline.id))
        - AssetSelection.checks(*(AssetCheckKey(sink, name) for name in HEALTH_CHECK_NAMES)),
        description=f"One incremental run of pipeline {pipeline.id!r}: every record since the last run, once.",
        tags={PIPELINE_TAG: pipeline.id, KIND_TAG: "incremental"},
        executor_def=in_process_executor,
    )


def build_backfill_job(pipeline: PipelineConfig, target: Target) -> AssetJob | None:
    """The partitioned backfill job (materializes the backfill asset).

    A range of partitions launched together is one run (the asset's single-run backfill policy).

    Returns:
        None when the pipeline has no ``backfill`` config.
    """
    if pipeline.orchestration.backfill is None:
        return None
    return define_asset_job(
        name=backfill_job_name(pipeline.id),
        selection=AssetSelection.assets(target.translator.backfill_asset_key(pipeline.id)),
        description=f"Merges {pipeline.orchestration.backfill.granularity} windows of record timestamps into the "
        f"sink of {pipeline.id!r}, without duplicates and without moving the incremental offsets.",
        tags={PIPELINE_TAG: pipeline.id, KIND_TAG: "backfill"},
        executor_def=in_process_executor,
    )


# --- operations between runs: one op each, configured at launch (the library decides everything) ----------------


class OffsetsResetConfig(Config):
    """Run config of the ``offsets reset`` job (the command's flags)."""

    to: str = Field(description="earliest | latest | timestamp:<ISO-8601 or epoch ms> | offset:<N>.")
    reason: str = Field(description="Why: recorded in the pipeline's run history.")
    cluster: str | None = Field(None, description="Only this cluster (also one the streams no longer list).")
    topic: str | None = Field(None, description="Only this topic.")
    partition: int | None = Field(None, description="Only this partition.")
    apply: bool = Field(False, description="Make the change; false (the default) only shows what would change.")


class DeadLetterReplayConfig(Config):
    """Run config of the ``dead-letters replay`` job (the command's flags)."""

    run_seq: int | None = Field(None, description="Only the dead letters of this run; unset: all of them.")
    apply: bool = Field(False, description="Land them; false (the default) only counts what a replay would do.")


_SHOW = "shows per partition the committed next offset, the brokers' earliest and latest, the lag and the last run"
_RESET = "moves the committed next offsets between runs, recorded with the reason (apply false: only show)"
_REPLAY = "decodes the dead letters again and lands the ones that decode now, exactly once (apply false: only count)"


def build_operation_jobs(pipeline: PipelineConfig, target: Target) -> list[JobDefinition]:
    """The pipeline's operations between runs as jobs launched with run config: ``offsets show``, ``offsets
    reset`` and ``dead-letters replay``. Each op's output is the library's report (also its metadata and log).
    """
    pipeline_id = pipeline.id
    name = dagster_name(pipeline_id)
    tags = {PIPELINE_TAG: pipeline_id, KIND_TAG: "operation"}

    @op(
        name=f"{name}_show_offsets",
        description=f"Pipeline {pipeline_id!r}: {_SHOW}.",
    )
    def show(context: OpExecutionContext, dynamic_kafka: DynamicKafkaResource) -> Output[dict[str, Any]]:
        with dagster_errors(pipeline_id):
            status = dynamic_kafka.pipeline(target.config_path, pipeline_id).offsets()
        return _report(context, status.model_dump(mode="json"), status.offsets_text())

    @op(
        name=f"{name}_reset_offsets",
        description=f"Pipeline {pipeline_id!r}: {_RESET}.",
    )
    def reset(
        context: OpExecutionContext, config: OffsetsResetConfig, dynamic_kafka: DynamicKafkaResource
    ) -> Output[dict[str, Any]]:
        with dagster_errors(pipeline_id):
            done = dynamic_kafka.pipeline(target.config_path, pipeline_id).reset_offsets(
                config.to,
                config.reason,
                cluster=config.cluster,
                topic=config.topic,
                partition=config.partition,
                apply=config.apply,
            )
        return _report(context, done.model_dump(mode="json"), done.text())

    @op(
        name=f"{name}_replay_dead_letters",
        description=f"Pipeline {pipeline_id!r}: {_REPLAY}.",
    )
    def replay(
        context: OpExecutionContext, config: DeadLetterReplayConfig, dynamic_kafka: DynamicKafkaResource
    ) -> Output[dict[str, Any]]:
        with dagster_errors(pipeline_id):
            done = dynamic_kafka.pipeline(target.config_path, pipeline_id).replay_dead_letters(
                run_seq=config.run_seq, apply=config.apply
            )
        return _report(context, done.model_dump(mode="json"), done.text())

    jobs = []
    for operation, job_name, what in (
        (show, offsets_show_job_name(pipeline_id), "shows its committed offsets against the brokers"),
        (reset, offsets_reset_job_name(pipeline_id), "moves its committed offsets (run config: to, reason, apply)"),
        (replay, dead_letter_replay_job_name(pipeline_id), "replays its dead letters (run config: run_seq, apply)"),
    ):
        jobs.append(
            GraphDefinition(name=job_name, node_defs=[operation]).to_job(
                description=f"Pipeline {pipeline_id!r}: {what}.", tags=tags, executor_def=in_process_executor
            )
        )
    return jobs


def _report(context: OpExecutionContext, document: dict[str, Any], text: str) -> Output[dict[str, Any]]:
    context.log.info(text)
    return Output(document, metadata={"report": MetadataValue.md(f"```\n{text}\n```")})
