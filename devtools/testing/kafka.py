"""Kafka helpers for tests: unique topic names, topic creation, producing exact records, waiting with a deadline.

Every function takes either bootstrap servers (``"127.0.0.1:19092"``) or a full confluent-kafka client config
(for SASL clusters, from :meth:`ClusterEndpoint.client_config`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

# librdkafka's own log lines (e.g. retries while a fresh broker elects coordinators) go here, not to stderr.
logger = logging.getLogger(__name__)

T = TypeVar("T")
Client = str | Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class Record:
    """One Kafka record. ``partition`` and ``timestamp_ms`` steer the produce; ``offset`` is set once written."""

    value: bytes | None
    key: bytes | None = None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp_ms: int | None = None
    partition: int | None = None
    offset: int | None = None


def unique_name(prefix: str = "t") -> str:
    """Return ``prefix`` plus a random suffix: a topic (or group, or table) name no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def client_config(client: Client) -> dict[str, Any]:
    """Return a confluent-kafka config from bootstrap servers or an existing config (copied)."""
    return {"bootstrap.servers": client} if isinstance(client, str) else dict(client)


def wait_for(condition: Callable[[], T], *, timeout_s: float = 30.0, interval_s: float = 0.2, what: str) -> T:
    """Poll ``condition`` until it returns a truthy value, and return that value.

    Raises:
        TimeoutError: ``condition`` stayed falsy for ``timeout_s``; the message says ``what`` was awaited.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(interval_s)


def create_topic(
    client: Client,
    name: str,
    partitions: int = 1,
    *,
    config: Mapping[str, str] | None = None,
    timeout_s: float = 30.0,
) -> None:
    """Create a topic (replication factor 1) and wait until every partition has a leader.

    Args:
        client: bootstrap servers or a client config.
        name: the topic.
        partitions: how many partitions.
        config: topic configs, e.g. ``{"cleanup.policy": "compact"}``.
        timeout_s: deadline for creation and leadership.
    """
    admin_config: dict[str, Any] = {**client_config(client), "logger": logger}
    admin = AdminClient(admin_config)
    topic = NewTopic(name, num_partitions=partitions, replication_factor=1, config=dict(config or {}))
    admin.create_topics([topic], operation_timeout=timeout_s)[name].result(timeout=timeout_s)

    def has_leaders() -> bool:
        described = admin.list_topics(topic=name, timeout=timeout_s).topics.get(name)
        if described is None or described.error is not None or len(described.partitions) != partitions:
            return False
        return all(p.leader >= 0 for p in described.partitions.values())

    wait_for(has_leaders, timeout_s=timeout_s, what=f"leaders for every partition of {name}")


def delete_topics(client: Client, topics: list[str], *, timeout_s: float = 90.0) -> None:
    """Delete ``topics`` and wait until the cluster no longer lists them."""
    # Keep the client referenced until its futures are done: a destroyed client never completes them.
    admin_config: dict[str, Any] = {**client_config(client), "logger": logger}
    admin = AdminClient(admin_config)
    for future in admin.delete_topics(topics, operation_timeout=60).values():
        future.result(timeout=timeout_s)
    # A topic made again under the same name is a new topic: its partitions start without this producer's state.
    drop_producer(client)
    wait_for(
        lambda: not set(topics) & set(admin.list_topics(timeout=10).topics),
        timeout_s=timeout_s,
        what=f"deletion of {', '.join(topics)}",
    )


def recreate_topic(client: Client, name: str, partitions: int = 1) -> None:
    """Create ``name`` again after :func:`delete_topics` (a new topic id), retrying while the broker still
    finishes the deletion of the old one.
    """

    def created() -> bool:
        try:
            create_topic(client, name, partitions)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
            return False
        return True

    wait_for(created, what=f"re-creation of {name}")


_COORDINATOR_PENDING = frozenset(
    {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE}
)


def commit_group(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """Commits a consumer group's offsets (``{(topic, partition): offset}``) as a consumer that never joins the
    group (it waits for the coordinator).
    """
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    partitions = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]

    def committed() -> bool:
        try:
            consumer.commit(offsets=partitions, asynchronous=False)
        except KafkaException as e:
            # A coordinator still loading, moving or not yet elected: librdkafka gives up on these for a commit.
            if e.args[0].code() not in _COORDINATOR_PENDING and not e.args[0].retriable():
                raise
            return False
        return True

    try:
        wait_for(committed, what=f"group {group!r} to take its offsets")
    finally:
        consumer.close()


# A new idempotent producer waits about half a second for its producer id before it sends anything, and the tests
# produce well over a thousand times: one producer per client config is kept for the process instead.
_producers: dict[str, Producer] = {}
_producers_lock = threading.Lock()


def _producer_key(config: Mapping[str, Any]) -> str:
    return json.dumps(dict(config), sort_keys=True, default=repr)


def kept_producer(client: Client) -> Producer:
    """The process's idempotent producer (acks=all) for this client config, made on first use."""
    config = client_config(client)
    key = _producer_key(config)
    with _producers_lock:
        producer = _producers.get(key)
        if producer is None:
            producer = Producer({**config, "enable.idempotence": True, "linger.ms": 5, "logger": logger})
            _producers[key] = producer
        return producer


def drop_producer(client: Client) -> None:
    """Forgets the kept producer of this client config (after it failed: the next produce starts a new one)."""
    with _producers_lock:
        _producers.pop(_producer_key(client_config(client)), None)


def drop_producers_of(bootstrap_servers: Iterable[str]) -> None:
    """Forgets every kept producer of clusters that stop, so none keeps reconnecting to a port that is gone."""
    gone = set(bootstrap_servers)
    with _producers_lock:
        for key in [k for k in _producers if json.loads(k).get("bootstrap.servers") in gone]:
            del _producers[key]


def send(producer: Producer, topic: str, *, timeout_s: float = 30.0, **fields: Any) -> None:
    """``producer.produce(topic, **fields)``, refreshing the topic's metadata first where the producer does not know
    the partition yet: a kept producer outlives partitions added to its topics.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            producer.produce(topic, **fields)
            return
        except KafkaException as e:
            if e.args[0].code() != KafkaError._UNKNOWN_PARTITION or time.monotonic() > deadline:
                raise
        producer.list_topics(topic, timeout=timeout_s)


def produce(client: Client, topic: str, records: Iterable[Record], *, timeout_s: float = 30.0) -> list[Record]:
    """Produce records in order (idempotent producer, acks=all) and return them with partition, offset, timestamp.

    Raises:
        KafkaException: a record was not delivered before ``timeout_s``.
    """
    producer = kept_producer(client)
    sent = list(records)
    delivered: dict[int, Record] = {}
    errors: list[str] = []

    def on_delivery(index: int) -> Callable[[Any, Any], None]:
        def report(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(str(err))
                return
            delivered[index] = dataclasses.replace(
                sent[index], partition=msg.partition(), offset=msg.offset(), timestamp_ms=msg.timestamp()[1]
            )

        return report

    for index, record in enumerate(sent):
        extra: dict[str, Any] = {}
        if record.partition is not None:
            extra["partition"] = record.partition
        if record.timestamp_ms is not None:
            extra["timestamp"] = record.timestamp_ms
        send(
            producer,
            topic,
            timeout_s=timeout_s,
            value=record.value,
            key=record.key,
            headers=list(record.headers),
            on_delivery=on_delivery(index),
            **extra,
        )
        producer.poll(0)
    remaining = producer.flush(timeout_s)
    if errors or remaining or len(delivered) != len(sent):
        drop_producer(client)
        raise KafkaException(
            f"produced {len(delivered)} of {len(sent)} records to {topic}; errors: {errors[:5] or 'timed out'}"
        )
    return [delivered[i] for i in range(len(sent))]
