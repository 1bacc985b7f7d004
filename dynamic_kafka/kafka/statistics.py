"""librdkafka's own statistics of this process's clients, collected per cluster for one run or health check
(``register.consumer.metrics: true``, which sets ``statistics.interval.ms``; decision 0108).

librdkafka emits a JSON document every ``statistics.interval.ms`` from each client handle, served by ``poll``. Its
counters (requests, bytes, errors) are cumulative over the handle's life, so a handle's last document holds them;
its round-trip times are a window reset at each document, so every document's window is kept. The clients here live
for a fraction of a second to a few seconds, so a handle waits at close for one more document (at most
:data:`FINAL_WAIT_LIMIT_S`): without it a short-lived client would report nothing, or miss its last requests.

Statistics are collected only inside :func:`collecting` (``Pipeline.run`` and ``Pipeline.health`` open it); the
collector is a context variable, so worker threads see it only when started with :func:`submit_in_context`.

Example:
    >>> with collecting() as collector:  # doctest: +SKIP
    ...     summary = runner.run()
    >>> collector.result()  # doctest: +SKIP
    (ClusterClientStatistics(cluster_id='east', clients=3, brokers=(...)),)
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import re
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from confluent_kafka import KafkaException

from dynamic_kafka.model.client_statistics import BrokerClientStatistics, ClusterClientStatistics

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping
    from concurrent.futures import Executor, Future

logger = logging.getLogger(__name__)

INTERVAL_PROPERTY = "statistics.interval.ms"
FINAL_WAIT_LIMIT_S = 1.0
"""The longest a client waits at close for its last statistics (a longer interval than this may lose them)."""
_POLL_S = 0.02
_US = 1e-6
# Counters as librdkafka names them per broker -> ours; errors are two of librdkafka's, added.
_COUNTERS = {
    "tx": "requests_sent",
    "txbytes": "bytes_sent",
    "rx": "responses_received",
    "rxbytes": "bytes_received",
    "req_timeouts": "request_timeouts",
}

_BROKERS_KEY = re.compile(r'"brokers"\s*:\s*')
_DECODER = json.JSONDecoder()

P = ParamSpec("P")
T = TypeVar("T")


@dataclass(frozen=True)
class BrokerFigures:
    """One broker of one statistics document: the cumulative counters and the round-trip window (microseconds)."""

    counters: Mapping[str, int]
    rtt_count: int
    rtt_sum_us: int
    rtt_p99_us: int


def parse_statistics(raw: str) -> dict[str, BrokerFigures]:
    """The brokers of one librdkafka statistics document, by librdkafka's broker name; its internal broker (no
    connection) is left out.

    Raises:
        ValueError: not a statistics document.
    """
    # Only the brokers object is decoded: the topics after it list every partition the client knows, megabytes
    # for a consumer of thousands of partitions, at every interval.
    found_key = _BROKERS_KEY.search(raw)
    if found_key is not None:
        brokers, _ = _DECODER.raw_decode(raw, found_key.end())
    else:
        document = json.loads(raw)
        brokers = document.get("brokers") if isinstance(document, dict) else None
    if not isinstance(brokers, dict):
        raise ValueError("no 'brokers' object: not a librdkafka statistics document")
    found: dict[str, BrokerFigures] = {}
    for name, broker in brokers.items():
        if broker.get("source") == "internal":
            continue
        counters = {ours: int(broker.get(theirs, 0)) for theirs, ours in _COUNTERS.items()}
        counters["errors"] = int(broker.get("txerrs", 0)) + int(broker.get("rxerrs", 0))
        rtt = broker.get("rtt") or {}
        found[name] = BrokerFigures(
            counters=counters,
            rtt_count=int(rtt.get("cnt", 0)),
            rtt_sum_us=int(rtt.get("sum", 0)),
            rtt_p99_us=int(rtt.get("p99", 0)),
        )
    return found


class ClientWatch:
    """The ``stats_cb`` of one client handle: keeps its last counters and every round-trip window.

    Holds no reference to the client or its owner (the C client holds this), and never raises: an exception in a
    librdkafka callback would surface in the caller's ``poll``.
    """

    def __init__(self, interval_ms: int) -> None:
        self.interval_ms = interval_ms
        self._lock = threading.Lock()
        self.documents = 0
        self.counters: dict[str, Mapping[str, int]] = {}
        self.rtt: dict[str, tuple[int, int, int]] = {}  # broker -> (count, sum µs, highest p99 µs)

    def __call__(self, raw: str) -> None:
        """Takes one statistics document (librdkafka calls this from the client's ``poll``)."""
        try:
            brokers = parse_statistics(raw)
        except (ValueError, TypeError, AttributeError) as e:
            logger.debug("librdkafka statistics not read: %s", e)
            return
        with self._lock:
            self.documents += 1
            for name, figures in brokers.items():
                self.counters[name] = figures.counters
                if figures.rtt_count:
                    window = (figures.rtt_count, figures.rtt_sum_us, figures.rtt_p99_us)
                    self.rtt[name] = _merged(self.rtt.get(name), window)

    def drain(self, client: Any) -> None:
        """Serves ``client``'s callbacks until one more document arrived (its counters now final), at most one
        interval or :data:`FINAL_WAIT_LIMIT_S`. A consumer's records polled meanwhile are dropped: it is closing.
        """
        seen = self.documents
        deadline = time.monotonic() + min(self.interval_ms / 1000, FINAL_WAIT_LIMIT_S) + _POLL_S
        while self.documents == seen and time.monotonic() < deadline:
            try:
                client.poll(_POLL_S)
            except KafkaException as e:  # a consumer's fatal error: its figures so far are all there is
                logger.debug("last librdkafka statistics not served: %s", e)
                return


def _merged(was: tuple[int, int, int] | None, window: tuple[int, int, int]) -> tuple[int, int, int]:
    """Two round-trip windows as one: counts and sums add up, the 99th percentile is the higher one."""
    if was is None:
        return window
    return (was[0] + window[0], was[1] + window[1], max(was[2], window[2]))


class StatisticsCollector:
    """The watches of every client created during one run or health check, by cluster. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watches: dict[str, list[ClientWatch]] = {}

    def watch(self, cluster_id: str, interval_ms: int) -> ClientWatch:
        """A new client's watch, counted for ``cluster_id``."""
        watch = ClientWatch(interval_ms)
        with self._lock:
            self._watches.setdefault(cluster_id, []).append(watch)
        return watch

    def result(self) -> tuple[ClusterClientStatistics, ...]:
        """Per cluster (by id), per broker: the clients' counters summed and their round-trip windows merged.
        A cluster none of whose clients reported is left out.
        """
        clusters = []
        with self._lock:
            watches = {cid: list(found) for cid, found in sorted(self._watches.items())}
        for cluster_id, found in watches.items():
            reported = [w for w in found if w.documents]
            if not reported:
                continue
            counters: dict[str, dict[str, int]] = {}
            rtt: dict[str, tuple[int, int, int]] = {}
            for w in reported:
                for name, figures in w.counters.items():
                    total = counters.setdefault(name, dict.fromkeys([*_COUNTERS.values(), "errors"], 0))
                    for key, value in figures.items():
                        total[key] += value
                for name, window in w.rtt.items():
                    rtt[name] = _merged(rtt.get(name), window)
            brokers = tuple(
                BrokerClientStatistics(
                    broker=name,
                    **counters[name],
                    rtt_avg_seconds=rtt[name][1] / rtt[name][0] * _US if name in rtt else None,
                    rtt_p99_seconds=rtt[name][2] * _US if name in rtt else None,
                )
                for name in sorted(counters)
            )
            clusters.append(ClusterClientStatistics(cluster_id=cluster_id, clients=len(reported), brokers=brokers))
        return tuple(clusters)


_COLLECTOR: contextvars.ContextVar[StatisticsCollector | None] = contextvars.ContextVar(
    "dynamic_kafka_client_statistics", default=None
)


@contextlib.contextmanager
def collecting() -> Iterator[StatisticsCollector]:
    """Collects the statistics of the clients created in this block (and in threads it starts with
    :func:`submit_in_context`) whose properties set ``statistics.interval.ms``.
    """
    collector = StatisticsCollector()
    token = _COLLECTOR.set(collector)
    try:
        yield collector
    finally:
        _COLLECTOR.reset(token)


def watch_client(cluster_id: str, conf: Mapping[str, Any]) -> ClientWatch | None:
    """The watch to give a new client of ``cluster_id`` as its ``stats_cb``; None when nothing collects or its
    properties ask for no statistics.
    """
    collector = _COLLECTOR.get()
    if collector is None:
        return None
    try:
        interval_ms = int(conf.get(INTERVAL_PROPERTY, 0))
    except (TypeError, ValueError):
        return None  # librdkafka refuses it with its own words when the client is built
    return collector.watch(cluster_id, interval_ms) if interval_ms > 0 else None


def submit_in_context(pool: Executor, call: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> Future[T]:
    """``pool.submit(call, ...)`` run in a copy of the caller's context, so the worker's clients report to the
    caller's collector.
    """
    context = contextvars.copy_context()

    def run() -> T:
        return context.run(call, *args, **kwargs)

    return pool.submit(run)
