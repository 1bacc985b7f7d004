"""Acceptance tests of the "Dynamic metadata" issue, part two: metadata that points somewhere unexpected (another
address of the same brokers, a recreated topic, a dead cluster, nothing at all) and a failing metadata service.

A failed run must write nothing: the sink keeps its rows and the state its last committed run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from devtools.local_kafka import ClusterEndpoint
from devtools.testing.kafka import create_topic, produce, wait_for
from dynamic_kafka._toolchain.process import free_port
from dynamic_kafka.config.loader import load_project_config
from dynamic_kafka.errors import ClusterUnreachableError, MetadataServiceError, TopicRecreatedError
from dynamic_kafka.metadata.memory import InMemoryMetadataService
from dynamic_kafka.metadata.models import ClusterMetadata, KafkaStream
from dynamic_kafka.protocol.context import PipelineContext
from dynamic_kafka.protocol.run import PipelineRunner
from tests.support.metadata_changes import finding_ranges, harness, numbered, orders_stream, positions, rows, state_rows

if TYPE_CHECKING:
    from pathlib import Path

    from devtools.testing.pipeline import PipelineHarness

pytestmark = pytest.mark.integration

Clusters = dict[str, ClusterEndpoint]


def last_run_seq(h: PipelineHarness) -> int | None:
    last = h.runner().store.load().last_run
    return None if last is None else last.run_seq


def other_address(bootstrap: str) -> str:
    """The same broker through the other loopback name ("127.0.0.1:P" <-> "localhost:P")."""
    host, _, port = bootstrap.rpartition(":")
    if host not in {"127.0.0.1", "localhost"} or "," in bootstrap:
        pytest.skip(f"needs a single loopback broker address to rename, got {bootstrap!r}")
    return f"{'localhost' if host == '127.0.0.1' else '127.0.0.1'}:{port}"


def test_changed_bootstrap_servers_of_a_cluster_keep_its_offsets(
    kafka_clusters: Clusters, spark: Any, tmp_path: Path
) -> None:
    east = kafka_clusters["east"].bootstrap_servers
    renamed = other_address(east)
    h, topics = orders_stream(tmp_path, kafka_clusters, spark, {"east": 2})
    topic = topics["east"]
    expected = rows("east", topic, produce(east, topic, numbered(range(6), partitions=2)))
    assert h.face().run().records == 6

    for step, bootstrap in enumerate((renamed, f"{renamed},{east}"), start=1):
        h.set_cluster("east", bootstrap_servers=bootstrap)
        more = produce(east, topic, numbered(range(6 * step, 6 * step + 6), partitions=2))
        expected += rows("east", topic, more)

        summary = h.face().run()

        assert summary.records == 6, f"only the records produced since the last run, with {bootstrap}"
        assert h.sink_rows() == sorted(expected)
        assert {k: (p.next_offset, p.bootstrap_servers) for k, p in state_rows(h).items()} == {
            ("east", topic, partition): (3 * (step + 1), bootstrap) for partition in (0, 1)
        }


def recreate_topic(bootstrap: str, topic: str) -> None:
    """Deletes ``topic``, waits until the cluster no longer lists it, and creates it again (empty)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic], operation_timeout=30)[topic].result(timeout=30)
    wait_for(lambda: topic not in admin.list_topics(timeout=10).topics, what=f"{topic} to be deleted")

    def created() -> bool:
        try:
            create_topic(bootstrap, topic, 1)
        except KafkaException as e:
            # The controller may still be finishing the deletion.
            if e.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                return False
            raise
        return True

    wait_for(created, what=f"{topic} to be created again")


def test_recreated_topic_fails_the_run_unless_reset_reads_it_from_earliest(
    kafka_clusters: Clusters, spark: Any, tmp_path: Path
) -> None:
    east = kafka_clusters["east"].bootstrap_servers
    h, topics = orders_stream(tmp_path, kafka_clusters, spark, {"east": 1})
    topic = topics["east"]
    old = rows("east", topic, produce(east, topic, numbered(range(5))))
    assert h.face().run().records == 5
    old_topic_id = state_rows(h)[("east", topic, 0)].topic_id

    recreate_topic(east, topic)
    new = rows("east", topic, produce(east, topic, numbered(range(100, 103))))

    with pytest.raises(TopicRecreatedError) as failed:
        h.face().run()
    assert (failed.value.cluster_id, failed.value.topic) == ("east", topic)
    assert topic in str(failed.value)
    assert h.sink_rows() == sorted(old)
    assert last_run_seq(h) == 1
    assert positions(h) == {("east", topic, 0): ("active", 5)}

    h.configure(on_topic_recreated="reset")
    reset = h.face().run()

    assert reset.records == 3
    assert finding_ranges(reset.findings, "topic_recreated") == {("east", topic, -1, None, None)}
    assert h.sink_rows() == sorted(old + new)
    after = state_rows(h)[("east", topic, 0)]
    assert (after.next_offset, after.status) == (3, "active")
    assert after.topic_id not in {None, old_topic_id}


def test_unreachable_active_cluster_fails_the_run_or_is_skipped_with_its_offsets_kept(
    kafka_clusters: Clusters, spark: Any, tmp_path: Path
) -> None:
    east, west = kafka_clusters["east"].bootstrap_servers, kafka_clusters["west"].bootstrap_servers
    h, topics = orders_stream(tmp_path, kafka_clusters, spark, {"east": 1, "west": 1})
    t_east, t_west = topics["east"], topics["west"]
    expected = rows("east", t_east, produce(east, t_east, numbered(range(4))))
    expected += rows("west", t_west, produce(west, t_west, numbered(range(4))))
    assert h.face().run().records == 8
    west_before = positions(h, "west")

    # Nothing listens on a port just found free: the metadata now sends "west" to a dead address, given up on after
    # 3 s instead of the default 10 s.
    h.set_cluster("west", bootstrap_servers=f"127.0.0.1:{free_port()}")
    h.configure(kafka_timeout_seconds=3)
    more_east = rows("east", t_east, produce(east, t_east, numbered(range(4, 9))))
    produce(west, t_west, numbered(range(4, 9)))

    with pytest.raises(ClusterUnreachableError) as failed:
        h.face().run()
    assert failed.value.cluster_id == "west"
    assert h.sink_rows() == sorted(expected)
    assert last_run_seq(h) == 1

    h.configure(skip_unreachable_clusters=True)
    skipping = h.face().run()

    assert skipping.skipped_clusters == ("west",)
    assert finding_ranges(skipping.warnings, "cluster_skipped") == {("west", "", -1, None, None)}
    assert {(t.cluster_id, t.topic): t.records for t in skipping.topics} == {("east", t_east): 5}
    assert h.sink_rows() == sorted(expected + more_east)
    assert positions(h, "west") == west_before == {("west", t_west, 0): ("active", 4)}
    assert positions(h, "east") == {("east", t_east, 0): ("active", 9)}


@pytest.mark.parametrize(
    ("subscription", "streams"),
    [
        ({"streams": None, "stream_pattern": "orders-.*"}, {}),
        ({"streams": ["orders"]}, {"orders": {}}),
    ],
    ids=["pattern_matching_no_stream", "stream_on_no_cluster"],
)
def test_metadata_resolving_to_nothing_is_a_successful_empty_run(
    kafka_clusters: Clusters,
    tmp_path: Path,
    subscription: dict[str, Any],
    streams: dict[str, dict[str, list[str]]],
) -> None:
    h = harness(tmp_path, kafka_clusters, spark=None, **subscription)
    h.set_streams(streams)

    summary = h.face().run()

    assert summary.status == "empty"
    assert not summary.spark_started
    assert (summary.records, summary.partitions) == (0, 0)
    assert [f.kind for f in summary.warnings] == ["empty_metadata"]
    assert h.sink_rows() == []
    assert last_run_seq(h) == 1
    assert positions(h) == {}


def test_failing_metadata_service_fails_after_its_retries_and_writes_nothing(
    kafka_clusters: Clusters, spark: Any, tmp_path: Path
) -> None:
    east = kafka_clusters["east"].bootstrap_servers
    attempts = 3
    retries = {"attempts": attempts, "backoff_seconds": 0.01}
    h, topics = orders_stream(tmp_path, kafka_clusters, spark, {"east": 1}, metadata_retries=retries)
    topic = topics["east"]
    cluster = ClusterMetadata(cluster_id="east", bootstrap_servers=east, topics=frozenset({topic}))
    service = InMemoryMetadataService([KafkaStream(stream_id="orders", clusters={"east": cluster})])
    context = PipelineContext(load_project_config(h.config_path), "p", metadata_service=service, spark=lambda: spark)
    runner = PipelineRunner(context)
    produced = rows("east", topic, produce(east, topic, numbered(range(5))))

    service.fail_next(attempts)
    with pytest.raises(MetadataServiceError):
        runner.run()
    assert h.sink_rows() == []
    assert runner.store.load().table_version is None, "no state was written"

    service.fail_next(attempts - 1)
    summary = runner.run()

    assert (summary.run_seq, summary.records) == (1, 5)
    assert h.sink_rows() == sorted(produced)
