"""The command line a user expects, offline: ``--version``, ``check`` (every problem of both files at once, in plain
words, with "did you mean"), and ``--json`` errors as JSON. (Cron verdicts are compared with Dagster's in
tests/e2e/test_cron_agreement.py.)
"""

from __future__ import annotations

import importlib.metadata
import json
from typing import TYPE_CHECKING

import pytest

from dynamic_kafka.cli.main import main
from dynamic_kafka.config.loader import load_project_config
from dynamic_kafka.errors import ConfigError

if TYPE_CHECKING:
    from pathlib import Path

METADATA = """
clusters:
  east: {bootstrap_servers: "127.0.0.1:19092"}
streams:
  orders: {east: [orders]}
  payments: {east: [payments]}
"""

CONFIG = """
metadata_service: {type: file, path: metadata.yaml}
pipelines:
  - id: orders
    streams: [orders]
    sink: {path: data/orders}
    orchestration: {schedule: "*/15 * * * *"}
"""

# Mistakes in both files; `check` must list every one of them in one go.
BAD_CONFIG = """
metadata_service: {type: file, path: metadata.yaml}
pipelines:
  - id: orders
    streams: orders
    sink: {path: data/orders}
    max_records_per_partiton: 5
    on_data_loss: ignore
    orchestration: {schedule: "0 24 * * *"}
  - id: payments
    streams: [paymnts]
    sink: {path: data/payments}
    schedule: every hour  # the old place of orchestration.schedule, checked all the same
"""
BAD_METADATA = """
clusters:
  east: {bootstrap_server: "127.0.0.1:19092"}
streams:
  orders: {east: orders}
"""


def write_project(tmp_path: Path, config: str, metadata: str) -> Path:
    (tmp_path / "metadata.yaml").write_text(metadata)
    path = tmp_path / "dynamic_kafka.yaml"
    path.write_text(config)
    return path


def test_version_prints_the_installed_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])

    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"dynamic-kafka {importlib.metadata.version('dynamic-kafka')}"


def test_check_of_a_valid_project_says_ok_and_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_project(tmp_path, CONFIG, METADATA)

    assert main(["check", "--config", str(config)]) == 0

    out = capsys.readouterr().out
    assert out.startswith("ok: ")
    assert "pipelines: orders; streams: 2" in out


def test_check_lists_every_problem_of_both_files_in_plain_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_project(tmp_path, BAD_CONFIG, BAD_METADATA)

    assert main(["check", "--config", str(config), "--json"]) == 3

    report = json.loads(capsys.readouterr().out)
    found = {(p["file"].rsplit("/", 1)[-1], p["location"]): p["message"] for p in report["problems"]}
    assert found == {
        ("dynamic_kafka.yaml", "pipelines[0].streams"): "write a list: [orders]",
        ("dynamic_kafka.yaml", "pipelines[0].max_records_per_partiton"): (
            "unknown key; did you mean `max_records_per_partition`?"
        ),
        ("dynamic_kafka.yaml", "pipelines[0].on_data_loss"): "write 'fail' or 'skip' (got 'ignore')",
        (
            "dynamic_kafka.yaml",
            "pipelines[0].orchestration.schedule",
        ): "the hour field '24' is out of range: write 0-23",
        ("dynamic_kafka.yaml", "pipelines[1].schedule"): (
            "'every hour' has 2 fields; write five fields: minute hour day-of-month month day-of-week, "
            "e.g. '*/15 * * * *' or '0 6 * * mon-fri'"
        ),
        ("metadata.yaml", "clusters.east.bootstrap_servers"): "required key is missing",
        ("metadata.yaml", "clusters.east.bootstrap_server"): "unknown key; did you mean `bootstrap_servers`?",
        ("metadata.yaml", "streams.orders.east"): "write a list: [orders]",
    }
    assert report["ok"] is False


def test_check_validates_the_maintenance_schedule_and_retention(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    maintenance = '    maintenance: {schedule: "0 3 * * 8", vacuum_retention_hours: -1}\n'
    config = write_project(tmp_path, CONFIG + maintenance, METADATA)

    assert main(["check", "--config", str(config), "--json"]) == 3

    found = {p["location"]: p["message"] for p in json.loads(capsys.readouterr().out)["problems"]}
    assert set(found) == {"pipelines[0].maintenance.schedule", "pipelines[0].maintenance.vacuum_retention_hours"}
    assert found["pipelines[0].maintenance.schedule"] == "the day of week field '8' is out of range: write 0-7"


def test_check_validates_the_health_schedule_and_thresholds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    health = '    health: {schedule: "*/15 * * *", stuck_transaction_seconds: 0}\n'
    config = write_project(tmp_path, CONFIG + health, METADATA)

    assert main(["check", "--config", str(config), "--json"]) == 3

    found = {p["location"]: p["message"] for p in json.loads(capsys.readouterr().out)["problems"]}
    assert set(found) == {"pipelines[0].health.schedule", "pipelines[0].health.stuck_transaction_seconds"}


def test_check_finds_a_misspelled_stream_once_both_files_are_valid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_project(tmp_path, CONFIG.replace("[orders]", "[orders, paymnts]"), METADATA)

    assert main(["check", "--config", str(config)]) == 3

    out = capsys.readouterr().out
    assert "1 problem found:" in out
    assert "  pipelines[0].streams[1]: unknown stream 'paymnts'; did you mean 'payments'?" in out


def test_loading_a_config_says_what_to_write_and_suggests_keys(tmp_path: Path) -> None:
    config = write_project(tmp_path, BAD_CONFIG, METADATA)

    with pytest.raises(ConfigError) as caught:
        load_project_config(config)

    message = str(caught.value)
    assert "pipelines[0].streams: write a list: [orders]" in message
    assert "Input should be" not in message
    assert "did you mean `max_records_per_partition`?" in message


def test_json_errors_are_one_json_document_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_project(tmp_path, BAD_CONFIG, METADATA)

    assert main(["status", "--config", str(config), "--pipeline", "orders", "--json"]) == 1

    captured = capsys.readouterr()
    assert captured.out == ""
    error = json.loads(captured.err)["error"]
    assert error["type"] == "ConfigError"
    assert error["retriable"] is False
    assert "pipelines[0].streams: write a list: [orders]" in error["message"]


def test_json_usage_errors_are_json_too(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["backfill", "--pipeline", "p", "--start", "2026-01-02", "--end", "2026-01-01", "--json"])

    assert exited.value.code == 2
    error = json.loads(capsys.readouterr().err)["error"]
    assert error["type"] == "UsageError"
    assert "is empty: give an --end after the --start" in error["message"]
