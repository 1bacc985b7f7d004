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
import os
import shutil
import subprocess
import time
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dynamic_kafka._toolchain.cache import cache_dir
from dynamic_kafka._toolchain.filelock import exclusive_lock
from dynamic_kafka._toolchain.process import free_port, tail
from dynamic_kafka.errors import ToolchainError

if TYPE_CHECKING:
    from collections.abc import Iterator

logger = logging.getLogger(__name__)

PUSHGATEWAY_MODULE = "github.com/prometheus/pushgateway"
PUSHGATEWAY_VERSION = "v1.11.5"
BUILD_TIMEOUT_S = 1800.0
START_TIMEOUT_S = 30.0
# Where the Go toolchain is installed when it is not on PATH (the official tarball's place).
_GO_HOME = Path("/usr/local/go/bin/go")


def find_go() -> Path | None:
    """The ``go`` command: on PATH, else /usr/local/go/bin/go; None when neither exists."""
    found = shutil.which("go")
    if found:
        return Path(found)
    return _GO_HOME if _GO_HOME.is_file() else None


def pushgateway_binary(version: str = PUSHGATEWAY_VERSION) -> Path:
    """The Pushgateway binary of ``version``, built with ``go install`` on first use (a few minutes on two cores).

    Safe to call from several processes at once: one builds, the others wait and reuse it.

    Raises:
        ToolchainError: Go is not installed, or the build failed (its output's tail is in the message).
    """
    home = cache_dir() / f"pushgateway-{version}"
    binary = home / "pushgateway"
    if binary.is_file():
        return binary
    with exclusive_lock(cache_dir() / f"pushgateway-{version}.lock"):
        if binary.is_file():
            return binary
        go = find_go()
        if go is None:
            raise ToolchainError(
                f"the Prometheus Pushgateway {version} is not cached in {home} and Go is not installed to build it.",
                hint="Install Go (https://go.dev/dl/) and run `bash scripts/setup.sh`.",
            )
        staging = home.with_name(home.name + ".building")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        env = {**os.environ, "GOBIN": str(staging), "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"}
        logger.info("building the Prometheus Pushgateway %s with %s (first use only)", version, go)
        began = time.monotonic()
        done = subprocess.run(
            ["nice", "-n", "10", str(go), "install", f"{PUSHGATEWAY_MODULE}@{version}"],
            env=env,
            cwd=staging,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            check=False,
        )
        if done.returncode != 0 or not (staging / "pushgateway").is_file():
            raise ToolchainError(
                f"building the Prometheus Pushgateway {version} failed (exit {done.returncode}): "
                f"{done.stderr.strip()[-2000:]}",
                hint="Check the network to the Go module proxy ($GOPROXY) and try again.",
            )
        shutil.rmtree(home, ignore_errors=True)
        staging.rename(home)
        logger.info("Prometheus Pushgateway %s built in %.0fs", version, time.monotonic() - began)
    return binary


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
        _wait_ready(gateway, process, log)
        yield gateway
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_ready(gateway: LocalPushgateway, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        try:
            with urllib.request.urlopen(f"{gateway.url}/-/ready", timeout=2):  # noqa: S310 (loopback)
                return
        except OSError:
            time.sleep(0.1)
    raise ToolchainError(f"the Pushgateway at {gateway.url} did not become ready:\n{tail(log)}")
