"""A real local Spark Connect server: queries over ``sc://``, status, idempotent start, clear start-up errors, stop."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from dynamic_kafka._toolchain.process import free_port
from dynamic_kafka.cli.main import main
from dynamic_kafka.config import SparkConfig
from dynamic_kafka.errors import LocalSparkConnectError
from dynamic_kafka.local_spark_connect import ServerInfo, server_status, start_server

pytestmark = pytest.mark.integration


def _base_dir(info: ServerInfo) -> Path:
    return Path(info.log_file).parent


def _running_pid(info: ServerInfo) -> int:
    """The server's pid now (a crash test may have killed and restarted it since the session started)."""
    status = server_status(_base_dir(info))
    assert status is not None
    assert status.running
    return status.info.pid


def test_a_client_runs_queries_with_delta_over_the_remote(spark_connect_server: ServerInfo, tmp_path: Path) -> None:
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote(spark_connect_server.remote).create()
    try:
        assert [row.id for row in spark.range(3).collect()] == [0, 1, 2]
        table = str(tmp_path / "t")
        spark.range(5).write.format("delta").option("txnAppId", "p").option("txnVersion", 1).save(table)
        spark.range(5).write.format("delta").mode("append").option("txnAppId", "p").option("txnVersion", 1).save(table)
        assert spark.read.format("delta").load(table).count() == 5  # the repeated txn was skipped
        assert "sasl" in spark.conf.get("spark.redaction.regex")
    finally:
        spark.stop()


def test_the_server_drops_unused_kafka_consumers_soon_and_gives_idle_memory_back(
    spark_connect_server: ServerInfo,
) -> None:
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote(spark_connect_server.remote).create()
    try:
        for pool in ("cache", "fetchedData.cache"):
            assert spark.conf.get(f"spark.kafka.consumer.{pool}.timeout") == "30s"
    finally:
        spark.stop()
    pid = _running_pid(spark_connect_server)
    java_argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert b"-XX:G1PeriodicGCInterval=60000" in java_argv
    assert b"-XX:MaxHeapFreeRatio=30" in java_argv
    assert b"MALLOC_ARENA_MAX=2" in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")


def test_status_json_names_the_remote(spark_connect_server: ServerInfo, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["spark-connect", "status", "--json", "--base-dir", str(_base_dir(spark_connect_server))]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["remote"] == f"sc://127.0.0.1:{spark_connect_server.port}"
    assert status["running"] is True
    assert status["pid"] == _running_pid(spark_connect_server)


def test_up_again_leaves_the_running_server_alone(
    spark_connect_server: ServerInfo, capsys: pytest.CaptureFixture[str]
) -> None:
    base = str(_base_dir(spark_connect_server))
    argv = ["spark-connect", "up", "--json", "--base-dir", base, "--port", str(spark_connect_server.port)]
    assert main([*argv, "--master", "local[2]"]) == 0
    assert json.loads(capsys.readouterr().out)["pid"] == _running_pid(spark_connect_server)
    with pytest.raises(LocalSparkConnectError, match="already runs"):
        start_server(base_dir=_base_dir(spark_connect_server), port=spark_connect_server.port, master="local[1]")


def test_a_taken_port_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(LocalSparkConnectError, match=f"port {port} .* in use"):
            start_server(base_dir=tmp_path, port=port)


def test_a_server_that_does_not_come_up_reports_its_log(tmp_path: Path) -> None:
    with pytest.raises(LocalSparkConnectError, match="exited during start-up") as failure:
        start_server(base_dir=tmp_path, port=free_port(), conf={"spark.driver.extraJavaOptions": "-Xmx1k"})
    assert "last lines of" in str(failure.value)
    status = server_status(tmp_path)
    assert status is None or not status.running


def test_down_without_a_server_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["spark-connect", "down", "--base-dir", str(tmp_path)]) == 0
    assert "no running Spark Connect server" in capsys.readouterr().out


def test_the_session_factory_connects_when_the_config_names_a_remote(spark_connect_server: ServerInfo) -> None:
    from dynamic_kafka.spark.remote import is_remote
    from dynamic_kafka.spark.session import build_spark_session

    settings = SparkConfig(remote=spark_connect_server.remote, conf={"spark.sql.shuffle.partitions": "3"})
    spark = build_spark_session(settings)
    assert is_remote(spark)
    assert build_spark_session(settings) is spark
    assert spark.conf.get("spark.sql.shuffle.partitions") == "3"
    assert spark.range(4).count() == 4


def test_an_unreachable_server_is_a_retriable_error() -> None:
    from dynamic_kafka.errors import SparkConnectUnavailableError
    from dynamic_kafka.spark.session import build_spark_session

    settings = SparkConfig(remote=f"sc://127.0.0.1:{free_port()}", remote_retries=1, remote_max_backoff_ms=100)
    with pytest.raises(SparkConnectUnavailableError, match="did not answer") as failure:
        build_spark_session(settings)
    assert failure.value.retriable
