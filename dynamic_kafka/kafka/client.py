"""``KafkaAdmin``: the driver's questions to one Kafka cluster, each answered with batched calls.

Offsets of thousands of partitions go as one ListOffsets call per offset kind and CHUNK partitions, all in
flight together; committed offsets as one OffsetFetch per CHUNK partitions. Not thread-safe: one instance per
thread (the broker snapshot gives each cluster its own thread and instance).

Example:
    >>> with KafkaAdmin(cluster, timeout_s=5) as admin:  # doctest: +SKIP
    ...     described = admin.describe_topics(["orders"])
    ...     parts = [("orders", p) for p in described["orders"].partitions]
    ...     latest = admin.list_offsets(parts, "latest")  # the last stable offsets
"""

from __future__ import annotations

import functools
import logging
import time
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from confluent_kafka import (
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.cimpl import OFFSET_SPEC_EARLIEST, OFFSET_SPEC_LATEST, _AdminClientImpl
from pydantic import Field

from dynamic_kafka.frozen import FrozenModel
from dynamic_kafka.kafka.connection import RETRY_PAUSE_S, AdminConnection, future_error
from dynamic_kafka.kafka.epochs import CommittedPosition, consumer_settings, outcome

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Mapping

    from dynamic_kafka.initializers import Isolation
    from dynamic_kafka.metadata.models import ClusterMetadata

logger = logging.getLogger(__name__)

OffsetQuery = Literal["earliest", "latest"] | int
"""``"earliest"``, ``"latest"``, or a timestamp in epoch milliseconds."""
Partition = tuple[str, int]

_ISOLATION: dict[Isolation, IsolationLevel] = {
    "read_committed": IsolationLevel.READ_COMMITTED,
    "read_uncommitted": IsolationLevel.READ_UNCOMMITTED,
}
# librdkafka's cost for ListOffsets and OffsetFetch grows faster than linearly with the partitions of one request
# (ListOffsets of 5,000 partitions: 0.2 s in one call, 0.04 s in five calls of 1,000; committed offsets of 5,000
# partitions: 0.6 s against 0.02 s), so large batches go as several calls of at most CHUNK partitions.
CHUNK = 1000
_CHECK_POLL_S = 0.2


class OffsetAnswer(NamedTuple):
    """One ListOffsets answer: the offset (None: no such offset) and the partition's leader epoch with it (None:
    the broker gave none). A tuple, not a model: a snapshot makes thousands of them.
    """

    offset: int | None
    leader_epoch: int | None


class RecordAt(NamedTuple):
    """A record's offset and Kafka timestamp (epoch milliseconds)."""

    offset: int
    timestamp_ms: int


class TopicDescription(FrozenModel):
    """A topic as the broker describes it. ``exists`` is False when the broker does not know it."""

    topic: str = Field(description="Topic name.")
    exists: bool = Field(description="Whether the broker has the topic.")
    topic_id: str | None = Field(
        None, description="Kafka's topic id, URL-safe base64 as Kafka prints it; None when the topic does not exist."
    )
    partitions: tuple[int, ...] = Field((), description="Partition ids, ascending.")


class KafkaAdmin(AdminConnection):
    """Admin questions to one cluster. A context manager; the librdkafka client is created on first use.

    Every method raises :class:`~dynamic_kafka.errors.KafkaClientError` (or its subclasses
    ``KafkaAuthenticationError`` and ``ClusterUnreachableError``) and never a confluent-kafka exception; an unset
    secret reference raises :class:`~dynamic_kafka.errors.ConfigError` before anything is sent.

    Args:
        cluster: the cluster; its secret references are resolved only when the client is created.
        timeout_s: the deadline of each call.
    """

    def list_topic_names(self) -> list[str]:
        """The cluster's topics, sorted, without Kafka's internal ones (names starting with ``__``)."""
        admin = self._client()
        metadata = self._blocking("listing topics", admin, lambda timeout_s: admin.list_topics(timeout=timeout_s))
        return sorted(name for name in metadata.topics if not name.startswith("__"))

    def describe_topics(self, topics: Collection[str]) -> dict[str, TopicDescription]:
        """Partitions and topic ids of ``topics``, in one call; a missing topic gives ``exists=False``."""
        names = sorted(set(topics))
        if not names:
            return {}
        operation = f"describing {len(names)} topic(s)"
        deadline = self._deadline()
        timeout_s = self._request_timeout(deadline)
        futures = self._submit(
            operation, lambda admin: admin.describe_topics(TopicCollection(names), request_timeout=timeout_s)
        )
        self._await([futures.values()], operation, deadline)
        found: dict[str, TopicDescription] = {}
        for name, future in futures.items():
            error = future_error(future)
            if error is None:
                described = future.result()
                found[name] = TopicDescription(
                    topic=name,
                    exists=True,
                    topic_id=kafka_topic_id(described.topic_id),
                    partitions=tuple(sorted(p.id for p in described.partitions)),
                )
            elif error.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC):
                found[name] = TopicDescription(topic=name, exists=False)
            else:
                raise self._wrap(error, f"describing topic {name!r}")
        return found

    def list_offsets(
        self,
        partitions: Collection[Partition],
        spec: OffsetQuery,
        *,
        isolation_level: Isolation = "read_committed",
    ) -> dict[Partition, int | None]:
        """One offset per partition, in one batched call.

        ``"earliest"``: the first available offset. ``"latest"``: the high watermark, or under ``read_committed``
        the last stable offset (the first offset of the oldest open transaction). A timestamp (epoch ms): the first
        offset whose record timestamp is >= it, or None when the partition has no such record.
        """
        return self.list_offsets_many(partitions, {"query": spec}, isolation_level=isolation_level)["query"]

    def list_offsets_many(
        self,
        partitions: Collection[Partition],
        specs: Mapping[str, OffsetQuery],
        *,
        isolation_level: Isolation = "read_committed",
    ) -> dict[str, dict[Partition, int | None]]:
        """Several :meth:`list_offsets` queries over the same partitions, all in flight together. Returns
        ``{name: {partition: offset}}``.
        """
        return offsets_of(self.offset_answers(partitions, specs, isolation_level=isolation_level))

    def offset_answers(
        self,
        partitions: Collection[Partition],
        specs: Mapping[str, OffsetQuery],
        *,
        isolation_level: Isolation = "read_committed",
    ) -> dict[str, dict[Partition, OffsetAnswer]]:
        """:meth:`list_offsets_many` with each answer's leader epoch: ``{name: {partition: OffsetAnswer}}``."""
        wanted = sorted(set(partitions))
        results: dict[str, dict[Partition, OffsetAnswer]] = {name: {} for name in specs}
        if not wanted:
            return results
        values = {name: _offset_spec_value(spec) for name, spec in specs.items()}
        isolation = _ISOLATION[isolation_level]
        operation = f"listing offsets of {len(wanted)} partition(s)"
        deadline = self._deadline()
        pending = {name: wanted for name in specs}
        while pending:
            calls: list[tuple[str, Future[Any]]] = []
            timeout_s = self._request_timeout(deadline)
            for name, todo in pending.items():
                for start in range(0, len(todo), CHUNK):
                    chunk = [TopicPartition(t, p, values[name]) for t, p in todo[start : start + CHUNK]]
                    submitted = self._submit(operation, _list_offsets_call(chunk, isolation, timeout_s))
                    calls.append((name, submitted))
            self._await([[future] for _, future in calls], operation, deadline)
            retry: dict[str, list[Partition]] = {}
            for name, future in calls:
                error = future_error(future)
                if error is not None:
                    raise self._wrap(error, operation)
                for tp, answer in future.result().items():
                    part = (tp.topic, tp.partition)
                    if not isinstance(answer, KafkaError):
                        offset = answer.offset if answer.offset >= 0 else None
                        results[name][part] = OffsetAnswer(offset, answer.leader_epoch)
                    elif self._may_retry(answer, deadline):
                        retry.setdefault(name, []).append(part)
                    else:
                        raise self._wrap(answer, f"listing {name} offsets of {part[0]}[{part[1]}]")
            if retry:
                count = sum(len(v) for v in retry.values())
                logger.debug("cluster %r: retrying %d offset lookup(s)", self.cluster.cluster_id, count)
                time.sleep(RETRY_PAUSE_S)
            pending = {name: sorted(parts) for name, parts in retry.items()}
        return results

    def diverged_offsets(self, positions: Collection[CommittedPosition]) -> dict[Partition, int]:
        """Where each partition's log diverged below a position read before, by KIP-320's check: the leader is
        asked the end offset of the position's leader epoch (OffsetForLeaderEpoch); an end below the position's
        offset means an unclean leader election truncated the log there (the offsets above may be refilled
        already). Returns ``{partition: end offset}`` for the diverged ones only.

        confluent-kafka has no call for the request; librdkafka sends it when a consumer seeks to an offset with a
        leader epoch (see ``dynamic_kafka.kafka.epochs``). Partitions without an answer by the deadline, or with
        an answer that tells nothing (a broker without the request, an epoch older than the leader knows), are
        left out: no false alarm.
        """
        wanted = {(p.topic, p.partition): p for p in positions}
        if not wanted:
            return {}
        operation = f"checking the leader epochs of {len(wanted)} partition(s)"
        conf = {**self._conf(), **consumer_settings(f"dynamic-kafka-epoch-check-{self.cluster.cluster_id}")}
        consumer = self._open(Consumer, conf, "the epoch-checking consumer")
        try:
            return self._check_positions(consumer, wanted, operation)
        finally:
            self._finish(consumer)
            consumer.close()

    def _check_positions(
        self, consumer: Any, wanted: dict[Partition, CommittedPosition], operation: str
    ) -> dict[Partition, int]:
        deadline = time.monotonic() + self.timeout_s
        consumer.assign([TopicPartition(t, p, w.next_offset) for (t, p), w in sorted(wanted.items())])
        # The seek, not the assignment, sends OffsetForLeaderEpoch; events of the fetch the assignment started are
        # dropped by librdkafka once the seek is applied (they carry an older version of the partition).
        unseeked = dict(wanted)
        while unseeked and time.monotonic() < deadline:
            for part, w in list(unseeked.items()):
                try:
                    consumer.seek(TopicPartition(part[0], part[1], w.next_offset, leader_epoch=w.leader_epoch))
                    del unseeked[part]
                except KafkaException:
                    time.sleep(RETRY_PAUSE_S)  # the assignment is not applied yet
            self._check_authentication(operation)
        pending = {part for part in wanted if part not in unseeked}
        diverged: dict[Partition, int] = {}
        while pending and time.monotonic() < deadline:
            event = consumer.poll(min(_CHECK_POLL_S, max(0.0, deadline - time.monotonic())))
            self._check_authentication(operation)
            if event is None or event.topic() is None:
                continue
            part = (event.topic(), event.partition())
            if part not in pending:
                continue
            said = outcome(event.error(), wanted[part].next_offset)
            if said is None:
                logger.debug("%s %s[%d]: no usable answer (%s)", operation, part[0], part[1], event.error())
            elif said is not True:
                diverged[part] = said
            pending.discard(part)
        if pending or unseeked:
            unanswered = len(pending) + len(unseeked)
            logger.debug("%s: no answer in %gs for %d partition(s)", operation, self.timeout_s, unanswered)
        return diverged

    def record_timestamps(self, starts: Mapping[Partition, int], *, newest: bool) -> dict[Partition, RecordAt]:
        """The Kafka timestamp of one record per partition, reading from ``starts`` (read_uncommitted, so records
        of open transactions count): with ``newest`` the last record before the end of the partition, else the
        first record at or after the start. Partitions with no such record by the deadline are left out.

        Transaction markers are not records (the client skips them): the newest record of a transactional
        partition is below its commit marker at ``high watermark - 1``, so a caller reads it from a few offsets
        before the high watermark.
        """
        wanted = {part: start for part, start in starts.items() if start >= 0}
        if not wanted:
            return {}
        operation = f"reading record timestamps of {len(wanted)} partition(s)"
        conf = {
            **self._conf(),
            "group.id": f"dynamic-kafka-health-{self.cluster.cluster_id}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_uncommitted",
        }
        consumer = self._open(Consumer, conf, "the record-reading consumer")
        try:
            consumer.assign([TopicPartition(t, p, o) for (t, p), o in sorted(wanted.items())])
            return self._read_timestamps(consumer, set(wanted), newest=newest, operation=operation)
        finally:
            self._finish(consumer)
            consumer.close()

    def _read_timestamps(
        self, consumer: Any, pending: set[Partition], *, newest: bool, operation: str
    ) -> dict[Partition, RecordAt]:
        deadline = time.monotonic() + self.timeout_s
        found: dict[Partition, RecordAt] = {}
        while pending and time.monotonic() < deadline:
            message = consumer.poll(min(_CHECK_POLL_S, max(0.0, deadline - time.monotonic())))
            self._check_authentication(operation)
            if message is None or message.topic() is None:
                continue
            part = (message.topic(), message.partition())
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    pending.discard(part)
                continue
            if part not in pending:
                continue
            kind, ms = message.timestamp()
            if kind != TIMESTAMP_NOT_AVAILABLE:
                found[part] = RecordAt(offset=message.offset(), timestamp_ms=ms)
            if not newest:
                pending.discard(part)
                consumer.pause([TopicPartition(part[0], part[1])])
        if pending:
            logger.debug("%s: no end reached in %gs for %d partition(s)", operation, self.timeout_s, len(pending))
        return found

    def committed_offsets(self, group_id: str, partitions: Collection[Partition]) -> dict[Partition, int | None]:
        """The consumer group's committed offsets, in one call; None where the group has none.

        Read through a consumer of the group that never joins it (see ``_consumer`` for why not the admin API).
        """
        wanted = sorted(set(partitions))
        if not wanted:
            return {}
        operation = f"reading committed offsets of group {group_id!r}"
        consumer = self._consumer(group_id)
        answered: list[TopicPartition] = []
        for start in range(0, len(wanted), CHUNK):
            chunk = [TopicPartition(t, p) for t, p in wanted[start : start + CHUNK]]
            answered += self._blocking(operation, consumer, functools.partial(_committed, consumer, chunk))
        found: dict[Partition, int | None] = {}
        for tp in answered:
            if tp.error is not None:
                raise self._wrap(tp.error, f"{operation} ({tp.topic}[{tp.partition}])")
            # A negative offset is librdkafka's OFFSET_INVALID: the group has no offset for the partition.
            found[(tp.topic, tp.partition)] = tp.offset if tp.offset >= 0 else None
        return {part: found.get(part) for part in wanted}

    def commit_group_offsets(self, group_id: str, offsets: Mapping[Partition, int]) -> None:
        """Sets the consumer group's committed offsets, in one call (for lag monitoring; the Delta state is the
        truth). The broker refuses this while the group has active members.
        """
        if not offsets:
            return
        parts = [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
        request = [ConsumerGroupTopicPartitions(group_id, parts)]
        self._group_call(
            f"committing offsets of group {group_id!r}",
            lambda admin, timeout_s: admin.alter_consumer_group_offsets(request, request_timeout=timeout_s)[group_id],
        )

    def _group_call(self, operation: str, call: Callable[[Any, float], Future[Any]]) -> list[TopicPartition]:
        """Runs a consumer-group admin call (``call(admin, request_timeout)``), retrying while the group
        coordinator is loading or moving.
        """
        deadline = self._deadline()
        while True:
            timeout_s = self._request_timeout(deadline)
            future = self._submit(operation, functools.partial(_apply, call, timeout_s=timeout_s))
            self._await([[future]], operation, deadline)
            error = future_error(future)
            answered: list[TopicPartition] = [] if error is not None else future.result().topic_partitions or []
            if error is None:
                error = next((tp.error for tp in answered if tp.error is not None), None)
            if error is None:
                return answered
            if not self._may_retry(error, deadline):
                raise self._wrap(error, operation)
            logger.debug("cluster %r: retrying %s after %s", self.cluster.cluster_id, operation, error.name())
            time.sleep(RETRY_PAUSE_S)


def offsets_of(answers: Mapping[str, Mapping[Partition, OffsetAnswer]]) -> dict[str, dict[Partition, int | None]]:
    """The offsets of :meth:`KafkaAdmin.offset_answers`, without their leader epochs."""
    return {name: {part: a.offset for part, a in found.items()} for name, found in answers.items()}


def list_topic_names(cluster: ClusterMetadata, *, timeout_s: float = 10.0) -> list[str]:
    """The cluster's topics, sorted, without Kafka's internal ones (one short-lived admin client whose calls have
    the deadline ``timeout_s``).
    """
    with KafkaAdmin(cluster, timeout_s=timeout_s) as admin:
        return admin.list_topic_names()


def kafka_topic_id(uuid: object) -> str:
    """A topic id in Kafka's own text form (what brokers log and ``kafka-topics.sh`` shows).

    ``str()`` of a confluent-kafka ``Uuid`` is standard base64 (``+``, ``/``); Kafka writes the URL-safe
    alphabet (``-``, ``_``), so the same id would otherwise have two spellings.
    """
    return str(uuid).replace("+", "-").replace("/", "_").rstrip("=")


def _list_offsets_call(
    chunk: list[TopicPartition], isolation: IsolationLevel, timeout_s: float
) -> Callable[[Any], Future[Any]]:
    """One ListOffsets call for ``chunk`` (each TopicPartition's offset holds its query), answered by one future
    whose result maps each TopicPartition to a ``ListOffsetsResultInfo`` or a ``KafkaError``.

    This is the call ``AdminClient.list_offsets`` makes after wrapping every partition in a Python future of its
    own; for thousands of partitions those futures cost several times the call itself (20,000 lookups: 1.1 s of
    CPU through the wrapper, 0.25 s direct), so the binding's method is called directly.
    """

    def call(admin: Any) -> Future[Any]:
        future: Future[Any] = Future()
        future.set_running_or_notify_cancel()
        _AdminClientImpl.list_offsets(
            admin, chunk, future, isolation_level_value=isolation.value, request_timeout=timeout_s
        )
        return future

    return call


def _apply(call: Callable[[Any, float], Future[Any]], admin: Any, *, timeout_s: float) -> Future[Any]:
    return call(admin, timeout_s)


def _committed(consumer: Any, chunk: list[TopicPartition], timeout_s: float) -> list[TopicPartition]:
    answered: list[TopicPartition] = consumer.committed(chunk, timeout=timeout_s)
    return answered


def _offset_spec_value(query: OffsetQuery) -> int:
    """The value librdkafka reads from a TopicPartition's offset in a ListOffsets call."""
    if query == "earliest":
        return OFFSET_SPEC_EARLIEST
    if query == "latest":
        return OFFSET_SPEC_LATEST
    if isinstance(query, int) and not isinstance(query, bool) and query >= 0:
        return query
    raise ValueError(f"an offset query is 'earliest', 'latest' or a timestamp in epoch ms >= 0, got {query!r}")
