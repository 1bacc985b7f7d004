"""The local Spark server's reuse decision and fingerprint (``spark.local_server``), without starting Spark."""

from __future__ import annotations

from pathlib import Path

import pytest

from dynamic_kafka.config.models import SparkConfig
from dynamic_kafka.spark.local_server import LocalServer, ServerLaunch, reuse_decision
from dynamic_kafka.spark.session import spark_conf

JARS = [Path("/cache/delta-spark.jar"), Path("/cache/spark-sql-kafka.jar")]


def launch(settings: SparkConfig, *, jars: list[Path] = JARS, spark_version: str = "4.1.3") -> ServerLaunch:
    return ServerLaunch(settings, Path("/srv"), spark_conf(settings, jars=jars), spark_version)


def fingerprint(settings: SparkConfig, **changes: object) -> str:
    return launch(settings, **changes).fingerprint  # type: ignore[arg-type]


def record(fingerprint: str) -> LocalServer:
    return LocalServer(
        pid=1,
        port=40000,
        fingerprint=fingerprint,
        master="local[*]",
        spark_version="4.1.3",
        idle_minutes=30,
        started_at="2026-01-01T00:00:00+00:00",
        log_file="/srv/server.log",
    )


def test_the_fingerprint_follows_what_the_server_is_started_with_and_nothing_else() -> None:
    base = SparkConfig(local_server=True)
    same = fingerprint(base)
    assert fingerprint(SparkConfig(local_server=True, local_server_idle_minutes=5)) == same
    assert fingerprint(SparkConfig(local_server=True, session_per_pipeline=False)) == same
    changed = {
        "conf": fingerprint(SparkConfig(local_server=True, conf={"spark.sql.shuffle.partitions": "8"})),
        "memory": fingerprint(SparkConfig(local_server=True, conf={"spark.driver.memory": "2g"})),
        "master": fingerprint(SparkConfig(local_server=True, master="local[2]")),
        "jars": fingerprint(base, jars=[*JARS, Path("/cache/spark-avro.jar")]),
        "spark": fingerprint(base, spark_version="4.1.4"),
    }
    assert same not in changed.values()
    assert len(set(changed.values())) == len(changed)


def test_the_users_settings_reach_the_servers_command_line_and_win_over_the_servers_defaults() -> None:
    settings = SparkConfig(
        local_server=True,
        master="local[2]",
        conf={"spark.driver.memory": "3g", "spark.kafka.consumer.cache.timeout": "1min", "spark.jars": "/my.jar"},
    )
    argv = launch(settings).argv(41234)
    assert argv[argv.index("--master") + 1] == "local[2]"
    assert argv[argv.index("--driver-memory") + 1] == "3g"
    confs = [argv[i + 1] for i, arg in enumerate(argv) if arg == "--conf"]
    assert "spark.connect.grpc.binding.port=41234" in confs
    assert "spark.connect.grpc.binding.address=127.0.0.1" in confs
    assert "spark.kafka.consumer.cache.timeout=1min" in confs
    # The user's jar joins the resolved ones; no package is left for Spark to resolve at the server's start.
    assert f"spark.jars={JARS[0]},{JARS[1]},/my.jar" in confs
    assert not any(c.startswith("spark.jars.packages") for c in confs)


@pytest.mark.parametrize(
    ("recorded", "running", "answers", "decision"),
    [
        (None, False, False, "start"),
        ("same", False, False, "start"),  # the recorded server died (a reboot, a kill): a fresh one
        ("same", True, True, "reuse"),
        ("other", True, True, "replace"),  # started with other jars or settings: stop it, start anew
        ("same", True, False, "replace"),  # runs but does not accept connections
    ],
)
def test_a_run_reuses_only_a_running_answering_server_of_the_same_fingerprint(
    recorded: str | None, running: bool, answers: bool, decision: str
) -> None:
    server = None if recorded is None else record(recorded)
    assert reuse_decision(server, "same", running=running, answers=answers) == decision
