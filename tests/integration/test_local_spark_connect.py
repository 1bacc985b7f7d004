"""A real local Spark Connect server: queries over ``sc://``, status, idempotent start, clear start-up errors, stop."""

from __future__ import annotations

import json
import os
import socket
import stat
import zipfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from devtools.cli.main import main
from devtools.errors import LocalSparkConnectError
from devtools.local_spark_connect import ServerInfo, server_status, start_server
from dynamic_kafka._toolchain.process import free_port
from dynamic_kafka.config.models import SparkConfig
from dynamic_kafka.errors import ConfigError, SparkConnectAuthenticationError

pytestmark = pytest.mark.integration


def _base_dir(info: ServerInfo) -> Path:
    return Path(info.log_file).parent


def _running_pid(info: ServerInfo) -> int:
    """The server's pid now (a crash test may have killed and restarted it since the session started)."""
    status = server_status(_base_dir(info))
    assert status is not None
    assert status.running
    return status.info.pid


def _pyspark_session(info: ServerInfo) -> Any:
    """A plain pyspark client of the server, as a user's own program writes it: the token in the URL (pyspark
    sends it over gRPC's local credentials to ``localhost``).
    """
    from pyspark.sql import SparkSession

    token = (_base_dir(info) / "token").read_text().strip()
    return SparkSession.builder.remote(f"sc://localhost:{info.port}/;token={token}").create()


def test_a_client_runs_queries_with_delta_over_the_remote(spark_connect_server: ServerInfo, tmp_path: Path) -> None:
    spark = _pyspark_session(spark_connect_server)
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
    spark = _pyspark_session(spark_connect_server)
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
    with pytest.raises(LocalSparkConnectError, match="did not come up: its process exited") as failure:
        start_server(base_dir=tmp_path, port=free_port(), conf={"spark.driver.extraJavaOptions": "-Xmx1k"})
    assert "last lines of" in str(failure.value)
    status = server_status(tmp_path)
    assert status is None or not status.running


def test_down_without_a_server_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["spark-connect", "down", "--base-dir", str(tmp_path)]) == 0
    assert "no running Spark Connect server" in capsys.readouterr().out


def test_the_session_factory_connects_when_the_config_names_a_remote(
    spark_connect_server: ServerInfo, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dynamic_kafka.spark.remote import is_remote
    from dynamic_kafka.spark.session import build_spark_session

    settings = SparkConfig(remote=spark_connect_server.remote, conf={"spark.sql.shuffle.partitions": "3"})
    spark = build_spark_session(settings)
    assert is_remote(spark)
    assert build_spark_session(settings) is spark
    assert spark.conf.get("spark.sql.shuffle.partitions") == "3"
    assert spark.range(4).count() == 4

    # A write's own settings: made and put back (an unset one unset again) in one round trip per step.
    from dynamic_kafka.spark.session import session_settings

    requests: list[str] = []
    config = spark.client.config
    monkeypatch.setattr(spark.client, "config", lambda op: (requests.append(op.WhichOneof("op_type")), config(op))[1])
    probe = "spark.dynamic_kafka.test.probe"
    with session_settings(spark, {"spark.sql.shuffle.partitions": "5", probe: "on"}):
        assert requests == ["get_with_default", "set"]
        assert (spark.conf.get("spark.sql.shuffle.partitions"), spark.conf.get(probe)) == ("5", "on")
    made = [r for r in requests if r != "get"]
    assert (spark.conf.get("spark.sql.shuffle.partitions"), spark.conf.get(probe, None)) == ("3", None)
    assert made == ["get_with_default", "set", "set", "unset"]


def test_the_session_in_use_is_the_one_pyspark_reads_its_implicit_settings_from(
    spark_connect_server: ServerInfo, monkeypatch: pytest.MonkeyPatch
) -> None:
    # pyspark reads some settings from the thread's active session, not the frame's (a datetime literal's type,
    # in a backfill's window). It makes only the first session created active; a process holding a pipeline's
    # shared session beside its own failed there once the other one was closed on the server.
    from pyspark.sql import functions as sf
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    from dynamic_kafka.spark.remote import build_remote_session

    monkeypatch.setenv("SPARK_CONNECT_MODE_ENABLED", "1")
    settings = SparkConfig(remote=spark_connect_server.remote)
    shared = build_remote_session(settings, shared_as=f"test {free_port()}")
    assert ConnectSession.getActiveSession() is shared
    own = build_remote_session(settings)
    assert ConnectSession.getActiveSession() is own

    shared.client.release_session()  # as the server closes an idle session
    window = own.range(1).select(sf.lit(datetime.now(UTC)).alias("t"))

    assert window.count() == 1


def test_every_attach_to_a_shared_session_states_its_redaction_again(
    spark_connect_server: ServerInfo, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Anyone holding the server's token who learns a shared session's id can attach to it and turn its redaction
    # off; a long-lived process (Dagster) that asks for the session again finds it cached.
    from dynamic_kafka.spark.remote import SESSION_REDACTION, build_remote_session

    monkeypatch.setenv("SPARK_CONNECT_MODE_ENABLED", "1")
    settings = SparkConfig(remote=spark_connect_server.remote)
    name = f"test {free_port()}"
    shared = build_remote_session(settings, shared_as=name)
    intruder = build_remote_session(SparkConfig(remote=f"{settings.remote}/;session_id={shared.client._session_id}"))
    setting = "spark.sql.redaction.options.regex"
    intruder.conf.set(setting, "(?i)nothing")
    assert shared.conf.get(setting) == "(?i)nothing"

    again = build_remote_session(settings, shared_as=name)

    assert again is shared
    assert again.conf.get(setting) == SESSION_REDACTION[setting]


def test_an_unreachable_server_is_a_retriable_error() -> None:
    from dynamic_kafka.errors import SparkConnectUnavailableError
    from dynamic_kafka.spark.session import build_spark_session

    settings = SparkConfig(remote=f"sc://127.0.0.1:{free_port()}", remote_retries=1, remote_max_backoff_ms=100)
    with pytest.raises(SparkConnectUnavailableError, match="did not answer") as failure:
        build_spark_session(settings)
    assert failure.value.retriable
    # The hint names a start a pip user can follow: pip's pyspark has bin/spark-submit and the server's class, but
    # no sbin/start-connect-server.sh.
    import pyspark

    hint = failure.value.hint or ""
    server_class = "org.apache.spark.sql.connect.service.SparkConnectServer"
    assert f"spark-submit --class {server_class}" in hint
    pyspark_home = Path(pyspark.__file__).parent
    assert (pyspark_home / "bin" / "spark-submit").is_file()
    assert not (pyspark_home / "sbin" / "start-connect-server.sh").exists()
    (connect_jar,) = (pyspark_home / "jars").glob("spark-connect_*.jar")
    with zipfile.ZipFile(connect_jar) as jar:
        assert server_class.replace(".", "/") + ".class" in jar.namelist()


# --- authentication -----------------------------------------------------------------------------------------------


def _refused(settings: SparkConfig) -> SparkConnectAuthenticationError:
    from dynamic_kafka.spark.session import build_spark_session

    with pytest.raises(SparkConnectAuthenticationError) as failure:
        build_spark_session(settings)
    assert not failure.value.retriable
    assert "SPARK_CONNECT_AUTHENTICATE_TOKEN" in (failure.value.hint or "")
    assert "devtools" not in (failure.value.hint or "")
    return failure.value


def test_the_server_refuses_a_client_without_its_token(
    spark_connect_server: ServerInfo, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No token in the environment: this client sends none.
    monkeypatch.delenv("SPARK_CONNECT_AUTHENTICATE_TOKEN", raising=False)
    error = _refused(SparkConfig(remote=spark_connect_server.remote, remote_retries=0))
    assert "requires a token and none was found" in str(error)
    assert "Traceback" not in str(error)


def test_the_server_refuses_a_wrong_token_and_the_error_does_not_show_it(
    spark_connect_server: ServerInfo, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WRONG_CONNECT_TOKEN", "not-the-server-token-5f1e")
    error = _refused(SparkConfig(remote=spark_connect_server.remote, token="${env:WRONG_CONNECT_TOKEN}"))
    assert "token was not accepted" in str(error)
    assert "not-the-server-token" not in f"{error} {error.hint}"


def test_a_token_reference_reaches_the_server_and_a_missing_one_is_named(spark_connect_server: ServerInfo) -> None:
    from dynamic_kafka.spark.session import build_spark_session

    token_file = _base_dir(spark_connect_server) / "token"
    spark = build_spark_session(SparkConfig(remote=spark_connect_server.remote, token=f"${{file:{token_file}}}"))
    assert spark.range(3).count() == 3
    with pytest.raises(ConfigError, match="NO_SUCH_CONNECT_TOKEN"):
        build_spark_session(SparkConfig(remote=spark_connect_server.remote, token="${env:NO_SUCH_CONNECT_TOKEN}"))


def test_the_token_is_in_a_private_file_and_in_no_command_line_log_or_record(spark_connect_server: ServerInfo) -> None:
    base = _base_dir(spark_connect_server)
    token_file = base / "token"
    token = token_file.read_text().strip()
    assert len(token) >= 32
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    pid = _running_pid(spark_connect_server)
    assert f"SPARK_CONNECT_AUTHENTICATE_TOKEN={token}".encode() in Path(f"/proc/{pid}/environ").read_bytes()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:  # the process ended meanwhile, or is not ours to read
                continue
            assert token.encode() not in cmdline, f"the token is on the command line of process {entry.name}"
    for path in base.iterdir():
        if path.is_file() and path != token_file:
            assert token.encode() not in path.read_bytes(), f"the token is in {path}"


def test_up_refuses_settings_that_look_like_secrets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for setting in (
        "spark.hadoop.fs.s3a.secret.key=abc",
        "spark.hadoop.fs.s3a.access.key=AKIA",
        "spark.connect.authenticate.token=abc",
        "spark.driver.extraJavaOptions=-Djavax.net.ssl.keyStorePassword=abc",
    ):
        argv = ["spark-connect", "up", "--base-dir", str(tmp_path), "--port", str(free_port()), "--conf", setting]
        assert main(argv) != 0
        err = capsys.readouterr().err
        assert f"{setting.partition('=')[0]!r} looks like a secret" in err
        assert "environment" in err or "generates its own token" in err
        assert "abc" not in err
        assert server_status(tmp_path) is None  # refused before anything started
    assert not os.listdir(tmp_path)
