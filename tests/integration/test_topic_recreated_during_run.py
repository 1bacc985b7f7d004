"""Issue 24, item 10: a topic deleted and recreated between a run's plan and its read, on real brokers.

The run's plan names the old topic's id and offsets; its Spark read, by topic name, gets the new topic's records at
those offsets. They must never be committed under the old topic id: the run checks every topic's id after reading
and before each commit. ``fail`` stops the run with nothing of it committed; ``reset`` gives the run up, and the
next run reads the new topic from its earliest offset, so each of its records lands once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from devtools.testing.kafka import Record, delete_topics, produce, recreate_topic
from dynamic_kafka.errors import TopicRecreatedError
from dynamic_kafka.faults import acting_at
from tests.support.metadata_changes import numbered, orders_stream, rows

if TYPE_CHECKING:
    from pathlib import Path

    from devtools.local_kafka import ClusterEndpoint
    from devtools.testing.pipeline import PipelineHarness

pytestmark = pytest.mark.integration


def _planned_then_recreated(
    tmp_path: Path, kafka_clusters: dict[str, ClusterEndpoint], spark: Any, policy: str
) -> tuple[PipelineHarness, str, list[Record], list[Record], pytest.ExceptionInfo[TopicRecreatedError]]:
    """Run 1 lands records 0-3; run 2 plans records 4-7 (offsets 4-7 of the old topic), and before its read the
    topic is recreated and given records 10-19 (offsets 0-9, so 14-17 sit at the planned offsets)."""
    east = kafka_clusters["east"].bootstrap_servers
    h, topics = orders_stream(tmp_path, kafka_clusters, spark, {"east": 1}, on_topic_recreated=policy)
    topic = topics["east"]
    old = produce(east, topic, numbered(range(4)))
    assert h.runner().run().records == 4
    produce(east, topic, numbered(range(4, 8)))
    new: list[Record] = []

    def recreate() -> None:
        delete_topics(east, [topic])
        recreate_topic(east, topic, 1)
        new.extend(produce(east, topic, numbered(range(10, 20))))

    with acting_at("before_read", recreate), pytest.raises(TopicRecreatedError) as failure:
        h.runner().run()
    assert failure.value.topic == topic
    assert failure.value.cluster_id == "east"
    assert h.sink_rows() == sorted(rows("east", topic, old))  # nothing of run 2 landed
    return h, topic, old, new, failure


def test_fail_stops_the_run_with_nothing_committed(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> None:
    h, topic, _, _, failure = _planned_then_recreated(tmp_path, kafka_clusters, spark, "fail")
    assert not failure.value.retriable
    assert "on_topic_recreated: reset" in str(failure.value)
    state = h.runner().store.load()
    assert state.last_run is not None
    assert (state.last_run.run_seq, state.last_run.status) == (2, "planned")  # left for its recovery to refuse
    assert {(k.topic, p.next_offset) for k, p in state.partitions.items()} == {(topic, 4)}


def test_reset_gives_the_run_up_and_the_next_run_lands_the_new_topic_once(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> None:
    h, topic, old, new, failure = _planned_then_recreated(tmp_path, kafka_clusters, spark, "reset")
    assert failure.value.retriable
    state = h.runner().store.load()
    assert state.last_run is not None
    assert (state.last_run.run_seq, state.last_run.status) == (2, "abandoned")

    after = h.face().run()
    assert after.records == 10
    assert h.face().run().status == "empty"
    # The old topic's records 4-7 went with it; each of the new topic's records landed once.
    assert h.sink_rows() == sorted(rows("east", topic, old) + rows("east", topic, new))
