"""The product's command shows only product commands; the development services have their own command,
``python -m devtools SERVICE up|down|status``, with the same subcommands and options they had, and their own errors.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from devtools.cli.main import main as devtools_main
from devtools.errors import DevtoolsError, LocalKafkaError
from dynamic_kafka.cli.main import main as product_main
from dynamic_kafka.errors import DynamicKafkaError

if TYPE_CHECKING:
    from pathlib import Path

SERVICES = ("local-kafka", "local-postgres", "local-registry", "local-s3", "spark-cluster", "spark-connect")


def _help(main: object, argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert callable(main)
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 0
    return capsys.readouterr().out


def test_product_help_lists_product_commands_only(capsys: pytest.CaptureFixture[str]) -> None:
    shown = _help(product_main, ["--help"], capsys)
    assert "plan" in shown
    assert "run" in shown
    for service in SERVICES:
        assert service not in shown
    with pytest.raises(SystemExit) as refused:
        product_main(["local-kafka", "status"])
    assert refused.value.code == 2


def test_devtools_command_has_every_service_with_up_down_status(capsys: pytest.CaptureFixture[str]) -> None:
    shown = _help(devtools_main, ["--help"], capsys)
    assert "python -m devtools" in shown
    for service in SERVICES:
        assert service in shown
        assert "{up,down,status}" in _help(devtools_main, [service, "--help"], capsys)
    assert "--sasl-plain" in _help(devtools_main, ["local-kafka", "up", "--help"], capsys)
    assert "--master" in _help(devtools_main, ["spark-connect", "up", "--help"], capsys)
    assert "--worker-cores" in _help(devtools_main, ["spark-cluster", "up", "--help"], capsys)


def test_a_spark_cluster_without_a_worker_is_refused_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["spark-cluster", "up", "--workers", "0", "--json", "--base-dir", str(tmp_path)]
    assert devtools_main(argv) == 1
    error = json.loads(capsys.readouterr().err)["error"]
    assert error["type"] == "LocalSparkClusterError"
    assert "at least one worker" in error["message"]
    assert list(tmp_path.iterdir()) == []
    assert devtools_main(["spark-cluster", "status", "--json", "--base-dir", str(tmp_path)]) == 0
    assert json.loads(capsys.readouterr().out) is None


def test_devtools_errors_have_their_own_root() -> None:
    assert issubclass(LocalKafkaError, DevtoolsError)
    assert not issubclass(LocalKafkaError, DynamicKafkaError)


def test_devtools_error_as_json_document(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert devtools_main(["local-kafka", "up", "east", "--json", "--base-dir", str(tmp_path)]) == 1
    error = json.loads(capsys.readouterr().err)["error"]
    assert error["type"] == "LocalKafkaError"
    assert "invalid cluster spec 'east'" in error["message"]


def test_python_dash_m_devtools_runs_the_command(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "devtools", "local-s3", "status", "--json", "--base-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"running": False}
