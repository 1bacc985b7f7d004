"""The Kafka streams as external assets: Dagster does not materialize them, it shows where the tables' data comes
from (lineage: stream -> sink table, stream -> backfill windows).

A stream is named by its id (``kafka/<stream id>``), not by cluster and topic: which clusters hold it is the metadata
service's answer at run time, and loading the definitions contacts no service. Pipelines subscribed by
``stream_pattern`` have no stream assets (the ids matching the pattern are only known at run time).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dagster import AssetKey, AssetSpec

if TYPE_CHECKING:
    from collections.abc import Iterable

    from dynamic_kafka import PipelineConfig
    from dynamic_kafka.dagster.translator import DynamicKafkaTranslator


def stream_keys(pipeline: PipelineConfig, translator: DynamicKafkaTranslator) -> list[AssetKey]:
    """The asset keys of the streams a pipeline lists (none for a ``stream_pattern`` subscription)."""
    return [translator.stream_asset_key(s) for s in pipeline.streams or ()]


def stream_specs(pipelines: Iterable[PipelineConfig], translator: DynamicKafkaTranslator) -> list[AssetSpec]:
    """One external asset per stream id listed by any pipeline, with the pipelines that read it."""
    readers: dict[str, list[str]] = {}
    for pipeline in pipelines:
        for stream in pipeline.streams or ():
            readers.setdefault(stream, []).append(pipeline.id)
    return [
        AssetSpec(
            key=translator.stream_asset_key(stream),
            group_name=translator.stream_group_name,
            kinds={"kafka"},
            description=f"The logical Kafka stream {stream!r} (its clusters and topics come from the metadata "
            f"service); read by pipeline(s) {', '.join(ids)}.",
        )
        for stream, ids in sorted(readers.items())
    ]
