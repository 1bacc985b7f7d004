"""Per pipeline with ``backfill``: the sink's time windows as a partitioned asset, backfilled in single runs.

Each partition is a window ``[start, end)`` of record timestamps (hourly or daily, UTC). With
``BackfillPolicy.single_run()`` a backfill of N partitions is ONE Dagster run: a contiguous range of partitions is
one window for the library's backfill (one plan, one Spark job, one MERGE); partitions that are not contiguous are
one window per contiguous block, all in the same run and the same Spark session. Dagster records a materialization
per partition, so the asset's partition view shows which windows are filled. A backfill never moves the
incremental offsets.
"""

# No `from __future__ import annotations`: Dagster reads the decorated functions' annotations at runtime.

import warnings
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from dagster import (
    AssetExecutionContext,
    AssetsDefinition,
    BackfillPolicy,
    BetaWarning,
    MaterializeResult,
    MetadataValue,
    TimeWindow,
    TimeWindowPartitionsDefinition,
    asset,
)

from dynamic_kafka import PipelineConfig, RunSummary, every, reporting_progress
from dynamic_kafka.dagster.errors import dagster_errors
from dynamic_kafka.dagster.metadata import summary_metadata, table_metadata, table_uri
from dynamic_kafka.dagster.partitions import backfill_partitions
from dynamic_kafka.dagster.resources import DynamicKafkaResource
from dynamic_kafka.dagster.streams import stream_keys
from dynamic_kafka.dagster.target import Target


def contiguous_windows(windows: Sequence[TimeWindow]) -> list[tuple[datetime, datetime]]:
    """Partition windows merged into ``[start, end)`` blocks: adjacent windows join, a gap starts a new block.

    Example:
        >>> from datetime import UTC
        >>> h = [datetime(2026, 1, 1, i, tzinfo=UTC) for i in range(6)]
        >>> [(a.hour, b.hour) for a, b in contiguous_windows([TimeWindow(h[0], h[1]), TimeWindow(h[1], h[2]),
        ...                                                   TimeWindow(h[4], h[5])])]
        [(0, 2), (4, 5)]
    """
    blocks: list[tuple[datetime, datetime]] = []
    for window in sorted(windows, key=lambda w: w.start):
        if blocks and blocks[-1][1] >= window.start:
            blocks[-1] = (blocks[-1][0], max(blocks[-1][1], window.end))
        else:
            blocks.append((window.start, window.end))
    return blocks


def build_backfill_asset(pipeline: PipelineConfig, target: Target) -> AssetsDefinition | None:
    """The partitioned backfill asset, or None when the pipeline has no ``backfill`` config."""
    if pipeline.orchestration.backfill is None:
        return None
    partitions = backfill_partitions(pipeline.orchestration.backfill)

    with warnings.catch_warnings():
        # BackfillPolicy on @asset is marked beta in Dagster 1.13; its warning would print on every load.
        warnings.simplefilter("ignore", BetaWarning)
        return _backfill_asset(pipeline, partitions, target)


def _backfill_asset(
    pipeline: PipelineConfig, partitions: TimeWindowPartitionsDefinition, target: Target
) -> AssetsDefinition:
    pipeline_id, translator = pipeline.id, target.translator
    assert pipeline.orchestration.backfill is not None
    granularity = pipeline.orchestration.backfill.granularity

    @asset(
        key=translator.backfill_asset_key(pipeline_id),
        **translator.table_attributes(),
        description=f"{granularity.capitalize()} windows of record timestamps merged into "
        f"the sink of {pipeline_id!r} by backfills (without duplicates, without moving the incremental offsets). "
        "A backfill of any number of windows is one run.",
        kinds=set(translator.kinds),
        deps=stream_keys(pipeline, translator),
        partitions_def=partitions,
        backfill_policy=BackfillPolicy.single_run(),
        pool=translator.pool_name(pipeline_id),
        retry_policy=target.retry_policy,
        metadata={"dagster/uri": MetadataValue.text(table_uri(pipeline.sink.path))},
    )
    def backfill_windows(context: AssetExecutionContext, dynamic_kafka: DynamicKafkaResource) -> MaterializeResult[Any]:
        keys = context.partition_keys
        blocks = contiguous_windows([partitions.time_window_for_partition_key(k) for k in keys])
        # One object: one Spark session for every block.
        face = dynamic_kafka.pipeline(target.config_path, pipeline_id)
        summaries = []
        for start, end in blocks:
            with dagster_errors(pipeline_id, target.retry_policy), reporting_progress(every(context.log.info, 10)):
                summary = face.backfill(start, end)
            for finding in summary.warnings:
                context.log.warning(f"{finding.kind}: {finding.message}")
            context.log.info(
                f"backfill [{start}, {end}): {summary.status}, {summary.records} records read, "
                f"{summary.sink_records} rows inserted"
            )
            summaries.append(summary)
        metadata = summary_metadata(RunSummary.combined(summaries))
        # A backfill has no run_seq of its own and leaves the incremental lag unchanged.
        for name in ("run_seq", "lag_after", "capped"):
            metadata.pop(name, None)
        metadata["window_start"] = MetadataValue.timestamp(blocks[0][0])
        metadata["window_end"] = MetadataValue.timestamp(blocks[-1][1])
        metadata["windows"] = MetadataValue.int(len(blocks))
        metadata["partition"] = MetadataValue.text(keys[0] if len(keys) == 1 else f"{keys[0]}...{keys[-1]}")
        metadata["partitions"] = MetadataValue.int(len(keys))
        metadata.update(table_metadata(table_uri(pipeline.sink.path), face.sink_info()))
        return MaterializeResult(metadata=metadata)

    return backfill_windows
