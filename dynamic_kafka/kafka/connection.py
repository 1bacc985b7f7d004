"""One librdkafka admin client per cluster, with deadlines, fast authentication failures and wrapped errors.

librdkafka reports authentication failures only through the client's error callback (the request itself just
times out while librdkafka keeps reconnecting). Every wait here therefore serves the callback (``poll``) between
short waits on the request's futures, and ends the call as soon as an authentication error arrives. Each call has
a deadline: ``timeout_s``, also given to librdkafka as ``request_timeout`` so that its own timeout (with the better
message) usually fires first.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import TYPE_CHECKING, Any, Self, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from dynamic_kafka.errors import ClusterUnreachableError, KafkaClientError
from dynamic_kafka.kafka.driver_properties import librdkafka_properties
from dynamic_kafka.kafka.failures import (
    UNREACHABLE_HINT,
    ScrubbingLogger,
    classify,
    describe_error,
    kafka_error_of,
    secret_values,
    to_client_error,
)
from dynamic_kafka.kafka.statistics import INTERVAL_PROPERTY, ClientWatch, watch_client
from dynamic_kafka.secrets import mask_secrets

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterable
    from types import TracebackType

    from dynamic_kafka.metadata.models import ClusterMetadata

logger = logging.getLogger(__name__)
_librdkafka_logger = logging.getLogger(f"{__name__}.librdkafka")  # librdkafka's own log lines, apart

# Errors that clear up on their own within seconds (a leader moving, a topic just created, the group coordinator
# loading __consumer_offsets on a fresh broker); librdkafka's admin calls return them without retrying.
RETRY_CODES = frozenset(
    {
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.OFFSET_NOT_AVAILABLE,
    }
)
T = TypeVar("T")
R = TypeVar("R")
RETRY_PAUSE_S = 0.1
_POLL_S = 0.05
_BLOCKING_ATTEMPT_S = 0.5
# Our deadline only guards against a hang; librdkafka's request timeout fires first.
_DEADLINE_GRACE_S = 1.0


class _ErrorSink:
    """Receives librdkafka's error callback. Kept apart from the connection so that the C client holds no
    reference back to its owner: dropping the owner destroys the client at once, without waiting for the GC.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.authentication: KafkaError | None = None
        self.transport: KafkaError | None = None
        self.all_down = False

    def __call__(self, error: KafkaError) -> None:
        kind = classify(error)
        with self._lock:
            self.all_down = self.all_down or error.code() == KafkaError._ALL_BROKERS_DOWN
            if kind == "authentication" and self.authentication is None:
                self.authentication = error
            elif kind == "unreachable" and (
                # "1/1 brokers are down" says less than the connection error before it.
                self.transport is None or error.code() != KafkaError._ALL_BROKERS_DOWN
            ):
                self.transport = error


class AdminConnection:
    """The librdkafka admin client of one cluster, created on first use. A context manager.

    Args:
        cluster: the cluster; its secret references are resolved only when the client is created.
        timeout_s: the deadline of each call.
    """

    def __init__(self, cluster: ClusterMetadata, *, timeout_s: float = 10.0) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        self.cluster = cluster
        self.timeout_s = timeout_s
        self._admin: Any = None
        self._consumers: dict[str, Any] = {}
        self._watches: dict[int, ClientWatch] = {}  # id(client) -> its statistics watch, for the last ones at close
        self._errors = _ErrorSink()
        self._secrets: list[str] = []

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Destroys the librdkafka clients, if any were created. Safe to call twice."""
        consumers, self._consumers = self._consumers, {}
        for consumer in consumers.values():
            self._finish(consumer)
            consumer.close()
        if self._admin is not None:
            self._finish(self._admin)
        # AdminClient has no close(); the last reference going away destroys the librdkafka handle.
        self._admin = None
        self._watches = {}

    def _conf(self) -> dict[str, Any]:
        """Librdkafka settings shared by this cluster's clients; resolves the secret references and translates
        properties written in the Java client's language (:func:`librdkafka_properties`).
        """
        resolved = self.cluster.client_properties()
        translated = librdkafka_properties(resolved, cluster_id=self.cluster.cluster_id)
        self._secrets = sorted(
            {*secret_values(self.cluster.properties, resolved), *secret_values(self.cluster.properties, translated)},
            key=len,
            reverse=True,
        )
        return {
            "client.id": f"dynamic-kafka-{self.cluster.cluster_id}",
            **translated,
            "bootstrap.servers": self.cluster.bootstrap_servers,
            "error_cb": self._errors,
            "logger": ScrubbingLogger(_librdkafka_logger, self._secrets),
        }

    def _open(self, factory: Callable[[dict[str, Any]], T], conf: dict[str, Any], what: str) -> T:
        """A new librdkafka client (``factory(conf)``), reporting its statistics when a run or health check
        collects them (:mod:`dynamic_kafka.kafka.statistics`).
        """
        watch = watch_client(self.cluster.cluster_id, conf)
        if watch is not None:
            conf = {**conf, "stats_cb": watch}
        else:
            # Nothing would read them: librdkafka would build a document per interval for nothing.
            conf = {k: v for k, v in conf.items() if k != INTERVAL_PROPERTY}
        try:
            client = factory(conf)
        except KafkaException as e:
            raise self._wrap_exception(e, f"creating {what}") from None
        if watch is not None:
            self._watches[id(client)] = watch
        return client

    def _finish(self, client: Any) -> None:
        """Before ``client`` is closed: its last statistics, when it reports them."""
        watch = self._watches.pop(id(client), None)
        if watch is not None:
            watch.drain(client)

    def _client(self) -> Any:
        if self._admin is None:
            self._admin = self._open(AdminClient, self._conf(), "the admin client")
        return self._admin

    def _consumer(self, group_id: str) -> Any:
        """A consumer of ``group_id`` that never joins the group: it only reads the group's committed offsets.

        The admin client's ListConsumerGroupOffsets crashes the process (a NULL consumer-group handle in
        librdkafka's OffsetFetch response handler) when the coordinator answers NOT_COORDINATOR or is still
        loading, as on a freshly started cluster; a consumer has that handle, and retries such answers itself.
        """
        if group_id not in self._consumers:
            conf = {**self._conf(), "group.id": group_id, "enable.auto.commit": False}
            self._consumers[group_id] = self._open(Consumer, conf, "a consumer")
        return self._consumers[group_id]

    def _blocking(self, operation: str, client: Any, call: Callable[[float], T]) -> T:
        """Runs a blocking librdkafka call (``call(timeout_s)``) in short attempts until the deadline, serving
        ``client``'s error callback in between, so that an authentication failure ends it at once.
        """
        deadline = time.monotonic() + self.timeout_s
        while True:
            attempt_s = max(0.05, min(_BLOCKING_ATTEMPT_S, deadline - time.monotonic()))
            try:
                return call(attempt_s)
            except KafkaException as e:
                failure = e
            self._serve(client, operation)
            error = kafka_error_of(failure)
            retry = error is not None and (classify(error) == "unreachable" or error.code() in RETRY_CODES)
            if not retry or time.monotonic() >= deadline:
                raise self._wrap_exception(failure, operation)

    def _serve(self, client: Any, operation: str) -> None:
        """Serves ``client``'s queued callbacks (errors, logs); raises if an authentication error arrived, or if
        every broker refused the connection.
        """
        client.poll(0)
        self._check_authentication(operation)
        self._check_refused(operation)

    def _check_refused(self, operation: str) -> None:
        """Raises once every bootstrap broker refused the connection: nothing listens there, and waiting for the
        deadline cannot change that (a timeout, a failed name lookup or a TLS failure still waits).
        """
        last = self._errors.transport
        if self._errors.all_down and last is not None and "Connection refused" in last.str():
            raise ClusterUnreachableError(
                f"brokers {self.cluster.bootstrap_servers} refused the connection while {operation}: "
                f"{describe_error(last, self._secrets)}",
                cluster_id=self.cluster.cluster_id,
                kafka_error=last.name(),
                retriable=False,
                hint="Nothing listens there: start the brokers, or fix bootstrap_servers (host and port).",
            )

    def _check_authentication(self, operation: str) -> None:
        """Raises if the error callback received an authentication error (a consumer serves it in ``poll``)."""
        if self._errors.authentication is not None:
            raise self._wrap(self._errors.authentication, operation)

    def _deadline(self) -> float:
        return time.monotonic() + self.timeout_s + _DEADLINE_GRACE_S

    @staticmethod
    def _request_timeout(deadline: float) -> float:
        """Librdkafka's timeout for a request sent now: it gives up (and resolves the futures) before our
        deadline, so no request is left in flight when the client is destroyed.
        """
        return max(0.1, deadline - _DEADLINE_GRACE_S - time.monotonic())

    def _submit(self, operation: str, call: Callable[[Any], R]) -> R:
        """Starts an admin call (``call(admin_client)``); returns its future(s)."""
        admin = self._client()
        try:
            return call(admin)
        except KafkaException as e:
            raise self._wrap_exception(e, operation) from None

    def _await(self, calls: Iterable[Collection[Future[Any]]], operation: str, deadline: float) -> None:
        """Waits for the futures of admin ``calls`` while serving the error callback; fails fast on an
        authentication error and raises :class:`ClusterUnreachableError` at ``deadline``.
        """
        pending = [list(call) for call in calls if call]
        while True:
            self._serve(self._admin, operation)
            pending = [rest for call in pending if (rest := _unfinished(call))]
            if not pending:
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self._unreachable(operation)
            # One future per call is watched: waiting on thousands (one per partition) costs more than the call.
            wait([call[0] for call in pending], timeout=min(_POLL_S, remaining), return_when=FIRST_COMPLETED)

    def _may_retry(self, error: KafkaError, deadline: float) -> bool:
        return error.code() in RETRY_CODES and time.monotonic() + RETRY_PAUSE_S < deadline

    def _wrap_exception(self, exc: KafkaException, operation: str) -> KafkaClientError:
        error = kafka_error_of(exc)
        if error is None:
            return KafkaClientError(
                f"{operation} failed: {mask_secrets(str(exc), self._secrets)}",
                cluster_id=self.cluster.cluster_id,
            )
        return self._wrap(error, operation)

    def _wrap(self, error: KafkaError, operation: str) -> KafkaClientError:
        # After an authentication failure requests only time out; the cause worth reporting is the authentication.
        if self._errors.authentication is not None and classify(error) == "unreachable":
            error = self._errors.authentication
        return to_client_error(
            error,
            cluster_id=self.cluster.cluster_id,
            bootstrap_servers=self.cluster.bootstrap_servers,
            operation=operation,
            secrets=self._secrets,
            last_connection_error=self._errors.transport,
        )

    def _unreachable(self, operation: str) -> ClusterUnreachableError:
        last = self._errors.transport
        detail = f"; last connection error: {describe_error(last, self._secrets)}" if last is not None else ""
        return ClusterUnreachableError(
            f"brokers {self.cluster.bootstrap_servers} did not answer within {self.timeout_s:g}s "
            f"while {operation}{detail}",
            cluster_id=self.cluster.cluster_id,
            kafka_error=last.name() if last is not None else None,
            hint=UNREACHABLE_HINT,
        )


def _unfinished(call: list[Future[Any]]) -> list[Future[Any]]:
    # The futures of one admin call are answered together by one response, so until the first is done the rest
    # need no look; after that, a single pass finds any stragglers.
    if not call[0].done():
        return call
    return [f for f in call if not f.done()]


def future_error(future: Future[Any]) -> KafkaError | None:
    """The Kafka error a finished future failed with, None if it succeeded. Other exceptions propagate."""
    exc = future.exception(timeout=0)
    if exc is None:
        return None
    error = kafka_error_of(exc)
    if error is None:
        raise exc
    return error
