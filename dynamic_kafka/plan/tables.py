"""Which stream's table a partition lands in, with a table per stream: the one it first landed in, for good.

A split's table is its first stream (:attr:`~dynamic_kafka.model.plan.Split.stream_id`). From the metadata alone
that is the first subscribed stream listing the topic, which changes when a stream that sorts first starts listing
the topic, or the topic moves to another stream. Following that change would leave the partition's history in one
table and its new records in another, and every check by coordinates (a backfill's MERGE, the dedupe below a
frontier, realign, dead-letter replay) would look at the new table only. So a partition the state knows keeps the
stream it was committed under in front of its split's ``stream_ids`` (the state records a split's ``stream_ids`` as
planned, so the pin carries over from run to run); a partition no run committed yet that a backfill merged keeps the
table the backfill merged it into (recorded with its frontier); a new partition of a topic the state knows joins its
topic's table. Only a topic new to the state takes its first stream from the metadata.

A pipeline with one sink pins nothing (:func:`as_tables_take`): every partition lands in it, and a row's ``stream``
follows the metadata.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

    from dynamic_kafka.config.models import PipelineConfig
    from dynamic_kafka.model.plan import Split, TopicPartition
    from dynamic_kafka.model.snapshots import StateSnapshot


def as_tables_take(pipeline: PipelineConfig, splits: Iterable[Split], state: StateSnapshot) -> list[Split]:
    """``splits`` as the pipeline's tables take them: each led by the stream whose table its partition landed in
    (:func:`pinned_to_tables`), or as they are for one sink.
    """
    return pinned_to_tables(splits, state) if pipeline.sink.per_stream else list(splits)


def tables_of_partitions(pipeline: PipelineConfig, splits: Iterable[Split]) -> dict[TopicPartition, str] | None:
    """Per partition of ``splits``, the stream whose table it lands in (for the state to pin a partition no run
    committed yet to it, :func:`landed_tables`); None for one sink, which every partition lands in.
    """
    return {s.key: s.stream_id for s in splits} if pipeline.sink.per_stream else None


def pinned_to_tables(splits: Iterable[Split], state: StateSnapshot) -> list[Split]:
    """``splits``, each led by the stream whose table its partition landed in (see the module docstring)."""
    landed = landed_tables(state)
    by_topic: dict[tuple[str, str], str] = {}
    for key, stream in landed.items():
        topic = (key.cluster_id, key.topic)
        by_topic[topic] = min(by_topic.get(topic, stream), stream)
    pinned: list[Split] = []
    for split in splits:
        table = landed.get(split.key) or by_topic.get((split.cluster_id, split.topic))
        if table is None or table == split.stream_id:
            pinned.append(split)
            continue
        pinned.append(split.led_by(table))
    return pinned


def landed_tables(state: StateSnapshot) -> dict[TopicPartition, str]:
    """Per partition, the stream whose table it landed in: the stream its committed row names, else the one a
    backfill merged it into.
    """
    landed = dict(state.backfill_streams)
    landed.update({key: row.stream_ids[0] for key, row in state.partitions.items() if row.stream_ids})
    return landed
