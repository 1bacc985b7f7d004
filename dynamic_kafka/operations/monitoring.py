"""Metrics a run and a health check push to the monitoring a team runs: a Prometheus Pushgateway
(docs/metrics.md; decision 0100) and, through :mod:`dynamic_kafka.operations.otlp`, an OTLP receiver.

A batch run lives for seconds to minutes, so nothing scrapes it: it pushes once, when it has finished, and
``health`` pushes what it measured between runs. Each push replaces one group of the gateway,
``{job, pipeline, operation}`` plus the config's ``labels``, so the group always holds the last run's (or the last
health check's) figures; the gateway's own ``push_time_seconds`` says when they were pushed.

The metrics are built as plain :class:`Sample` values first (what is measured, under which name), then handed to
``prometheus_client`` (the ``prometheus`` extra, imported only when a push is configured). A push that fails, a
receiver that does not answer, a credential reference that does not resolve or the extra missing is a warning
naming the endpoint: monitoring never fails the run it reports on.

Example:
    >>> samples = run_samples(summary, state, finished_at=now)  # doctest: +SKIP
    >>> push_metrics(project.metrics, "orders", "run", samples)  # doctest: +SKIP
    True
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from dynamic_kafka.errors import DynamicKafkaError
from dynamic_kafka.secrets import mask_secrets, resolve_value

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence
    from datetime import datetime

    from dynamic_kafka.config.models import MetricsConfig
    from dynamic_kafka.model.client_statistics import ClusterClientStatistics
    from dynamic_kafka.model.snapshots import StateSnapshot
    from dynamic_kafka.model.summary import RunSummary
    from dynamic_kafka.operations.health import HealthReport

logger = logging.getLogger(__name__)

__all__ = ["PREFIX", "Operation", "Sample", "health_samples", "push_metrics", "run_samples", "samples_by_name"]

PREFIX = "dynamic_kafka_"
Operation = Literal["run", "health"]


@dataclass(frozen=True)
class Sample:
    """One value of one metric: its name without :data:`PREFIX`, what it measures, and its labels."""

    name: str
    help: str
    value: float
    labels: Mapping[str, str] = field(default_factory=dict)


def _partition(cluster_id: str, topic: str, partition: int) -> dict[str, str]:
    return {"cluster_id": cluster_id, "topic": topic, "partition": str(partition)}


def _event_time_lag(at: datetime, newest: datetime | None) -> list[Sample]:
    if newest is None:
        return []
    lag = Sample(
        "event_time_lag_seconds",
        "Seconds from the newest event time landed to the measurement (Flink: currentEmitEventTimeLag).",
        (at - newest).total_seconds(),
    )
    newest_at = Sample(
        "event_time_max_timestamp_seconds", "The newest event time landed, Unix seconds.", newest.timestamp()
    )
    return [lag, newest_at]


_CLUSTERS = "Clusters the pipeline read (Flink: kafkaClustersCount)."
_PENDING = "Records pending past the committed offsets (Flink: pendingRecords)."
_COMMITS = "1 when the run's consumer-group commit to the cluster {0} (Flink: commits{1})."
_COMMITTED = "The state's committed next offset per partition (Flink: committedOffset, currentOffset)."


_CLIENT = (
    " of the product's own Kafka clients to one broker (librdkafka's statistics; Flink: register.consumer.metrics)."
)
_CLIENT_FIGURES = {
    "requests_sent": "Requests sent",
    "bytes_sent": "Bytes sent",
    "responses_received": "Responses received",
    "bytes_received": "Bytes received",
    "errors": "Transmission and receive errors",
    "request_timeouts": "Requests timed out",
    "rtt_avg_seconds": "Mean round-trip time",
    "rtt_p99_seconds": "Highest 99th percentile round-trip time of the statistics windows",
}


def _client_samples(statistics: Sequence[ClusterClientStatistics]) -> list[Sample]:
    """Per cluster and broker, the clients' own statistics (none unless ``register.consumer.metrics`` is on)."""
    samples = []
    for cluster in statistics:
        for broker in cluster.brokers:
            where = {"cluster_id": cluster.cluster_id, "broker": broker.broker}
            for figure, text in _CLIENT_FIGURES.items():
                value = getattr(broker, figure)
                if value is not None:
                    samples.append(Sample(f"client_{figure}", text + _CLIENT, value, where))
    return samples


def run_samples(summary: RunSummary, state: StateSnapshot | None, *, finished_at: datetime) -> list[Sample]:
    """The metrics of one finished run: its summary's figures, and per partition the committed offset of the
    state it left (``state``; None: none is shown).
    """
    samples = [
        Sample("run_seq", "The run's number (run_seq).", summary.run_seq),
        Sample("run_status", "1 for the status the run ended with.", 1, {"status": summary.status}),
        Sample("run_records", "Records the run read (and landed, with its dead letters).", summary.records),
        Sample("run_bytes", "Key plus value bytes the run read.", summary.bytes),
        Sample("run_sink_records", "Rows the run appended to the sink.", summary.sink_records),
        Sample("run_dead_letters", "Records the run landed in the dead-letter table.", summary.dead_letters),
        Sample("run_planned_records", "Offsets the run planned to read.", summary.planned_records),
        Sample("run_duration_seconds", "The run's wall-clock time.", summary.total_seconds),
        Sample("clusters", _CLUSTERS, len(summary.clusters)),
        Sample("pending_records", _PENDING, summary.lag_after),
    ]
    samples += [
        Sample(
            "topic_records",
            "Records the run read from one topic of one cluster.",
            t.records,
            {"cluster_id": t.cluster_id, "topic": t.topic},
        )
        for t in summary.topics
    ]
    for c in summary.group_commits:
        cluster = {"cluster_id": c.cluster_id}
        samples.append(
            Sample("commits_succeeded", _COMMITS.format("succeeded", "Succeeded"), int(c.committed), cluster)
        )
        samples.append(Sample("commits_failed", _COMMITS.format("failed", "Failed"), int(not c.committed), cluster))
    if state is not None:
        samples += [
            Sample(
                "partition_committed_offset", _COMMITTED, p.next_offset, _partition(p.cluster_id, p.topic, p.partition)
            )
            for p in state.partitions.values()
            if p.status == "active"
        ]
    return samples + _event_time_lag(finished_at, summary.max_event_time) + _client_samples(summary.client_statistics)


def health_samples(report: HealthReport) -> list[Sample]:
    """The metrics of one health check: the verdicts, the lag and, per partition, the offsets and idleness."""
    clusters = {p.cluster_id for p in report.partitions} | set(report.unreachable_clusters)
    samples = [
        Sample("clusters", _CLUSTERS, len(clusters)),
        Sample(
            "unreachable_clusters", "Clusters that did not answer the health check.", len(report.unreachable_clusters)
        ),
        Sample("pending_records", _PENDING, report.total_lag),
    ]
    samples += [
        Sample(
            "health_check_passed", "1 when the health check passed, 0 when it failed.", int(v.passed), {"check": v.name}
        )
        for v in report.verdicts
    ]
    for p in report.partitions:
        where = _partition(p.cluster_id, p.topic, p.partition)
        samples.append(
            Sample("partition_high_watermark", "The broker's latest offset per partition.", p.high_watermark, where)
        )
        if p.committed_offset is not None:
            samples.append(Sample("partition_committed_offset", _COMMITTED, p.committed_offset, where))
        if p.lag is not None:
            samples.append(Sample("partition_pending_records", "Records pending per partition.", p.lag, where))
        if p.idle_seconds is not None:
            samples.append(
                Sample(
                    "partition_idle_seconds",
                    "Seconds since the partition's newest record (Flink: sourceIdleTime).",
                    p.idle_seconds,
                    where,
                )
            )
    samples += _client_samples(report.client_statistics)
    return samples + _event_time_lag(report.checked_at, report.newest_event_time)


def push_metrics(config: MetricsConfig, pipeline_id: str, operation: Operation, samples: Sequence[Sample]) -> bool:
    """Push ``samples`` to the Pushgateway, replacing the group ``{job, pipeline, operation, labels...}``.

    Returns whether the gateway took them (False when no Pushgateway is configured); any failure is logged as a
    warning naming the endpoint, never raised.
    """
    if config.pushgateway is None:
        return False
    endpoint = config.shown_endpoint
    secrets: list[str] = []
    try:
        from prometheus_client import CollectorRegistry, Gauge, push_to_gateway
        from prometheus_client.exposition import basic_auth_handler, default_handler

        registry = CollectorRegistry()
        for name, (help_text, group) in samples_by_name(samples).items():
            names = sorted({k for s in group for k in s.labels})
            gauge = Gauge(PREFIX + name, help_text, labelnames=names, registry=registry)
            for s in group:
                (gauge.labels(**{k: s.labels.get(k, "") for k in names}) if names else gauge).set(s.value)
        handler: Callable[..., Callable[[], None]] = default_handler
        if config.username is not None or config.password is not None:
            user = resolve_value(config.username or "", key="metrics.username", cluster_id="metrics")
            password = resolve_value(config.password or "", key="metrics.password", cluster_id="metrics")
            secrets = [s for s in (password,) if s]

            def handler(
                url: str, method: str, timeout: float | None, headers: list[tuple[str, str]], data: bytes
            ) -> Callable[[], None]:
                return basic_auth_handler(url, method, timeout, headers, data, user, password)

        push_to_gateway(
            config.pushgateway,
            job=config.job,
            registry=registry,
            grouping_key={**config.labels, "pipeline": pipeline_id, "operation": operation},
            timeout=config.timeout_seconds,
            handler=handler,
        )
    except ImportError:
        logger.warning(
            "metrics not pushed to %s: the Prometheus client is not installed; install the extra with "
            '`pip install "dynamic-kafka[prometheus]"`',
            endpoint,
        )
        return False
    except (OSError, ValueError, DynamicKafkaError) as e:
        logger.warning(
            "metrics of %s %r not pushed to %s: %s", operation, pipeline_id, endpoint, mask_secrets(str(e), secrets)
        )
        return False
    logger.info("metrics of %s %r pushed to %s (%d samples)", operation, pipeline_id, endpoint, len(samples))
    return True


def samples_by_name(samples: Iterable[Sample]) -> dict[str, tuple[str, list[Sample]]]:
    """The samples grouped by metric name, each name with its help text, in the order they first appear."""
    grouped: dict[str, tuple[str, list[Sample]]] = {}
    for s in samples:
        grouped.setdefault(s.name, (s.help, []))[1].append(s)
    return grouped
