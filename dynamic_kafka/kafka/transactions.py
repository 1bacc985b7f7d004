"""A transactional producer of one cluster whose progress is a consumer-group offset committed in its transactions.

The progress is the offset of ``group_id`` on partition 0 of ``topic`` (brokers accept offsets only for partitions
that exist), committed with ``send_offsets_to_transaction`` so that it becomes visible with the records or not at
all. The group never has members: the commit carries the generation-less metadata of a consumer that never joins.
The progress is read by a ``read_committed`` consumer, for which librdkafka asks the coordinator for stable
offsets (KIP-447): an offset commit still inside an open transaction is waited for, never read half-done.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaException, Producer, TopicPartition

from dynamic_kafka.kafka.connection import AdminConnection
from dynamic_kafka.kafka.failures import kafka_error_of

if TYPE_CHECKING:
    from collections.abc import Iterable

    from dynamic_kafka.errors import KafkaClientError
    from dynamic_kafka.metadata.models import ClusterMetadata

logger = logging.getLogger(__name__)

# The producer errors that mean another producer of the same transactional id took over.
FENCED_ERRORS = frozenset({"_FENCED", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH", "TRANSACTIONAL_ID_NOT_FOUND"})


class TransactionalProducer(AdminConnection):
    """The producer of ``transactional_id`` on one cluster; :meth:`start` fences every older producer of that id.

    Args:
        cluster: the cluster; its properties (security, secrets) as for reading.
        transactional_id: one per publication and cluster.
        transaction_timeout_ms: the producer's ``transaction.timeout.ms``.
        group_id: the consumer group whose offset holds the progress.
        topic: the topic written to; its partition 0 holds the progress.
        timeout_s: the deadline of each call.
    """

    def __init__(
        self,
        cluster: ClusterMetadata,
        *,
        transactional_id: str,
        transaction_timeout_ms: int,
        group_id: str,
        topic: str,
        timeout_s: float,
    ) -> None:
        super().__init__(cluster, timeout_s=timeout_s)
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.group_id = group_id
        self.topic = topic
        self._producer: Any = None

    def start(self) -> None:
        """Create the producer and initialise its transactions: older producers of the id are fenced, and a
        transaction one of them left open is aborted (or completed, if its commit had begun) first.
        """
        conf = {
            **self._conf(),
            "transactional.id": self.transactional_id,
            "transaction.timeout.ms": self.transaction_timeout_ms,
            "enable.idempotence": True,
            # librdkafka's default partitioner (CRC32) is not the Java client's; murmur2 is Kafka's default by key.
            "partitioner": "murmur2_random",
        }
        self._producer = self._open(Producer, conf, "the transactional producer")
        try:
            self._producer.init_transactions(self.timeout_s)
        except KafkaException as e:
            raise self._wrap_exception(e, "initialising the transactional producer") from None

    def committed_progress(self) -> tuple[int, str] | None:
        """The group's committed offset on the progress partition and its metadata; None when none is committed."""
        consumer = self._consumer(self.group_id)
        partition = TopicPartition(self.topic, 0)
        answer = self._blocking(
            "reading the publication's progress", consumer, lambda t: consumer.committed([partition], timeout=t)
        )[0]
        if answer.error is not None:
            raise self._wrap(answer.error, "reading the publication's progress")
        return None if answer.offset < 0 else (answer.offset, answer.metadata or "")

    def begin(self) -> None:
        """Begin a transaction."""
        self._call("beginning a transaction", lambda: self._producer.begin_transaction())

    def send(self, records: Iterable[tuple[bytes | None, bytes | None, int | None, list[tuple[str, bytes]]]]) -> int:
        """Produce ``(key, value, timestamp_ms, headers)`` records in the open transaction; return how many."""
        count = 0
        for key, value, timestamp_ms, headers in records:
            extra = {"timestamp": timestamp_ms} if timestamp_ms is not None else {}
            while True:
                try:
                    self._producer.produce(self.topic, value=value, key=key, headers=headers, **extra)
                    break
                except BufferError:
                    self._producer.poll(0.05)  # the local queue is full: let deliveries drain it
                except KafkaException as e:
                    raise self._wrap_exception(e, "sending records") from None
            count += 1
            self._producer.poll(0)
        return count

    def commit(self, next_offset: int, metadata: str) -> None:
        """Commit the open transaction with the progress ``next_offset`` (and ``metadata``) on the group."""
        consumer = self._consumer(self.group_id)
        offsets = [TopicPartition(self.topic, 0, next_offset, metadata)]
        group = consumer.consumer_group_metadata()
        self._call(
            "committing the progress in the transaction",
            lambda: self._producer.send_offsets_to_transaction(offsets, group, self.timeout_s),
        )
        self._call("committing the transaction", lambda: self._producer.commit_transaction(self.timeout_s))

    def close(self) -> None:
        """Flush nothing, abort nothing: an open transaction is aborted by the next producer of the id, or by the
        broker at its timeout. Releases the clients.
        """
        self._producer = None
        super().close()

    def _call(self, operation: str, call: Any) -> None:
        """Run a transactional call, retrying what librdkafka marks retriable until the deadline; abort the
        transaction on an abortable error; wrap every failure (the fenced ones keep their error name).
        """
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                call()
                return
            except KafkaException as e:
                error = kafka_error_of(e)
                if error is not None and error.retriable() and time.monotonic() < deadline:
                    continue
                if error is not None and error.txn_requires_abort():
                    self._abort()
                raise self._wrap_exception(e, operation) from None

    def _abort(self) -> None:
        try:
            self._producer.abort_transaction(self.timeout_s)
        except KafkaException as e:
            # The transaction stays open until the next producer of the id or the broker's timeout aborts it.
            error = kafka_error_of(e)
            name = error.name() if error is not None else type(e).__name__
            logger.warning("cluster %r: aborting the transaction failed (%s)", self.cluster.cluster_id, name)


def is_fenced(error: KafkaClientError) -> bool:
    """Whether a wrapped error means another producer of the same transactional id took over."""
    return error.kafka_error in FENCED_ERRORS


def is_invalid_timeout(error: KafkaClientError) -> bool:
    """Whether a wrapped error is the broker refusing ``transaction.timeout.ms`` (above its maximum)."""
    return error.kafka_error == "INVALID_TRANSACTION_TIMEOUT"
