"""The pure and pre-JVM parts of the local Kafka tooling: specs, poms, broker config, Java/Maven checks, CLI errors.

No test here starts a JVM or reaches the network: Java and Maven are replaced by small fake executables.
"""

from __future__ import annotations

import base64
import socket
import stat
from typing import TYPE_CHECKING

import pytest

from devtools.cli.main import main
from devtools.errors import LocalKafkaError
from devtools.local_kafka import (
    cluster_status,
    parse_cluster_spec,
    sasl_plain_credentials,
    start_clusters,
    stop_clusters,
)
from devtools.local_kafka.properties import (
    client_facing,
    new_cluster_id,
    parse_properties,
    render_properties,
    server_settings,
)
from devtools.local_kafka.security import SecurityModes, listener_settings, validate_scram_user
from dynamic_kafka._toolchain.java import find_java, parse_java_major
from dynamic_kafka.errors import ToolchainError

if TYPE_CHECKING:
    from pathlib import Path


@pytest.mark.parametrize(
    ("spec", "expected"),
    [("east:19092", ("east", 19092)), ("eu-west_2:1", ("eu-west_2", 1)), ("W:65535", ("W", 65535))],
)
def test_cluster_spec_parses_name_and_port(spec: str, expected: tuple[str, int]) -> None:
    assert parse_cluster_spec(spec) == expected


@pytest.mark.parametrize("spec", ["east", "east:", ":19092", "east:0", "east:65536", "east:x1", "../x:1", "a b:1"])
def test_bad_cluster_spec_is_rejected_with_the_expected_form(spec: str) -> None:
    with pytest.raises(LocalKafkaError, match=r"expected NAME:PORT") as info:
        parse_cluster_spec(spec)
    assert repr(spec) in str(info.value)


def test_sasl_plain_takes_the_password_apart_from_the_user() -> None:
    assert sasl_plain_credentials("ingest", lambda: "pa:ss-word") == ("ingest", "pa:ss-word")


@pytest.mark.parametrize(
    ("user", "password", "message"),
    [
        ("ingest:pw", "pw", "takes the user only"),
        ("ingest", None, "no SASL password for user 'ingest'"),
        ("ingest", "", "no SASL password"),
        ("in gest", "pw", "invalid SASL user"),
        ("", "pw", "invalid SASL user"),
        ("ingest", 'se"cret', "invalid SASL password"),
        ("ingest", "se\\cret", "invalid SASL password"),
    ],
)
def test_bad_sasl_plain_is_rejected_without_showing_the_password(user: str, password: str | None, message: str) -> None:
    with pytest.raises(LocalKafkaError, match=message) as info:
        sasl_plain_credentials(user, lambda: password)
    if password:
        assert password not in str(info.value)


def test_plaintext_broker_settings_are_a_small_single_node_kraft_combined_server(tmp_path: Path) -> None:
    settings = server_settings(port=19092, controller_port=19093, log_dir=tmp_path / "data")
    assert settings["process.roles"] == "broker,controller"
    assert settings["listeners"] == "CLIENT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"
    assert settings["controller.quorum.bootstrap.servers"] == "127.0.0.1:19093"
    assert "controller.quorum.voters" not in settings  # --standalone formatting requires its absence
    assert settings["listener.security.protocol.map"] == "CLIENT:PLAINTEXT,CONTROLLER:PLAINTEXT"
    assert settings["log.dirs"] == str(tmp_path / "data")
    expected = {
        "num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "false",
        "delete.topic.enable": "true",
        "log.retention.ms": "-1",
        "log.retention.check.interval.ms": "1000",
        "log.segment.delete.delay.ms": "1000",
    }
    assert {k: settings[k] for k in expected} == expected
    assert not any(key.startswith("sasl") or ".sasl." in key for key in settings)


def test_sasl_broker_settings_secure_only_the_client_listener(tmp_path: Path) -> None:
    settings = server_settings(port=1, controller_port=2, log_dir=tmp_path, sasl_plain=("ingest", "pw-1"))
    assert settings["listener.security.protocol.map"] == "CLIENT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT"
    assert settings["sasl.enabled.mechanisms"] == "PLAIN"
    assert settings["sasl.mechanism.inter.broker.protocol"] == "PLAIN"
    assert settings["inter.broker.listener.name"] == "CLIENT"
    jaas = settings["listener.name.client.plain.sasl.jaas.config"]
    assert jaas.startswith("org.apache.kafka.common.security.plain.PlainLoginModule required ")
    assert 'username="ingest" password="pw-1" user_ingest="pw-1";' in jaas


def test_rendered_properties_parse_back_to_the_same_settings(tmp_path: Path) -> None:
    settings = server_settings(port=1, controller_port=2, log_dir=tmp_path, sasl_plain=("ingest", "a=b c!"))
    assert parse_properties(render_properties(settings)) == settings


def test_client_facing_settings_differ_with_port_user_or_password(tmp_path: Path) -> None:
    def facing(port: int, sasl: tuple[str, str] | None) -> dict[str, str | None]:
        return client_facing(server_settings(port=port, controller_port=2, log_dir=tmp_path, sasl_plain=sasl))

    assert facing(1, ("u", "p")) == facing(1, ("u", "p"))
    assert len({repr(facing(*args)) for args in [(1, None), (3, None), (1, ("u", "p")), (1, ("u", "q"))]}) == 4


def test_cluster_ids_are_fresh_16_byte_kafka_uuids() -> None:
    ids = {new_cluster_id() for _ in range(200)}
    assert len(ids) == 200
    for cluster_id in ids:
        assert len(cluster_id) == 22
        assert not cluster_id.startswith("-")
        assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16


@pytest.mark.parametrize(
    ("output", "major"),
    [
        ('openjdk version "17.0.15" 2025-04-15', 17),
        ('java version "1.8.0_292"', 8),
        ('openjdk version "21" 2023-09-19', 21),
        ("no version here", None),
    ],
)
def test_java_major_version_is_read_from_java_version_output(output: str, major: int | None) -> None:
    assert parse_java_major(output) == major


def _fake_tool(folder: Path, name: str, script: str) -> Path:
    folder.mkdir(exist_ok=True)
    tool = folder / name
    tool.write_text(f"#!/bin/sh\n{script}\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return tool


def test_missing_java_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolchainError, match=r"Java was not found.*openjdk-17-jre-headless"):
        find_java()


def test_java_older_than_17_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_tool(tmp_path / "bin", "java", "echo 'openjdk version \"11.0.2\" 2019-01-15' >&2")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    with pytest.raises(ToolchainError, match=r"is not Java 17\+ .*11\.0\.2"):
        find_java()


def test_a_port_in_use_is_refused_before_anything_starts(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(LocalKafkaError, match=rf"port {port} \(cluster east\) is already in use"):
            start_clusters([("east", port)], base_dir=tmp_path)
    assert cluster_status(tmp_path) == []


@pytest.mark.parametrize(
    ("specs", "message"),
    [([], "no clusters given"), ([("a", 1), ("a", 2)], "repeated: a"), ([("a", 1), ("b", 1)], "repeated: 1")],
)
def test_bad_spec_lists_are_refused(tmp_path: Path, specs: list[tuple[str, int]], message: str) -> None:
    with pytest.raises(LocalKafkaError, match=message):
        start_clusters(specs, base_dir=tmp_path)


def test_stopping_an_unknown_cluster_names_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(LocalKafkaError, match=r"no local cluster named nope under .*; known: \(none\)"):
        stop_clusters(["nope"], base_dir=tmp_path)


def test_cli_reports_a_bad_spec_in_one_paragraph(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["local-kafka", "up", "east", "--base-dir", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("devtools: error: invalid cluster spec 'east'")
    assert captured.err.count("\n") == 1


def test_cli_takes_the_password_from_the_environment_and_never_prints_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DYNAMIC_KAFKA_SASL_PASSWORD", 'top"secret')
    assert main(["local-kafka", "up", "east:1", "--sasl-plain", "ingest", "--base-dir", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert "invalid SASL password" in captured.err
    assert "secret" not in captured.out + captured.err


def test_cli_refuses_a_password_on_the_command_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    argv = ["local-kafka", "up", "east:1", "--sasl-plain", "ingest:topsecret", "--base-dir", str(tmp_path)]
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert "takes the user only" in captured.err
    assert "topsecret" not in captured.out + captured.err


def test_cli_status_of_an_empty_folder(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["local-kafka", "status", "--base-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out == f"no local clusters under {tmp_path}\n"


# --- secured listeners ----------------------------------------------------------------------------------------------


def test_secured_listeners_are_added_beside_the_client_listener_with_their_settings(tmp_path: Path) -> None:
    modes = SecurityModes(tls=True, mtls=True, scram_user="reader", oauthbearer=True)
    ports = {"tls": 9101, "mtls": 9102, "scram": 9103, "oauthbearer": 9104}
    settings = server_settings(
        port=9092,
        controller_port=9093,
        log_dir=tmp_path,
        secured=listener_settings(modes, ports, tmp_path / "tls"),  # type: ignore[arg-type]
    )
    assert settings["listeners"] == (
        "CLIENT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093,TLS://127.0.0.1:9101,MTLS://127.0.0.1:9102,"
        "SCRAM://127.0.0.1:9103,OAUTH://127.0.0.1:9104"
    )
    assert settings["listener.security.protocol.map"] == (
        "CLIENT:PLAINTEXT,CONTROLLER:PLAINTEXT,TLS:SSL,MTLS:SSL,SCRAM:SASL_SSL,OAUTH:SASL_PLAINTEXT"
    )
    assert settings["listener.name.mtls.ssl.client.auth"] == "required"
    assert settings["listener.name.scram.sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    assert settings["listener.name.oauth.sasl.enabled.mechanisms"] == "OAUTHBEARER"
    assert settings["ssl.keystore.location"] == str(tmp_path / "tls" / "broker.pem")
    assert settings["inter.broker.listener.name"] == "CLIENT"


def test_a_scram_password_on_the_command_line_is_refused_without_showing_it() -> None:
    with pytest.raises(LocalKafkaError) as raised:
        validate_scram_user("reader:hunter2")
    assert "hunter2" not in str(raised.value)
    assert "DYNAMIC_KAFKA_SCRAM_PASSWORD" in str(raised.value)
