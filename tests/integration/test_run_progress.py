"""Progress of a run on stderr, through the CLI as a user runs it (a fresh process, the session's Spark Connect
server): periodic log lines when stderr is not a terminal (the stage, the offsets planned, Spark's bytes and tasks,
the elapsed time), never anything on stdout, and nothing at all with ``--json``.
"""

from __future__ import annotations

import json
from itertools import groupby
from typing import TYPE_CHECKING

import pytest

from devtools.testing.kafka import Record, create_topic, produce, unique_name
from devtools.testing.pipeline import PipelineHarness

if TYPE_CHECKING:
    from pathlib import Path

    from devtools.local_kafka import ClusterEndpoint
    from devtools.local_spark_connect import ServerInfo

pytestmark = pytest.mark.integration

PROGRESS = " INFO dynamic_kafka.progress: "


def test_a_run_logs_its_progress_on_stderr_and_nothing_with_json(
    kafka_clusters: dict[str, ClusterEndpoint], spark_connect_server: ServerInfo, tmp_path: Path
) -> None:
    east = kafka_clusters["east"].bootstrap_servers
    topic = unique_name("progress")
    create_topic(east, topic, 1)
    harness = PipelineHarness(tmp_path, clusters={"east": east}, spark_config={"remote": spark_connect_server.remote})
    harness.set_streams({"orders": {"east": [topic]}})
    produce(east, topic, [Record(value=f"a{i}".encode()) for i in range(5)])

    done = harness.cli("run")

    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("pipeline p: run 1 committed: 5 records read"), done.stdout
    assert "INFO" not in done.stdout
    lines = [line.split(PROGRESS, 1)[1] for line in done.stderr.splitlines() if PROGRESS in line]
    # A stage that lasts is logged again every 10 seconds (a small run on a busy machine can take a minute).
    stages = [stage for stage, _ in groupby(line.split(",", 1)[0] for line in lines)]
    assert stages == [
        "run p: planning",
        "run p: checking Spark and the sink",
        "run p: reading and writing",
        "run p: committing",
        "run p: done",
    ], lines
    reading = [line for line in lines if line.startswith("run p: reading and writing")]
    assert reading[0].startswith("run p: reading and writing, 5 offsets planned, ")
    assert lines[-1].startswith("run p: done, 5 offsets planned, ")
    assert lines[-1].endswith("s")

    produce(east, topic, [Record(value=f"b{i}".encode()) for i in range(3)])
    done = harness.cli("run", "--json")

    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["records"] == 3
    assert done.stderr == ""
