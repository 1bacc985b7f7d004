"""A real OpenTelemetry Collector for the metrics tests: built once from the collector's released Go modules,
cached, and run on a free loopback port with the OTLP/HTTP receiver and the file exporter.

The Collector publishes no Python package. ``devtools/testing/otelcol/`` is the smallest distribution the tests
need (the main package the Collector Builder would generate for the OTLP receiver and the file exporter, all
modules at release v0.161.0, the last one whose file exporter the Go module proxy serves with every dependency);
``go build`` compiles it against its committed ``go.sum``. The binary is kept in the shared cache under a name
that changes with those sources, so later sessions start it in a second and need no network;
``scripts/setup.sh`` builds it when Go is on the machine (a quarter of an hour on two busy cores).

Example:
    >>> with running_collector(tmp_path) as collector:  # doctest: +SKIP
    ...     collector.endpoint
    'http://127.0.0.1:40123'
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from devtools.testing.gobuild import cached_go_binary, stop, wait_ready
from dynamic_kafka._toolchain.process import free_port

if TYPE_CHECKING:
    from collections.abc import Iterator

COLLECTOR_RELEASE = "v0.161.0"
SOURCES = Path(__file__).parent / "otelcol"
# The file exporter writes what it received every flush interval; a test reads it back within this time.
RECEIVED_TIMEOUT_S = 15.0

Point = tuple[str, tuple[tuple[str, str], ...]]
"""A data point's metric name and its attributes (sorted), without those a query matched on."""


def collector_binary() -> Path:
    """The Collector of ``devtools/testing/otelcol/``, built with ``go build`` on first use.

    Raises:
        ToolchainError: Go is not installed, or the build failed (its output's tail is in the message).
    """
    digest = hashlib.sha256(b"".join((SOURCES / f).read_bytes() for f in ("go.mod", "go.sum", "main.go")))
    return cached_go_binary(
        f"otelcol-{COLLECTOR_RELEASE}-{digest.hexdigest()[:12]}",
        "otelcol",
        f"OpenTelemetry Collector {COLLECTOR_RELEASE}",
        ["build", "-trimpath", "-o", "{out}", "."],
        cwd=SOURCES,
    )


@dataclass(frozen=True)
class LocalCollector:
    """A running Collector: the OTLP/HTTP endpoint to export to, and what its file exporter wrote."""

    endpoint: str
    received: Path

    def values(self, **attributes: str) -> dict[Point, float]:
        """The gauge points whose attributes (the resource's included, e.g. ``service.name``) hold ``attributes``,
        as the last export that sent each left it: ``(name, other attributes) -> value``. Waits until at least one
        matches (the exporter writes every 100 ms); empty after :data:`RECEIVED_TIMEOUT_S`.
        """
        deadline = time.monotonic() + RECEIVED_TIMEOUT_S
        while True:
            found = self._matching(attributes)
            if found or time.monotonic() > deadline:
                return found
            time.sleep(0.1)

    def _matching(self, wanted: dict[str, str]) -> dict[Point, float]:
        found: dict[Point, float] = {}
        lines = self.received.read_text().splitlines() if self.received.is_file() else []
        for line in lines:
            try:
                document = json.loads(line)
            except json.JSONDecodeError:
                continue  # the exporter's last line, still being written: read again at the next poll
            for resource_metrics in document["resourceMetrics"]:
                resource = _attributes(resource_metrics.get("resource", {}))
                for scope in resource_metrics.get("scopeMetrics", []):
                    for metric in scope.get("metrics", []):
                        for point in metric.get("gauge", {}).get("dataPoints", []):
                            own = _attributes(point)
                            every = {**resource, **own}
                            if any(every.get(k) != v for k, v in wanted.items()):
                                continue
                            labels = tuple(sorted((k, v) for k, v in own.items() if k not in wanted))
                            found[(metric["name"], labels)] = _number(point)
        return found


def _attributes(holder: dict[str, Any]) -> dict[str, str]:
    return {a["key"]: str(next(iter(a["value"].values()))) for a in holder.get("attributes", [])}


def _number(point: dict[str, Any]) -> float:
    # OTLP's JSON mapping writes 64-bit integers as strings.
    return float(point["asInt"]) if "asInt" in point else float(point["asDouble"])


@contextmanager
def running_collector(folder: Path) -> Iterator[LocalCollector]:
    """A Collector on a free loopback port writing what it receives to ``folder/received.json``, its log in
    ``folder``, stopped when the block ends.

    Raises:
        ToolchainError: the binary cannot be built, or the Collector did not become ready (its log's tail is in the
            message).
    """
    binary = collector_binary()
    port, received, log = free_port(), folder / "received.json", folder / "otelcol.log"
    config = folder / "otelcol.yaml"
    config.write_text(
        json.dumps(
            {
                "receivers": {"otlp": {"protocols": {"http": {"endpoint": f"127.0.0.1:{port}"}}}},
                "exporters": {"file": {"path": str(received), "flush_interval": "100ms"}},
                "service": {
                    "telemetry": {"metrics": {"level": "none"}},
                    "pipelines": {"metrics": {"receivers": ["otlp"], "exporters": ["file"]}},
                },
            }
        )
    )
    with log.open("wb") as out:
        process = subprocess.Popen([str(binary), f"--config=file:{config}"], stdout=out, stderr=subprocess.STDOUT)
    collector = LocalCollector(endpoint=f"http://127.0.0.1:{port}", received=received)
    try:
        # The receiver answers a GET on its metrics path with 405 Method Not Allowed: it is listening.
        wait_ready(f"{collector.endpoint}/v1/metrics", process, log, "OpenTelemetry Collector", any_answer=True)
        yield collector
    finally:
        stop(process)
