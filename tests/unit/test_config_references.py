"""References in every string field of the config and metadata files: non-secret values resolved when the file is
loaded (one config for several environments), secret ones kept as references until a client is built, unknown
kinds refused with the field and the file named; and the CLI finding its config through ``$DYNAMIC_KAFKA_CONFIG``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from dynamic_kafka.cli.main import main
from dynamic_kafka.config.loader import load_project_config
from dynamic_kafka.errors import ConfigError
from dynamic_kafka.metadata.file import FileMetadataService

if TYPE_CHECKING:
    from pathlib import Path

METADATA = """
clusters:
  east:
    bootstrap_servers: "${env:DK_TEST_BROKERS:-127.0.0.1:19092}"
    properties: {sasl.password: "${env:DK_TEST_PASSWORD}"}
streams:
  orders: {east: [orders]}
"""

CONFIG = """
metadata_service: {type: file, path: metadata.yaml}
pipelines:
  - {id: orders, streams: [orders], sink: {path: "${env:DK_TEST_LAKE}/orders"},
     orchestration: {schedule: "${env:DK_TEST_SCHEDULE:-*/15 * * * *}"}}
"""


def write_project(tmp_path: Path, config: str = CONFIG, metadata: str = METADATA) -> Path:
    (tmp_path / "metadata.yaml").write_text(metadata)
    path = tmp_path / "dynamic_kafka.yaml"
    path.write_text(config)
    return path


@pytest.fixture(autouse=True)
def environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("DK_TEST_BROKERS", "DK_TEST_SCHEDULE", "DK_UNSET", "DYNAMIC_KAFKA_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DK_TEST_LAKE", str(tmp_path / "lake-staging"))
    monkeypatch.setenv("DK_TEST_PASSWORD", "hunter2")


def test_a_sink_path_and_a_schedule_take_references_resolved_when_loaded(tmp_path: Path) -> None:
    config = load_project_config(write_project(tmp_path))

    pipeline = config.pipeline("orders")
    assert pipeline.sink.path.uri == str(tmp_path / "lake-staging" / "orders")
    assert pipeline.orchestration.schedule == "*/15 * * * *"


def test_bootstrap_servers_resolve_and_a_secret_stays_a_reference_until_a_client_is_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_project(tmp_path)
    monkeypatch.setenv("DK_TEST_BROKERS", "broker-prod:9092")

    cluster = FileMetadataService(tmp_path / "metadata.yaml").describe_streams(["orders"])["orders"].clusters["east"]

    assert cluster.bootstrap_servers == "broker-prod:9092"
    assert cluster.properties["sasl.password"] == "${env:DK_TEST_PASSWORD}"
    assert cluster.client_properties()["sasl.password"] == "hunter2"


def test_an_unknown_reference_kind_names_the_field_the_file_and_the_fix(tmp_path: Path) -> None:
    path = write_project(tmp_path, CONFIG.replace("${env:DK_TEST_LAKE}", "${envv:DK_TEST_LAKE}"))

    with pytest.raises(ConfigError) as raised:
        load_project_config(path)

    message = str(raised.value)
    assert message.startswith(f"{path}: ")
    assert "pipelines[0].sink.path: ${envv:DK_TEST_LAKE} is not a reference dynamic-kafka knows" in message
    assert "did you mean ${env:...}?" in message


def test_an_unknown_reference_kind_in_a_secret_is_an_error_not_the_password(tmp_path: Path) -> None:
    write_project(tmp_path, metadata=METADATA.replace("${env:DK_TEST_PASSWORD}", "${envv:DK_TEST_PASSWORD}"))

    with pytest.raises(ConfigError) as raised:
        FileMetadataService(tmp_path / "metadata.yaml").get_all_streams()

    assert "clusters.east.properties.sasl.password: ${envv:DK_TEST_PASSWORD} is not a reference" in str(raised.value)


def test_an_unset_variable_in_a_resolved_field_is_a_load_error_naming_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DK_TEST_LAKE")

    with pytest.raises(ConfigError) as raised:
        load_project_config(write_project(tmp_path))

    assert "pipelines[0].sink.path: environment variable 'DK_TEST_LAKE' is not set" in str(raised.value)


def test_the_cli_finds_its_config_through_dynamic_kafka_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_project(tmp_path)
    monkeypatch.chdir(tmp_path / "..")
    monkeypatch.setenv("DYNAMIC_KAFKA_CONFIG", str(config))

    assert main(["check", "--json"]) == 0

    assert json.loads(capsys.readouterr().out)["files"][0] == str(config)


def test_loading_reads_no_secret_a_sensitive_spark_setting_stays_a_reference(tmp_path: Path) -> None:
    spark = (
        'spark: {conf: {spark.hadoop.fs.s3a.secret.key: "${env:DK_TEST_PASSWORD}", '
        'spark.app.id: "${env:DK_UNSET:-a}"}}\n'
    )

    conf = load_project_config(write_project(tmp_path, CONFIG + spark)).spark.conf

    assert conf == {
        "spark.hadoop.fs.s3a.secret.key": "${env:DK_TEST_PASSWORD}",
        "spark.app.id": "a",
    }


@pytest.mark.parametrize(
    "order",
    [
        ("--config", "{config}", "-v", "check", "--json"),
        ("check", "--json", "-v", "--config", "{config}"),
        ("-v", "check", "--json", "--config", "{config}"),
    ],
)
def test_config_and_verbose_are_accepted_before_or_after_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], order: tuple[str, ...]
) -> None:
    config = write_project(tmp_path)

    assert main([part.format(config=config) for part in order]) == 0

    assert json.loads(capsys.readouterr().out)["files"][0] == str(config)
