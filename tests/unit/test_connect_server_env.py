"""The environment a local Spark Connect server (the managed one, and the development server) is started with."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from dynamic_kafka.spark.connect_server import server_env

if TYPE_CHECKING:
    from pathlib import Path

    import pytest


def test_the_servers_python_workers_run_this_interpreter_whoever_started_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Spark Connect starts a UDF's Python worker (Protobuf decoding) as $PYSPARK_PYTHON, else `python3` on PATH,
    # which may lack pyarrow. A server started by a process that never built an in-process session (the CLI, or a
    # test session whose first Spark user is a Connect client) has no such variable to inherit.
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.delenv("PYSPARK_DRIVER_PYTHON", raising=False)

    env = server_env(tmp_path, java=tmp_path / "jdk" / "bin" / "java", token="t", master="local[2]")

    assert env["PYSPARK_PYTHON"] == sys.executable
