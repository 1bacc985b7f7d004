"""A real Prometheus Pushgateway for the metrics tests: built once from its released Go module, cached, and run on
a free loopback port for one test session.

The Pushgateway publishes no Python package; its Go module is served by the Go module proxy, so ``go install``
builds the released version with its checksummed dependencies (``go.sum`` through the checksum database). The
binary is kept in the shared cache (``<cache>/pushgateway-<version>/pushgateway``), so later sessions start it in
milliseconds and need no network; ``scripts/setup.sh`` builds it when Go is on the machine.

Example:
    >>> with running_pushgateway(tmp_path) as gateway:  # doctest: +SKIP
    ...     gateway.url
    'http://127.0.0.1:40123'
"""

from __future__ import annotations

import json
import logging
import subprocess
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from devtools.testing.gobuild import cached_go_binary, stop, wait_ready
from dynamic_kafka._toolchain.process import free_port

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

logger = logging.getLogger(__name__)

PUSHGATEWAY_MODULE = "github.com/prometheus/pushgateway"
PUSHGATEWAY_VERSION = "v1.11.5"


def pushgateway_binary(version: str = PUSHGATEWAY_VERSION) -> Path:
    """The Pushgateway binary of ``version``, built with ``go install`` on first use (a few minutes on two cores).

    Raises:
        ToolchainError: Go is not installed, or the build failed (its output's tail is in the message).
    """
    return cached_go_binary(
        f"pushgateway-{version}",
        "pushgateway",
        f"Prometheus Pushgateway {version}",
        ["install", f"{PUSHGATEWAY_MODULE}@{version}"],
        env={"GOFLAGS": "-mod=mod"},
    )


@dataclass(frozen=True)
class LocalPushgateway:
    """A running Pushgateway: its base URL, and its HTTP API read back as the tests read it."""

    url: str

    def groups(self) -> list[dict[str, Any]]:
        """Every pushed group with its metrics, as the gateway's own API (``/api/v1/metrics``) returns them."""
        with urllib.request.urlopen(f"{self.url}/api/v1/metrics", timeout=10) as response:  # noqa: S310 (loopback)
            document = json.load(response)
        groups: list[dict[str, Any]] = document["data"]
        return groups

    def values(self, **grouping: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """The samples of the group whose labels include ``grouping``: ``(name, sorted labels) -> value``, the
        group's labels (and the empty ``instance`` the gateway adds) left out of each sample's labels.
        """
        found: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        for group in self.groups():
            labels = group["labels"]
            if any(labels.get(k) != v for k, v in grouping.items()):
                continue
            for name, family in group.items():
                if name in ("labels", "last_push_successful") or not isinstance(family, dict):
                    continue
                for metric in family["metrics"]:
                    own = {k: v for k, v in metric.get("labels", {}).items() if k not in labels and k != "instance"}
                    found[(name, tuple(sorted(own.items())))] = float(metric["value"])
        return found


@contextmanager
def running_pushgateway(folder: Path, version: str = PUSHGATEWAY_VERSION) -> Iterator[LocalPushgateway]:
    """A Pushgateway on a free loopback port, its log in ``folder``, stopped when the block ends.

    Raises:
        ToolchainError: the binary cannot be built, or the gateway did not become ready (its log's tail is in the
            message).
    """
    binary = pushgateway_binary(version)
    port = free_port()
    log = folder / "pushgateway.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(binary), f"--web.listen-address=127.0.0.1:{port}"], stdout=out, stderr=subprocess.STDOUT
        )
    gateway = LocalPushgateway(url=f"http://127.0.0.1:{port}")
    try:
        wait_ready(f"{gateway.url}/-/ready", process, log, "Pushgateway")
        yield gateway
    finally:
        stop(process)
