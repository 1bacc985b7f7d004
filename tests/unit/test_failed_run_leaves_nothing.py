"""A run that fails before its write leaves nothing behind in the project: no empty sink or state folder, no lock
file beside them (the run lock lives in the machine's run-lock folder, docs/operations.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from dynamic_kafka._toolchain.cache import CACHE_ENV

if TYPE_CHECKING:
    from pathlib import Path

# Port 1: nothing listens, so the brokers refuse the connection at once.
METADATA = '{clusters: {east: {bootstrap_servers: "127.0.0.1:1"}}, streams: {orders: {east: [orders]}}}'
CONFIG = """
metadata_service: {type: file, path: metadata.yaml}
pipelines:
  - {id: orders, streams: [orders], sink: {path: data/lake/orders}, kafka_timeout_seconds: 1}
"""


@pytest.mark.parametrize("as_json", [False, True], ids=["plain", "json"])
def test_a_run_that_fails_before_its_write_leaves_no_new_folder_or_file(tmp_path: Path, as_json: bool) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "metadata.yaml").write_text(METADATA)
    (project / "dynamic_kafka.yaml").write_text(CONFIG)
    before = sorted(project.rglob("*"))
    command = [sys.executable, "-m", "dynamic_kafka.cli.main", "run", "--config", str(project / "dynamic_kafka.yaml")]
    environment = {**os.environ, CACHE_ENV: str(tmp_path / "cache")}

    done = subprocess.run(
        [*command, "--pipeline", "orders", *(["--json"] if as_json else [])],
        capture_output=True,
        text=True,
        timeout=120,
        env=environment,
        check=False,
    )

    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    if as_json:
        assert json.loads(done.stderr)["error"]["type"] == "ClusterUnreachableError"
        assert done.stdout == ""
    else:
        # The run's progress (a log line per stage: stderr is no terminal here), then the error.
        *progress, error = done.stderr.splitlines()
        assert error.startswith("dynamic-kafka: error: ")
        assert [line.split(": ", 2)[-1].split(",")[0] for line in progress] == ["planning", "failed"]
    assert sorted(project.rglob("*")) == before, "a failed run left folders or files in the project"
    (lock,) = (tmp_path / "cache" / "run-locks").iterdir()
    assert lock.name.startswith("orders-")
    assert lock.name.endswith(".run.lock")
