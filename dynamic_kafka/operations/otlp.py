"""Metrics a run and a health check export over OpenTelemetry's OTLP/HTTP to the receiver of ``metrics.otlp``
(an OpenTelemetry Collector, a vendor's endpoint): the samples, names and labels the Pushgateway gets
(docs/metrics.md; decision 0107).

A run is a batch, so the export is one request when it has finished: the samples are recorded as gauges into a
meter provider of their own, read once by an in-memory reader and handed to the SDK's OTLP/HTTP exporter. Nothing
keeps running afterwards (no periodic reader thread, no exit hook), so the process exits at once. Each data point
carries its sample's labels plus ``pipeline``, ``operation`` and the config's ``labels``; the resource's
``service.name`` is the config's ``job`` and its ``service.instance.id`` the pipeline's id, which a Collector's
Prometheus exporter turns into the ``job`` and ``instance`` labels.

Like the push, an export never fails the work it reports on: a receiver that refuses or does not answer within the
timeout (the SDK's retries included), a header reference that does not resolve or the ``otlp`` extra missing is one
warning naming the endpoint; the SDK's own log lines about that export are folded into it, and header values are
never shown.

Example:
    >>> export_otlp(project.metrics, "orders", "run", samples)  # doctest: +SKIP
    True
"""

from __future__ import annotations

import logging
import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING

from dynamic_kafka.errors import DynamicKafkaError
from dynamic_kafka.operations.monitoring import PREFIX, samples_by_name
from dynamic_kafka.references import references_in
from dynamic_kafka.secrets import mask_secrets, resolve_value

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from opentelemetry.sdk.metrics.export import MetricsData

    from dynamic_kafka.config.models import MetricsConfig, OtlpMetricsConfig
    from dynamic_kafka.operations.monitoring import Operation, Sample

logger = logging.getLogger(__name__)

__all__ = ["export_otlp"]

# The logger the SDK's OTLP/HTTP metric exporter (and its HTTP client) writes its failures to.
_EXPORTER_LOGGER = "opentelemetry.exporter.otlp.proto.http.metric_exporter"


def export_otlp(config: MetricsConfig, pipeline_id: str, operation: Operation, samples: Sequence[Sample]) -> bool:
    """Export ``samples`` in one OTLP/HTTP request to ``config.otlp``.

    Returns whether the receiver took them (False when no OTLP receiver is configured); any failure is logged as
    one warning naming the endpoint, never raised.
    """
    otlp = config.otlp
    if otlp is None:
        return False
    what = f"metrics of {operation} {pipeline_id!r} not exported to {otlp.url}"
    try:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.sdk.metrics.export import MetricExportResult
    except ImportError:
        logger.warning(
            '%s: the OpenTelemetry SDK is not installed; install the extra with `pip install "dynamic-kafka[otlp]"`',
            what,
        )
        return False
    secrets: list[str] = []
    try:
        headers, secrets = _resolved_headers(otlp)
        data = _metrics_data(config, pipeline_id, operation, samples)
        if data is None:  # no samples: nothing to send
            return True
        exporter = OTLPMetricExporter(endpoint=otlp.url, headers=headers, timeout=otlp.timeout_seconds)
        try:
            with _exporter_lines() as said:
                result = exporter.export(data)
        finally:
            exporter.shutdown()
    except (OSError, ValueError, DynamicKafkaError) as e:
        logger.warning("%s: %s", what, mask_secrets(str(e), secrets))
        return False
    if result is not MetricExportResult.SUCCESS:
        reason = "; ".join(said) or "the receiver did not take them"
        logger.warning("%s: %s", what, mask_secrets(reason, secrets))
        return False
    logger.info("metrics of %s %r exported to %s (%d samples)", operation, pipeline_id, otlp.url, len(samples))
    return True


def _resolved_headers(otlp: OtlpMetricsConfig) -> tuple[dict[str, str], list[str]]:
    """The headers with their references resolved, and the values that came from a reference (to mask)."""
    headers: dict[str, str] = {}
    secrets: list[str] = []
    for name, value in otlp.headers.items():
        headers[name] = resolve_value(value, key=f"metrics.otlp.headers.{name}", cluster_id="metrics")
        if references_in(value):
            secrets.append(headers[name])
    return headers, secrets


def _metrics_data(
    config: MetricsConfig, pipeline_id: str, operation: Operation, samples: Sequence[Sample]
) -> MetricsData | None:
    """The samples as the SDK's ``MetricsData``, one gauge per name and one data point per sample (None: none)."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.resources import SERVICE_INSTANCE_ID, SERVICE_NAME, Resource

    # A stable instance (the SDK would draw a new one per provider, so per run): a Collector's Prometheus exporter
    # makes it the `instance` label, and each run would start new series.
    resource = Resource.create({SERVICE_NAME: config.job, SERVICE_INSTANCE_ID: pipeline_id})
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader], resource=resource, shutdown_on_exit=False)
    try:
        meter = provider.get_meter("dynamic_kafka")
        common = {**config.labels, "pipeline": pipeline_id, "operation": operation}
        for name, (help_text, group) in samples_by_name(samples).items():
            gauge = meter.create_gauge(
                PREFIX + name, unit="s" if name.endswith("_seconds") else "", description=help_text
            )
            for s in group:
                gauge.set(s.value, {**common, **s.labels})
        return reader.get_metrics_data()
    finally:
        provider.shutdown()


class _ThisThread(logging.Filter):
    """Takes the records this thread logs (kept in ``lines``) out of the log; other threads' pass."""

    def __init__(self) -> None:
        super().__init__()
        self.thread = threading.get_ident()
        self.lines: list[str] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if record.thread != self.thread:
            return True
        self.lines.append(record.getMessage())
        return False


@contextmanager
def _exporter_lines() -> Iterator[list[str]]:
    """The SDK exporter's log lines of one export, kept out of the log so the failure is one warning of ours."""
    sdk_logger = logging.getLogger(_EXPORTER_LOGGER)
    capture = _ThisThread()
    sdk_logger.addFilter(capture)
    try:
        yield capture.lines
    finally:
        sdk_logger.removeFilter(capture)
