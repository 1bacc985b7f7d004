"""The ``metrics.otlp`` section: its URL and headers, what one export sends (decoded by a small OTLP/HTTP receiver
in the test), and an export that cannot be made is one warning naming the endpoint, without a secret, within its
timeout. The Collector itself receives them in ``tests/integration/test_metrics_otlp.py``."""

from __future__ import annotations

import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import TYPE_CHECKING, Any

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from pydantic import ValidationError

from dynamic_kafka._toolchain.process import free_port
from dynamic_kafka.config.loader import load_project_config
from dynamic_kafka.config.models import MetricsConfig
from dynamic_kafka.operations.monitoring import Sample
from dynamic_kafka.operations.otlp import export_otlp

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

_SAMPLES = [
    Sample("run_records", "Records.", 5),
    Sample("partition_committed_offset", "Offsets.", 3, {"cluster_id": "east", "topic": "t", "partition": "0"}),
    Sample("partition_committed_offset", "Offsets.", 2, {"cluster_id": "east", "topic": "t", "partition": "1"}),
    Sample("run_duration_seconds", "Time.", 1.5),
]


def _metrics(**otlp: object) -> MetricsConfig:
    return MetricsConfig.model_validate({"job": "ingest", "labels": {"env": "test"}, "otlp": otlp})


class _Receiver(BaseHTTPRequestHandler):
    got: list[tuple[str, dict[str, str], bytes]]
    status = 200

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.got.append((self.path, dict(self.headers.items()), body))
        self.send_response(self.status)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[tuple[str, type[_Receiver]]]:
    handler = type("Handler", (_Receiver,), {"got": []})
    # One thread serves every request: a threading server's per-request thread can outlive the response and would
    # count as a thread the export left behind.
    server = HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()


def test_a_section_without_a_receiver_is_refused_and_an_endpoint_without_a_path_gets_the_metrics_path() -> None:
    with pytest.raises(ValidationError, match="names no receiver"):
        MetricsConfig.model_validate({"job": "ingest"})
    with pytest.raises(ValidationError, match="endpoint"):
        _metrics(endpoint="http://user:pw@collector:4318")

    assert _metrics(endpoint="http://collector:4318").otlp.url == "http://collector:4318/v1/metrics"  # type: ignore[union-attr]
    assert _metrics(endpoint="https://x.example/otlp/v1/metrics").otlp.url == "https://x.example/otlp/v1/metrics"  # type: ignore[union-attr]


def test_one_export_sends_every_sample_as_a_gauge_with_its_labels_and_the_resolved_header(
    receiver: tuple[str, type[_Receiver]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, handler = receiver
    monkeypatch.setenv("DK_TEST_OTLP_TOKEN", "s3cr3t")
    config = _metrics(endpoint=url, headers={"authorization": "Bearer ${env:DK_TEST_OTLP_TOKEN}"})

    assert "DK_TEST_OTLP_TOKEN" not in repr(config)  # headers are never shown
    threads = set(threading.enumerate())
    assert export_otlp(config, "orders", "run", _SAMPLES) is True
    assert set(threading.enumerate()) <= threads  # nothing left running that could hold the process at exit

    [(path, headers, body)] = handler.got
    assert path == "/v1/metrics"
    assert headers["authorization"] == "Bearer s3cr3t"
    request = ExportMetricsServiceRequest.FromString(body)
    [resource_metrics] = request.resource_metrics
    resource = {a.key: a.value.string_value for a in resource_metrics.resource.attributes}
    assert resource["service.name"] == "ingest"
    assert resource["service.instance.id"] == "orders"  # stable across runs: no new series per run
    got: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    units = {}
    for scope in resource_metrics.scope_metrics:
        for metric in scope.metrics:
            units[metric.name] = metric.unit
            for point in metric.gauge.data_points:
                labels = tuple(sorted((a.key, a.value.string_value) for a in point.attributes))
                got[(metric.name, labels)] = point.as_int if point.HasField("as_int") else point.as_double
    common = (("env", "test"), ("operation", "run"), ("pipeline", "orders"))
    at = [(("cluster_id", "east"), ("partition", p), ("topic", "t")) for p in "01"]
    assert got == {
        ("dynamic_kafka_run_records", common): 5,
        ("dynamic_kafka_partition_committed_offset", tuple(sorted(common + at[0]))): 3,
        ("dynamic_kafka_partition_committed_offset", tuple(sorted(common + at[1]))): 2,
        ("dynamic_kafka_run_duration_seconds", common): 1.5,
    }
    assert units["dynamic_kafka_run_duration_seconds"] == "s"


def test_a_receiver_that_refuses_is_one_warning_naming_it_without_the_header(
    receiver: tuple[str, type[_Receiver]], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    url, handler = receiver
    handler.status = 401
    monkeypatch.setenv("DK_TEST_OTLP_TOKEN", "s3cr3t")
    config = _metrics(endpoint=url, headers={"authorization": "Bearer ${env:DK_TEST_OTLP_TOKEN}"})

    with caplog.at_level(logging.DEBUG):
        assert export_otlp(config, "orders", "health", _SAMPLES) is False

    [warning] = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert warning.name == "dynamic_kafka.operations.otlp"
    assert f"metrics of health 'orders' not exported to {url}/v1/metrics" in warning.getMessage()
    assert "401" in warning.getMessage()
    assert "s3cr3t" not in caplog.text


def test_a_receiver_that_is_down_is_one_warning_within_the_timeout(caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()  # nothing listens there
    config = _metrics(endpoint=f"http://127.0.0.1:{port}", timeout_seconds=2)

    began = time.monotonic()
    with caplog.at_level(logging.DEBUG):
        assert export_otlp(config, "orders", "run", _SAMPLES) is False

    assert time.monotonic() - began < 10
    [warning] = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert f"not exported to http://127.0.0.1:{port}/v1/metrics" in warning


def test_a_header_reference_that_does_not_resolve_is_a_warning_naming_the_reference(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DK_TEST_UNSET_OTLP_TOKEN", raising=False)
    config = _metrics(
        endpoint=f"http://127.0.0.1:{free_port()}", headers={"x-api-key": "${env:DK_TEST_UNSET_OTLP_TOKEN}"}
    )

    with caplog.at_level(logging.WARNING):
        assert export_otlp(config, "orders", "run", _SAMPLES) is False

    [warning] = [r.getMessage() for r in caplog.records]
    assert "DK_TEST_UNSET_OTLP_TOKEN" in warning
    assert "not exported to" in warning


def test_loading_the_config_keeps_header_references_unresolved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DK_TEST_OTLP_TOKEN", "s3cr3t")
    (tmp_path / "dynamic_kafka.yaml").write_text(
        "metadata_service: {type: file, path: m.yaml}\n"
        "metrics:\n  otlp:\n    endpoint: http://collector:4318\n"
        '    headers: {authorization: "Bearer ${env:DK_TEST_OTLP_TOKEN}"}\n'
    )

    project = load_project_config(tmp_path / "dynamic_kafka.yaml")

    assert project.metrics is not None
    assert project.metrics.otlp is not None
    assert project.metrics.otlp.headers == {"authorization": "Bearer ${env:DK_TEST_OTLP_TOKEN}"}
