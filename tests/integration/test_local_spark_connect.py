"""A real local Spark Connect server: queries over ``sc://``, status, idempotent start, clear start-up errors, stop."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from dynamic_kafka._toolchain.process import free_port, is_alive
from dynamic_kafka.cli.main import main
from dynamic_kafka.errors import LocalSparkConnectError
from dynamic_kafka.local_spark_connect import ServerInfo, server_status, start_server, stop_server

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.integration


@pytest.fixture(scope="session")
def spark_connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerInfo]:
    """One local Spark Connect server for the whole test session (local[2]), stopped at its end."""
    base_dir = tmp_path_factory.mktemp("spark-connect")
    info = start_server(base_dir=base_dir, port=free_port(), master="local[2]", driver_memory="1g")
    yield info
    stopped = stop_server(base_dir=base_dir)
    assert stopped is not None
    assert stopped.pid == info.pid
    assert not is_alive(info.pid, str(base_dir / "log4j2.properties"))
    status = server_status(base_dir)
    assert status is not None
    assert not status.running


def _base_dir(info: ServerInfo) -> Path:
    return Path(info.log_file).parent


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


def test_status_json_names_the_remote(spark_connect_server: ServerInfo, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["spark-connect", "status", "--json", "--base-dir", str(_base_dir(spark_connect_server))]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["remote"] == f"sc://127.0.0.1:{spark_connect_server.port}"
    assert status["running"] is True
    assert status["pid"] == spark_connect_server.pid


def test_up_again_leaves_the_running_server_alone(
    spark_connect_server: ServerInfo, capsys: pytest.CaptureFixture[str]
) -> None:
    base = str(_base_dir(spark_connect_server))
    argv = ["spark-connect", "up", "--json", "--base-dir", base, "--port", str(spark_connect_server.port)]
    assert main([*argv, "--master", "local[2]"]) == 0
    assert json.loads(capsys.readouterr().out)["pid"] == spark_connect_server.pid
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


def test_remote_session_factory_sets_session_conf(spark_connect_server: ServerInfo) -> None:
    from dynamic_kafka.spark_remote import RemoteSparkSettings, build_remote_session

    settings = RemoteSparkSettings(remote=spark_connect_server.remote, conf={"spark.sql.shuffle.partitions": "3"})
    spark = build_remote_session(settings)
    assert build_remote_session(settings) is spark
    assert spark.conf.get("spark.sql.shuffle.partitions") == "3"
    assert spark.range(4).count() == 4


def test_an_unreachable_server_is_a_retriable_error() -> None:
    from dynamic_kafka.errors import SparkConnectUnavailableError
    from dynamic_kafka.spark_remote import RemoteSparkSettings, build_remote_session

    settings = RemoteSparkSettings(remote=f"sc://127.0.0.1:{free_port()}", max_retries=1, max_backoff_ms=100)
    with pytest.raises(SparkConnectUnavailableError, match="did not answer") as failure:
        build_remote_session(settings)
    assert failure.value.retriable
