"""Test receivers built once from released Go modules into the shared cache (the Prometheus Pushgateway, the
OpenTelemetry Collector of the metrics tests), and started and stopped for a test session.

The Go module proxy serves them with checksummed dependencies (``go.sum`` through the checksum database), so a
build needs Go and the proxy once; later sessions find the binary in ``<cache>/<name>/`` and need neither.
``scripts/setup.sh`` builds them when Go is on the machine.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

from dynamic_kafka._toolchain.cache import cache_dir
from dynamic_kafka._toolchain.filelock import exclusive_lock
from dynamic_kafka._toolchain.process import tail
from dynamic_kafka.errors import ToolchainError

if TYPE_CHECKING:
    from collections.abc import Mapping

logger = logging.getLogger(__name__)

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


def cached_go_binary(
    name: str, binary: str, what: str, command: list[str], *, cwd: Path | None = None, env: Mapping[str, str] = {}
) -> Path:
    """``<cache>/<name>/<binary>``, built on first use by ``go <command>`` run in ``cwd`` (default: the empty
    staging folder) with ``env`` added; ``GOBIN`` is the staging folder and ``{out}`` in ``command`` the binary's
    path in it.

    Safe to call from several processes at once: one builds, the others wait and reuse it.

    Raises:
        ToolchainError: Go is not installed, or the build failed (its output's tail is in the message).
    """
    home = cache_dir() / name
    built = home / binary
    if built.is_file():
        return built
    with exclusive_lock(cache_dir() / f"{name}.lock"):
        if built.is_file():
            return built
        go = find_go()
        if go is None:
            raise ToolchainError(
                f"the {what} is not cached in {home} and Go is not installed to build it.",
                hint="Install Go (https://go.dev/dl/) and run `bash scripts/setup.sh`.",
            )
        staging = home.with_name(home.name + ".building")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        environment = {**os.environ, **env, "GOBIN": str(staging), "CGO_ENABLED": "0"}
        args = [a.replace("{out}", str(staging / binary)) for a in command]
        logger.info("building the %s with %s (first use only)", what, go)
        began = time.monotonic()
        done = subprocess.run(
            ["nice", "-n", "10", str(go), *args],
            env=environment,
            cwd=cwd or staging,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            check=False,
        )
        if done.returncode != 0 or not (staging / binary).is_file():
            raise ToolchainError(
                f"building the {what} failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}",
                hint="Check the network to the Go module proxy ($GOPROXY) and try again.",
            )
        shutil.rmtree(home, ignore_errors=True)
        staging.rename(home)
        logger.info("%s built in %.0fs", what, time.monotonic() - began)
    return built


def stop(process: subprocess.Popen[bytes]) -> None:
    """Ends a receiver started for a test: terminate, then kill after 10 s."""
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def wait_ready(url: str, process: subprocess.Popen[bytes], log: Path, what: str, *, any_answer: bool = False) -> None:
    """Returns once ``url`` answers 2xx (with ``any_answer``: any HTTP status, for a path that only takes POST).

    Raises:
        ToolchainError: the process ended, or nothing answered within :data:`START_TIMEOUT_S` (its log's tail is in
            the message).
    """
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline and process.poll() is None:
        try:
            with urllib.request.urlopen(url, timeout=2):  # noqa: S310 (loopback)
                return
        except urllib.error.HTTPError:
            if any_answer:
                return
            time.sleep(0.1)
        except OSError:
            time.sleep(0.1)
    raise ToolchainError(f"the {what} at {url} did not become ready:\n{tail(log)}")
