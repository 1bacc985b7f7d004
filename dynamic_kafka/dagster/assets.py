"""Per pipeline: the sink table and its dead-letter table as assets materialized by one incremental run, and the
checks on the sink, split by meaning.

Materializing them is one incremental run (``Pipeline.run``): recover a crashed run if any, plan, read,
write, commit. Both tables depend on the pipeline's Kafka streams (external assets,
:mod:`dynamic_kafka.dagster.streams`), so the asset graph shows stream -> table. After the run the status
(committed offsets against the brokers' latest, no Spark) adds per-partition offsets and per-cluster lag to the
sink's metadata.

The checks read the committed state and the brokers' latest offsets (``Pipeline.status``, once for all three) and
take their verdicts from the library (:mod:`dynamic_kafka.operations.status`): ``lag`` (WARN: the data is late),
``data_loss`` (ERROR: records are missing), ``dead_letters`` (WARN over ``max_dead_letters``), ``completeness``
(ERROR: the last run's records read per range are not what it landed). Freshness is Dagster's own freshness
policy on the sink (``freshness_minutes``).

With a table per stream, the stream tables' asset (one dynamic partition per stream) has ``lag``, ``data_loss`` and
``dead_letters`` of its own, per partition: the same verdicts over one stream's table
(:meth:`dynamic_kafka.PipelineStatus.of_table`), evaluated by the job ``<name>_table_checks`` for the streams
chosen. Completeness stays on the sink: a run's records are counted over all its ranges at once.
"""

# No `from __future__ import annotations`: Dagster reads the decorated functions' annotations at runtime.

import warnings
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetKey,
    AssetMaterialization,
    AssetsDefinition,
    AssetSelection,
    AssetSpec,
    DataVersion,
    DynamicPartitionsDefinition,
    Failure,
    FreshnessPolicy,
    MaterializeResult,
    MetadataValue,
    PreviewWarning,
    define_asset_job,
    in_process_executor,
    multi_asset,
    multi_asset_check,
)

from dynamic_kafka import (
    DynamicKafkaError,
    HealthVerdict,
    PipelineConfig,
    PipelineStatus,
    RunSummary,
    completeness_verdict,
    data_loss_verdict,
    dead_letter_verdict,
    every,
    lag_limit_verdict,
    reporting_progress,
)
from dynamic_kafka.dagster.errors import dagster_errors
from dynamic_kafka.dagster.jobs import AssetJob
from dynamic_kafka.dagster.metadata import (
    completeness_metadata,
    status_metadata,
    summary_metadata,
    table_metadata,
    table_uri,
)
from dynamic_kafka.dagster.names import (
    COMPLETENESS_CHECK_NAME,
    DATA_LOSS_CHECK_NAME,
    DEAD_LETTER_CHECK_NAME,
    KIND_TAG,
    LAG_CHECK_NAME,
    dagster_name,
    stream_partitions_name,
    table_checks_job_name,
)
from dynamic_kafka.dagster.resources import DynamicKafkaResource
from dynamic_kafka.dagster.streams import stream_keys
from dynamic_kafka.dagster.target import Target
from dynamic_kafka.dagster.translator import DynamicKafkaTranslator


def _describe(pipeline: PipelineConfig) -> str:
    subscription = (
        f"streams {', '.join(pipeline.streams)}"
        if pipeline.streams
        else f"streams matching {pipeline.stream_pattern!r}"
    )
    return f"Delta table landed by pipeline {pipeline.id!r} from {subscription}, exactly once per record."


def sink_specs(pipeline: PipelineConfig, target: Target) -> list[AssetSpec]:
    """The sink table and its dead-letter table; both carry the target's automation condition, since one run
    materializes them together.
    """
    pipeline_id, translator = pipeline.id, target.translator
    freshness = (
        FreshnessPolicy.time_window(fail_window=timedelta(minutes=pipeline.freshness_minutes))
        if pipeline.freshness_minutes is not None
        else None
    )
    sink = table_uri(pipeline.sink.path)
    dead_letter = table_uri(pipeline.sink.resolved_dead_letter_path)
    return [
        AssetSpec(
            key=translator.asset_key(pipeline_id),
            **translator.table_attributes(),
            description=_describe(pipeline),
            kinds=set(translator.kinds),
            deps=stream_keys(pipeline, translator),
            freshness_policy=freshness,
            automation_condition=target.automation_condition,
            metadata={
                "dagster/uri": MetadataValue.text(sink),
                "dagster/table_name": MetadataValue.text(f"delta.`{pipeline.sink.path}`"),
                "state_path": MetadataValue.path(str(pipeline.resolved_state_path)),
                "pipeline_id": MetadataValue.text(pipeline_id),
            },
        ),
        AssetSpec(
            key=translator.dead_letter_asset_key(pipeline_id),
            **translator.table_attributes(),
            description=f"Records of pipeline {pipeline_id!r} that could not be decoded, with the raw bytes and the "
            "reason, written by the same run before the sink.",
            kinds={"delta"},
            deps=stream_keys(pipeline, translator),
            automation_condition=target.automation_condition,
            metadata={
                "dagster/uri": MetadataValue.text(dead_letter),
                "dagster/table_name": MetadataValue.text(f"delta.`{pipeline.sink.resolved_dead_letter_path}`"),
                "pipeline_id": MetadataValue.text(pipeline_id),
            },
        ),
    ]


def _stream_partitions(pipeline: PipelineConfig) -> DynamicPartitionsDefinition:
    return DynamicPartitionsDefinition(name=stream_partitions_name(pipeline.id))


def stream_tables_spec(pipeline: PipelineConfig, translator: DynamicKafkaTranslator) -> AssetSpec | None:
    """For a pipeline with a table per stream: its stream tables, one dynamic partition per stream (None otherwise).

    Materialized by the incremental run (:func:`log_stream_tables`), which adds the partition of a stream whose
    table it created; so a new stream shows as a new partition without reloading the definitions.
    """
    if not pipeline.sink.per_stream:
        return None
    return AssetSpec(
        key=translator.stream_tables_asset_key(pipeline.id),
        **translator.table_attributes(),
        description=f"The Delta tables of pipeline {pipeline.id!r}, one per stream (partition = stream id) at "
        f"{pipeline.sink.path}, each written with its own transaction per run.",
        kinds={"kafka", "delta"},
        deps=[translator.asset_key(pipeline.id)],
        partitions_def=_stream_partitions(pipeline),
        metadata={
            "pipeline_id": MetadataValue.text(pipeline.id),
            "template": MetadataValue.text(str(pipeline.sink.path)),
        },
    )


def log_stream_tables(
    context: AssetExecutionContext, pipeline: PipelineConfig, summary: RunSummary, translator: DynamicKafkaTranslator
) -> None:
    """One materialization per stream table the run wrote, adding the partitions of streams new to Dagster."""
    if not summary.stream_tables:
        return
    partitions = stream_partitions_name(pipeline.id)
    known = set(context.instance.get_dynamic_partitions(partitions))
    new = [t.stream_id for t in summary.stream_tables if t.stream_id not in known]
    if new:
        context.instance.add_dynamic_partitions(partitions, new)
    for table in summary.stream_tables:
        metadata: dict[str, MetadataValue] = {
            "dagster/uri": MetadataValue.text(table_uri(pipeline.for_stream(table.stream_id).sink.path)),
            "run_seq": MetadataValue.int(summary.run_seq),
            "records": MetadataValue.int(table.records),
            "dead_letters": MetadataValue.int(table.dead_letters),
        }
        if table.sink_version is not None:
            metadata["delta_version"] = MetadataValue.int(table.sink_version)
        context.log_event(
            AssetMaterialization(
                asset_key=translator.stream_tables_asset_key(pipeline.id), partition=table.stream_id, metadata=metadata
            )
        )


def build_sink_asset(pipeline: PipelineConfig, target: Target) -> AssetsDefinition:
    """The sink and dead-letter tables; one materialization is one incremental run."""
    pipeline_id, translator = pipeline.id, target.translator
    sink_key, dead_letter_key = translator.asset_key(pipeline_id), translator.dead_letter_asset_key(pipeline_id)

    @multi_asset(
        name=f"{dagster_name(pipeline_id)}_incremental_run",
        specs=sink_specs(pipeline, target),
        pool=translator.pool_name(pipeline_id),
        retry_policy=target.retry_policy,
    )
    def incremental_run(
        context: AssetExecutionContext, dynamic_kafka: DynamicKafkaResource
    ) -> Iterator[MaterializeResult[Any]]:
        face = dynamic_kafka.pipeline(target.config_path, pipeline_id)
        with dagster_errors(pipeline_id, target.retry_policy), reporting_progress(every(context.log.info, 10)):
            summary = face.run()
        for finding in summary.warnings:
            context.log.warning(f"{finding.kind}: {finding.message}")
        if summary.recovered_run_seq is not None:
            context.log.warning(f"finished run {summary.recovered_run_seq}, left planned by an earlier crash")
        context.log.info(
            f"run {summary.run_seq} {summary.status}: {summary.records} records, {summary.bytes} bytes, "
            f"lag after {summary.lag_after}{' (capped: catching up next)' if summary.capped else ''}"
        )
        metadata = summary_metadata(summary)
        try:
            metadata.update(status_metadata(summary, face.status()))
        except DynamicKafkaError as e:
            # The run is committed; offsets and lag are a report, so a failure to read them is only a warning.
            context.log.warning(f"offsets and lag not reported: {e}")
        log_stream_tables(context, pipeline, summary, translator)
        sink = face.sink_info()
        metadata.update(table_metadata(table_uri(pipeline.sink.path), sink))
        yield MaterializeResult(
            asset_key=sink_key,
            metadata=metadata,
            # The Delta version is the table's data version: an empty run leaves it, so it does not look new.
            data_version=DataVersion(str(sink.version)) if sink is not None else None,
        )
        dead = face.dead_letter_info()
        yield MaterializeResult(
            asset_key=dead_letter_key,
            metadata={
                "dead_letters": MetadataValue.int(summary.dead_letters),
                "run_seq": MetadataValue.int(summary.run_seq),
                **table_metadata(table_uri(pipeline.sink.resolved_dead_letter_path), dead),
            },
            data_version=DataVersion(str(dead.version)) if dead is not None else None,
        )

    return incremental_run


def build_checks(pipeline: PipelineConfig, target: Target) -> AssetChecksDefinition:
    """The sink's checks: lag (WARN), data loss (ERROR), dead letters (WARN), completeness (ERROR), from one status
    report.
    """
    pipeline_id = pipeline.id
    key = target.translator.asset_key(pipeline_id)
    limit = pipeline.max_lag_records
    specs = [
        AssetCheckSpec(
            LAG_CHECK_NAME,
            asset=key,
            description=f"Pending records (broker latest minus committed offsets) at most {limit}."
            if limit is not None
            else "Reports the pending records (no max_lag_records configured, so it always passes).",
        ),
        AssetCheckSpec(
            DATA_LOSS_CHECK_NAME,
            asset=key,
            description="The last run skipped no lost records (deleted by retention before they were read).",
        ),
        AssetCheckSpec(
            DEAD_LETTER_CHECK_NAME,
            asset=key,
            description=f"The last run sent at most {pipeline.max_dead_letters} record(s) to the dead-letter table.",
        ),
        AssetCheckSpec(
            COMPLETENESS_CHECK_NAME,
            asset=key,
            description="Per planned range, the records the last run read are the rows it landed (sink and dead "
            "letters) plus those landed before; offsets without a record (transaction markers, aborted or "
            "compacted records) are reported as skipped by Kafka.",
        ),
    ]

    @multi_asset_check(name=f"{dagster_name(pipeline_id)}_checks", specs=specs)
    def checks(context: AssetCheckExecutionContext, dynamic_kafka: DynamicKafkaResource) -> Iterator[AssetCheckResult]:
        with dagster_errors(pipeline_id):
            status = dynamic_kafka.pipeline(target.config_path, pipeline_id).status()
        yield from _status_results(pipeline, key, status)
        yield _result(COMPLETENESS_CHECK_NAME, key, completeness_verdict(status), completeness_metadata(status))

    return checks


def build_table_checks(pipeline: PipelineConfig, target: Target) -> tuple[AssetChecksDefinition, AssetJob] | None:
    """For a pipeline with a table per stream: the checks of each stream's table (``lag``, ``data_loss``,
    ``dead_letters`` on the stream tables' asset, one evaluation per partition) and the job evaluating them; None
    otherwise.
    """
    if not pipeline.sink.per_stream:
        return None
    with warnings.catch_warnings():
        # Partitioned asset checks are marked preview in Dagster 1.13; its warning would print on every load.
        warnings.simplefilter("ignore", PreviewWarning)
        return _table_checks(pipeline, target)


def _table_checks(pipeline: PipelineConfig, target: Target) -> tuple[AssetChecksDefinition, AssetJob]:
    pipeline_id = pipeline.id
    key = target.translator.stream_tables_asset_key(pipeline_id)
    limit = pipeline.max_lag_records
    partitions = _stream_partitions(pipeline)
    specs = [
        AssetCheckSpec(
            LAG_CHECK_NAME,
            asset=key,
            partitions_def=partitions,
            description=f"Pending records of the stream's partitions at most {limit}."
            if limit is not None
            else "Reports the stream's pending records (no max_lag_records configured, so it always passes).",
        ),
        AssetCheckSpec(
            DATA_LOSS_CHECK_NAME,
            asset=key,
            partitions_def=partitions,
            description="The last run skipped no lost records of the stream's topics.",
        ),
        AssetCheckSpec(
            DEAD_LETTER_CHECK_NAME,
            asset=key,
            partitions_def=partitions,
            description=f"The last run sent at most {pipeline.max_dead_letters} record(s) of the stream to its "
            "dead-letter table.",
        ),
    ]

    @multi_asset_check(name=f"{dagster_name(pipeline_id)}_stream_table_checks", specs=specs)
    def table_checks(
        context: AssetCheckExecutionContext, dynamic_kafka: DynamicKafkaResource
    ) -> Iterator[AssetCheckResult]:
        if not context.has_partition_key:
            raise Failure(
                description=f"the checks of {pipeline_id!r}'s stream tables are evaluated per stream, and this run "
                "names none: launch it for one partition of the asset, or with the tag dagster/partition=<stream id>."
            )
        stream = context.partition_key
        with dagster_errors(pipeline_id):
            status = dynamic_kafka.pipeline(target.config_path, pipeline_id).status().of_table(stream)
        yield from _status_results(pipeline, key, status)

    job = define_asset_job(
        name=table_checks_job_name(pipeline_id),
        selection=AssetSelection.checks_for_assets(key),
        # A job of checks alone takes no partitions definition (Dagster derives it from selected assets): the
        # stream is the run's `dagster/partition` tag, as a launch for one partition of the asset sets it.
        description=f"Evaluates the checks of one stream's table of {pipeline_id!r} against the brokers between "
        "runs (lag, data loss, dead letters); launch it with the tag dagster/partition=<stream id>.",
        tags={KIND_TAG: "health"},
        executor_def=in_process_executor,
    )
    return table_checks, job


def _status_results(pipeline: PipelineConfig, key: AssetKey, status: PipelineStatus) -> Iterator[AssetCheckResult]:
    """The ``lag``, ``data_loss`` and ``dead_letters`` results of ``key`` from one status report (the sink's, or one
    stream table's).
    """
    limit = pipeline.max_lag_records
    lag_metadata = _lag_metadata(status)
    if limit is not None:
        lag_metadata["max_lag_records"] = MetadataValue.int(limit)
    yield _result(LAG_CHECK_NAME, key, lag_limit_verdict(status, limit), lag_metadata)
    loss = data_loss_verdict(status)
    lost = MetadataValue.json([lost.model_dump() for lost in loss.lost_ranges])
    yield _result(DATA_LOSS_CHECK_NAME, key, loss, {"data_loss_ranges": lost})
    dead = dead_letter_verdict(status, pipeline.max_dead_letters)
    count = status.last_run.dead_letters if status.last_run else 0
    yield _result(DEAD_LETTER_CHECK_NAME, key, dead, {"dead_letters": MetadataValue.int(count)})


def _lag_metadata(status: PipelineStatus) -> dict[str, MetadataValue]:
    metadata: dict[str, MetadataValue] = {
        "total_lag": MetadataValue.int(status.total_lag),
        "partitions": MetadataValue.int(len(status.partitions)),
    }
    if status.unreachable_clusters:
        metadata["unreachable_clusters"] = MetadataValue.text(", ".join(status.unreachable_clusters))
    if status.lag_unknown_clusters:
        metadata["lag_unknown_clusters"] = MetadataValue.text(", ".join(status.lag_unknown_clusters))
    return metadata


def _result(name: str, key: Any, verdict: HealthVerdict, metadata: dict[str, MetadataValue]) -> AssetCheckResult:
    return AssetCheckResult(
        check_name=name,
        asset_key=key,
        passed=verdict.passed,
        severity=AssetCheckSeverity.ERROR if verdict.severity == "error" else AssetCheckSeverity.WARN,
        description=verdict.description,
        metadata=metadata,
    )
