"""Issue 11 on a real broker: a truncation refilled past the committed offset before the next run is detected by
the leader epoch recorded with the offset (KIP-320), and a clean broker restart is not flagged.

A dedicated one-node KRaft cluster (the shared session clusters are never restarted). What the test relies on was
checked on Kafka 4.1: a broker restart bumps every partition's leader epoch (ListOffsets answers it), and a
partition whose log directory was deleted while the broker was down comes back empty under a new epoch, with the
old epoch ending at offset 0 (OffsetForLeaderEpoch): the same divergence an unclean leader election leaves.
"""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from devtools.local_kafka import start_clusters, stop_clusters
from devtools.testing.clusters import distinct_free_ports
from devtools.testing.kafka import Record, create_topic, produce, unique_name
from devtools.testing.pipeline import PipelineHarness, Row
from dynamic_kafka.errors import DataLossError
from dynamic_kafka.model.plan import LostRange
from dynamic_kafka.model.plan import TopicPartition as PlanPartition

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence
    from pathlib import Path

    from devtools.local_kafka import LocalCluster

pytestmark = pytest.mark.integration


class Broker:
    """The dedicated cluster, restartable; its data folder kept across restarts."""

    def __init__(self, base_dir: Path) -> None:
        self.base_dir = base_dir
        self.port = distinct_free_ports(1)[0]
        self.cluster: LocalCluster = start_clusters([("epochs", self.port)], base_dir=base_dir)["epochs"]

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap_servers

    def restart(self, *, delete: Sequence[str] = ()) -> None:
        """Stops the broker cleanly, deletes the log directory of partition 0 of each topic in ``delete`` (its
        records and its leader-epoch cache), and starts it again on the same data folder and port."""
        stop_clusters(["epochs"], base_dir=self.base_dir)
        for topic in delete:
            shutil.rmtree(self.cluster.cluster_dir / "data" / f"{topic}-0")
        self.cluster = start_clusters([("epochs", self.port)], base_dir=self.base_dir)["epochs"]

    def latest(self, topic: str) -> tuple[int, int | None]:
        """Partition 0's latest offset and the leader epoch ListOffsets answers with it."""
        admin = AdminClient({"bootstrap.servers": self.bootstrap})  # referenced until its future is done
        (future,) = admin.list_offsets({TopicPartition(topic, 0): OffsetSpec.latest()}, request_timeout=30).values()
        answer = future.result(timeout=60)
        return answer.offset, answer.leader_epoch


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    base_dir = tmp_path_factory.mktemp("local-kafka-epochs")
    started = Broker(base_dir)
    try:
        yield started
    finally:
        stop_clusters(base_dir=base_dir, purge=True)


def numbered(tag: str, count: int) -> list[Record]:
    return [Record(value=f"{tag}-{i}".encode(), partition=0) for i in range(count)]


def sink(topic: str, records: list[Record]) -> list[Row]:
    return sorted(("epochs", topic, 0, r.offset, r.value) for r in records if r.offset is not None)


def recorded_epoch(harness: PipelineHarness, topic: str) -> int | None:
    key = PlanPartition(cluster_id="epochs", topic=topic, partition=0)
    return harness.runner().store.load().partitions[key].leader_epoch


def test_a_truncation_refilled_past_the_committed_offset_fails_or_is_read_and_a_clean_restart_is_not_flagged(
    broker: Broker, spark: Any, tmp_path: Path
) -> None:
    """One restart serves both cases: ``lost`` loses its log (what an unclean election does), ``kept`` only gets a
    new leader epoch (a clean restart); one pipeline reads both."""
    lost, kept = unique_name("epochs-lost"), unique_name("epochs-kept")
    for topic in (lost, kept):
        create_topic(broker.bootstrap, topic, 1)
    harness = PipelineHarness(tmp_path, clusters={"epochs": broker.bootstrap}, spark=lambda: spark, on_data_loss="fail")
    harness.set_streams({"orders": {"epochs": [lost, kept]}})
    first = {t: produce(broker.bootstrap, t, numbered("a", 5)) for t in (lost, kept)}
    harness.face().run()
    assert harness.sink_rows() == sorted(sink(lost, first[lost]) + sink(kept, first[kept]))
    epochs_before = {t: broker.latest(t)[1] for t in (lost, kept)}
    assert None not in epochs_before.values()
    assert {t: recorded_epoch(harness, t) for t in (lost, kept)} == epochs_before

    # The log of ``lost`` goes below the committed offset 5 and is refilled to 9, beyond 5, before the next run:
    # latest alone (9 >= 5) shows nothing wrong. ``kept`` keeps its records and gets two more.
    broker.restart(delete=[lost])
    assert broker.latest(lost)[0] == 0
    epochs_after = {t: broker.latest(t)[1] for t in (lost, kept)}
    assert all(epochs_after[t] not in (None, epochs_before[t]) for t in (lost, kept))
    refill = produce(broker.bootstrap, lost, numbered("c", 9))
    more = produce(broker.bootstrap, kept, numbered("b", 2))

    rows_before = harness.sink_rows()
    with pytest.raises(DataLossError) as raised:
        harness.face().run()
    # Only the diverged log is named; the clean leader change of ``kept`` is checked and not flagged.
    assert raised.value.truncated == (
        LostRange(cluster_id="epochs", topic=lost, partition=0, from_offset=0, to_offset=5),
    )
    assert f"epochs/{lost}[0] offsets [0, 5)" in str(raised.value)
    assert harness.sink_rows() == rows_before

    harness.configure(on_data_loss="skip")
    refilled = harness.face().run()
    assert [(f.kind, f.topic, f.from_offset, f.to_offset) for f in refilled.warnings] == [("truncated", lost, 0, 5)]
    # Every record landed exactly once: the first five of ``lost`` at offsets 0..4, then the nine new ones at 0..8.
    assert harness.sink_rows() == sorted(
        sink(lost, first[lost]) + sink(lost, refill) + sink(kept, first[kept]) + sink(kept, more)
    )
    assert {t: recorded_epoch(harness, t) for t in (lost, kept)} == epochs_after
