"""KafkaAdmin and the broker snapshot against real local Kafka clusters (the session fixtures of tests/conftest.py).

Every test uses its own topics (``prefix + uuid``) and waits for broker-side conditions with deadlines.
"""

from __future__ import annotations

import logging
import socket
import time
import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from devtools.testing.kafka import (
    Record,
    create_topic,
    delete_topics,
    produce,
    recreate_topic,
    unique_name,
    wait_for,
)
from dynamic_kafka import initializers as offsets
from dynamic_kafka.errors import ClusterUnreachableError, DynamicKafkaError, KafkaAuthenticationError
from dynamic_kafka.kafka import ClusterRequest, KafkaAdmin, take_broker_snapshot
from dynamic_kafka.kafka.client import CHUNK
from dynamic_kafka.kafka.epochs import CommittedPosition
from dynamic_kafka.metadata.models import ClusterMetadata

if TYPE_CHECKING:
    from collections.abc import Iterator

    from dynamic_kafka.model.snapshots import BrokerSnapshot, PartitionOffsets

pytestmark = pytest.mark.integration

BASE_TS = 1_700_000_000_000
NOW = datetime(2026, 1, 1, tzinfo=UTC)


# -- helpers -------------------------------------------------------------------------------------------------


def _records(*partitions_and_timestamps: tuple[int, int | None]) -> list[Record]:
    return [
        Record(value=f"v{i}".encode(), partition=p, timestamp_ms=ts)
        for i, (p, ts) in enumerate(partitions_and_timestamps)
    ]


def _leaders(admin: AdminClient, topics: list[str]) -> int:
    """How many partitions of ``topics`` have a leader."""
    described = admin.list_topics(timeout=30).topics
    return sum(1 for t in topics if t in described for p in described[t].partitions.values() if p.leader >= 0)


def _snapshot_or_none(request: ClusterRequest) -> BrokerSnapshot | None:
    try:
        return take_broker_snapshot([request], isolation_level="read_committed", now=NOW, timeout_s=60)
    except DynamicKafkaError as e:
        if not e.retriable:
            raise
        return None


def _cluster(cluster_id: str, bootstrap: str, **properties: str) -> ClusterMetadata:
    return ClusterMetadata(cluster_id=cluster_id, bootstrap_servers=bootstrap, properties=properties)


def _bounds(partitions: dict[int, PartitionOffsets]) -> dict[int, tuple[int, int]]:
    return {p: (o.earliest, o.latest) for p, o in partitions.items()}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def east(kafka_clusters: Any) -> str:
    return str(kafka_clusters["east"].bootstrap_servers)


@pytest.fixture
def west(kafka_clusters: Any) -> str:
    return str(kafka_clusters["west"].bootstrap_servers)


@pytest.fixture
def topic(east: str) -> Iterator[str]:
    name = unique_name("admin")
    create_topic(east, name, 3)
    yield name
    delete_topics(east, [name])


# -- describe / list -------------------------------------------------------------------------------------------


def test_describe_topics_ids_and_missing_topics(east: str, topic: str) -> None:
    missing = unique_name("missing")
    with KafkaAdmin(_cluster("east", east)) as admin:
        described = admin.describe_topics([topic, missing])
        assert topic in admin.list_topic_names()
        assert not any(name.startswith("__") for name in admin.list_topic_names())
    assert described[topic].exists
    assert described[topic].partitions == (0, 1, 2)
    topic_id = described[topic].topic_id
    # Kafka's own spelling: 22 characters of URL-safe base64.
    assert topic_id is not None
    assert len(topic_id) == 22
    assert set(topic_id) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    assert not described[missing].exists
    assert described[missing].topic_id is None
    assert described[missing].partitions == ()


def test_a_recreated_topic_gets_a_new_id(east: str) -> None:
    name = unique_name("recreated")
    create_topic(east, name, 1)
    with KafkaAdmin(_cluster("east", east)) as admin:
        first = admin.describe_topics([name])[name].topic_id
        delete_topics(east, [name])
        assert not admin.describe_topics([name])[name].exists
        recreate_topic(east, name, 2)
        second = admin.describe_topics([name])[name]
    delete_topics(east, [name])
    assert second.exists
    assert second.partitions == (0, 1)
    assert first is not None
    assert second.topic_id is not None
    assert second.topic_id != first


def test_earliest_and_latest_after_producing(east: str, topic: str) -> None:
    produce(east, topic, _records(*[(0, None)] * 5, *[(1, None)] * 2))
    parts = [(topic, p) for p in range(3)]
    with KafkaAdmin(_cluster("east", east)) as admin:
        assert admin.list_offsets(parts, "earliest") == {(topic, 0): 0, (topic, 1): 0, (topic, 2): 0}
        assert admin.list_offsets(parts, "latest") == {(topic, 0): 5, (topic, 1): 2, (topic, 2): 0}
        assert admin.list_offsets(parts, "latest", isolation_level="read_uncommitted") == {
            (topic, 0): 5,
            (topic, 1): 2,
            (topic, 2): 0,
        }


def test_delete_records_moves_earliest(east: str, topic: str) -> None:
    produce(east, topic, _records(*[(0, None)] * 6))
    # Keep the client referenced until its futures are done: a destroyed client never completes them.
    deleter = AdminClient({"bootstrap.servers": east})
    for future in deleter.delete_records([TopicPartition(topic, 0, 4)], operation_timeout=30).values():
        future.result(timeout=60)
    with KafkaAdmin(_cluster("east", east)) as admin:
        assert admin.list_offsets([(topic, 0)], "earliest") == {(topic, 0): 4}
        assert admin.list_offsets([(topic, 0)], "latest") == {(topic, 0): 6}


def test_latest_under_read_committed_is_the_last_stable_offset(east: str, topic: str) -> None:
    produce(east, topic, _records(*[(0, None)] * 3))
    producer = Producer({"bootstrap.servers": east, "transactional.id": unique_name("txn")})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(4):
        producer.produce(topic, value=f"t{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    part = (topic, 0)
    with KafkaAdmin(_cluster("east", east)) as admin:
        # The open transaction's records are written (high watermark 7) but not stable (LSO 3).
        assert admin.list_offsets([part], "latest", isolation_level="read_uncommitted") == {part: 7}
        assert admin.list_offsets([part], "latest", isolation_level="read_committed") == {part: 3}
        producer.commit_transaction(30)
        # The commit marker takes offset 7; the LSO moves past it once the coordinator has written it.
        wait_for(lambda: admin.list_offsets([part], "latest") == {part: 8}, what="the LSO after the commit")


def test_offsets_for_timestamps(east: str, topic: str) -> None:
    produce(east, topic, _records((0, BASE_TS + 1000), (0, BASE_TS + 2000), (0, BASE_TS + 3000), (1, BASE_TS + 500)))
    parts = [(topic, 0), (topic, 1), (topic, 2)]
    with KafkaAdmin(_cluster("east", east)) as admin:
        assert admin.list_offsets(parts, BASE_TS + 1000) == {(topic, 0): 0, (topic, 1): None, (topic, 2): None}
        assert admin.list_offsets(parts, BASE_TS + 1500) == {(topic, 0): 1, (topic, 1): None, (topic, 2): None}
        assert admin.list_offsets(parts, BASE_TS) == {(topic, 0): 0, (topic, 1): 0, (topic, 2): None}
        # After every record: no such offset.
        assert admin.list_offsets(parts, BASE_TS + 3001) == {(topic, 0): None, (topic, 1): None, (topic, 2): None}


def test_committed_offsets_and_commit_round_trip(east: str, topic: str) -> None:
    produce(east, topic, _records(*[(0, None)] * 5, *[(1, None)] * 5))
    group = unique_name("group")
    parts = [(topic, p) for p in range(3)]
    with KafkaAdmin(_cluster("east", east)) as admin:
        assert admin.committed_offsets(group, parts) == {(topic, 0): None, (topic, 1): None, (topic, 2): None}
        admin.commit_group_offsets(group, {(topic, 0): 4, (topic, 1): 2})
        assert admin.committed_offsets(group, parts) == {(topic, 0): 4, (topic, 1): 2, (topic, 2): None}
        admin.commit_group_offsets(group, {(topic, 0): 5})
        assert admin.committed_offsets(group, parts)[(topic, 0)] == 5


# -- the snapshot ----------------------------------------------------------------------------------------------


def test_snapshot_of_two_clusters_with_lookups(east: str, west: str) -> None:
    east_topic, west_topic = unique_name("snap-east"), unique_name("snap-west")
    create_topic(east, east_topic, 2)
    create_topic(west, west_topic, 1)
    try:
        produce(east, east_topic, _records((0, BASE_TS + 10), (0, BASE_TS + 20), (1, BASE_TS + 30)))
        produce(west, west_topic, _records(*[(0, BASE_TS + 10)] * 4))
        group = unique_name("group")
        with KafkaAdmin(_cluster("west", west)) as admin:
            admin.commit_group_offsets(group, {(west_topic, 0): 3})
        requests = [
            ClusterRequest(
                cluster=_cluster("east", east),
                topics=frozenset({east_topic, "no-such-topic"}),
                starting=offsets.timestamp(BASE_TS + 15),
                stopping=offsets.timestamp(BASE_TS + 25),
            ),
            ClusterRequest(
                cluster=_cluster("west", west), topics=frozenset({west_topic}), starting=offsets.committed(group)
            ),
        ]
        snap = take_broker_snapshot(requests, isolation_level="read_committed", now=NOW)
    finally:
        delete_topics(east, [east_topic])
        delete_topics(west, [west_topic])
    assert snap.taken_at == NOW
    e = snap.clusters["east"].topics
    assert _bounds(e[east_topic].partitions) == {0: (0, 2), 1: (0, 1)}
    # Each latest answer carries the partition's leader epoch (recorded with the committed offsets, issue 11).
    assert all(o.leader_epoch is not None and o.diverged_at is None for o in e[east_topic].partitions.values())
    assert e[east_topic].start_lookups == {0: 1, 1: 0}
    assert e[east_topic].stop_lookups == {0: None, 1: 0}
    assert not e["no-such-topic"].exists
    w = snap.clusters["west"].topics[west_topic]
    assert _bounds(w.partitions) == {0: (0, 4)}
    assert w.start_lookups == {0: 3}
    assert w.stop_lookups == {}


def test_snapshot_of_more_partitions_than_one_request_holds(east: str) -> None:
    """Offset lookups go out in requests of ``CHUNK`` partitions: a topic just past one request's worth gets every
    partition answered. (How long a snapshot of 10,000 partitions takes is benchmark 4, ``make bench``.)"""
    topic = unique_name("chunked")
    partitions = CHUNK + 3
    admin = AdminClient({"bootstrap.servers": east})
    admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=120)[topic].result(timeout=180)
    try:
        wait_for(lambda: _leaders(admin, [topic]) == partitions, timeout_s=300, what=f"leaders of {partitions}")
        produce(east, topic, _records((0, BASE_TS), (CHUNK + 2, BASE_TS + 5)))
        request = ClusterRequest(
            cluster=_cluster("east", east),
            topics=frozenset({topic}),
            starting=offsets.timestamp(BASE_TS + 1),
            stopping=offsets.latest(),
        )
        # The broker loads a fresh partition's index on its first lookup: a busy machine can take longer than one
        # snapshot's timeout for a thousand of them, so the first attempts may fail retriably.
        snap = wait_for(lambda: _snapshot_or_none(request), timeout_s=300, interval_s=1, what="a snapshot")
    finally:
        delete_topics(east, [topic])
    assert snap is not None
    found = snap.clusters["east"].topics[topic]
    assert len(found.partitions) == partitions
    assert _bounds({p: found.partitions[p] for p in (0, CHUNK + 2)}) == {0: (0, 1), CHUNK + 2: (0, 1)}
    assert found.start_lookups[0] is None
    assert found.start_lookups[CHUNK + 2] == 0


# -- failures --------------------------------------------------------------------------------------------------


def test_dead_port_is_unreachable_within_the_timeout(east: str) -> None:
    dead = f"127.0.0.1:{_free_port()}"
    started = time.monotonic()
    with pytest.raises(ClusterUnreachableError) as caught, KafkaAdmin(_cluster("gone", dead), timeout_s=2) as admin:
        admin.describe_topics(["orders"])
    elapsed = time.monotonic() - started
    assert elapsed < 2 + 1.5  # the timeout plus the deadline's grace
    assert not caught.value.retriable  # nothing listens there: a retry would find the same (fail fast)
    assert caught.value.cluster_id == "gone"
    assert dead in str(caught.value)

    live = ClusterRequest(cluster=_cluster("east", east), topics=frozenset({"no-such-topic"}))
    gone = ClusterRequest(cluster=_cluster("gone", dead), topics=frozenset({"orders"}), required=False)
    snap = take_broker_snapshot([live, gone], isolation_level="read_committed", now=NOW, timeout_s=2)
    assert snap.clusters["east"].reachable
    assert not snap.clusters["gone"].reachable
    assert dead in (snap.clusters["gone"].error or "")

    skipped = gone.model_copy(update={"required": True, "skip_unreachable": True})
    assert (
        not take_broker_snapshot([skipped], isolation_level="read_committed", now=NOW, timeout_s=2)
        .clusters["gone"]
        .reachable
    )
    with pytest.raises(ClusterUnreachableError):
        take_broker_snapshot(
            [gone.model_copy(update={"required": True})], isolation_level="read_committed", now=NOW, timeout_s=2
        )


def test_wrong_sasl_password_fails_fast_without_showing_it(
    sasl_cluster: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    wrong = f"wrong-{uuid.uuid4().hex}"
    monkeypatch.setenv("KA_IT_SASL_PASSWORD", wrong)
    cluster = _cluster(
        "secure",
        sasl_cluster.bootstrap_servers,
        **{
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": sasl_cluster.sasl_user,
            "sasl.password": "${env:KA_IT_SASL_PASSWORD}",
        },
    )
    started = time.monotonic()
    with (
        caplog.at_level(logging.DEBUG),
        pytest.raises(KafkaAuthenticationError) as caught,
        KafkaAdmin(cluster, timeout_s=20) as admin,
    ):
        admin.describe_topics(["orders"])
    assert time.monotonic() - started < 10  # detected from the error callback, not by timing out
    error = caught.value
    assert error.retriable is False
    assert error.cluster_id == "secure"
    assert sasl_cluster.bootstrap_servers in str(error)
    for text in [str(error), repr(error), repr(error.args), str(error.__cause__), caplog.text]:
        assert wrong not in text


def test_right_sasl_password_works(sasl_cluster: Any, sasl_password: str) -> None:
    cluster = _cluster(
        "secure",
        sasl_cluster.bootstrap_servers,
        **{
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": sasl_cluster.sasl_user,
            "sasl.password": sasl_password,
        },
    )
    with KafkaAdmin(cluster, timeout_s=20) as admin:
        assert not admin.describe_topics(["no-such-topic"])["no-such-topic"].exists


def _secure(sasl_cluster: Any, password: str) -> ClusterMetadata:
    return _cluster(
        "secure",
        sasl_cluster.bootstrap_servers,
        **{
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": sasl_cluster.sasl_user,
            "sasl.password": password,
        },
    )


def test_leader_epoch_check_uses_the_cluster_connection_over_sasl(
    sasl_cluster: Any, sasl_password: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 11's check runs through a consumer built from the cluster's connection settings like the admin client:
    over SASL it is answered (a position that checks out is no divergence, and no answer was missing), and a wrong
    password fails it fast without showing the password."""
    topic = unique_name("epoch-sasl")
    client = sasl_cluster.client_config(sasl_password)
    create_topic(client, topic, 1)
    produce(client, topic, [Record(value=b"x", partition=0) for _ in range(3)])
    with KafkaAdmin(_secure(sasl_cluster, sasl_password), timeout_s=30) as admin:
        latest = admin.offset_answers([(topic, 0)], {"latest": "latest"})["latest"][(topic, 0)]
        assert latest.offset == 3
        assert latest.leader_epoch is not None
        position = CommittedPosition(topic=topic, partition=0, next_offset=3, leader_epoch=latest.leader_epoch)
        with caplog.at_level(logging.DEBUG, logger="dynamic_kafka.kafka.client"):
            assert admin.diverged_offsets([position]) == {}
        assert "answer" not in caplog.text  # neither "no usable answer" nor "no answer in ..."

    wrong = f"wrong-{uuid.uuid4().hex}"
    with (
        pytest.raises(KafkaAuthenticationError) as caught,
        KafkaAdmin(_secure(sasl_cluster, wrong), timeout_s=20) as admin,
    ):
        admin.diverged_offsets([position])
    assert wrong not in str(caught.value)
