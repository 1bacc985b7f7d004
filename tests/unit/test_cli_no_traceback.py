"""No Python traceback reaches a user: a sink where no folder can be made is a problem of ``check`` and an error of
``plan``, and any OS or library error that reaches the CLI is the product's error, one JSON document with
``--json``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from dynamic_kafka.cli.failures import error_body
from dynamic_kafka.cli.main import main
from dynamic_kafka.errors import TopicRecreatedError
from dynamic_kafka.protocol.guard import RUN_LOCK_DIR_ENV

if TYPE_CHECKING:
    from pathlib import Path

METADATA = '{clusters: {east: {bootstrap_servers: "127.0.0.1:1"}}, streams: {orders: {east: [orders]}}}'

CONFIG = """
metadata_service: {type: file, path: metadata.yaml}
pipelines:
  - {id: under-a-file, streams: [orders], sink: {path: a-file/orders}, kafka_timeout_seconds: 1}
  - {id: under-proc, streams: [orders], sink: {path: /proc/dynamic-kafka/orders}, kafka_timeout_seconds: 1}
"""


@pytest.fixture
def config(tmp_path: Path) -> Path:
    (tmp_path / "a-file").write_text("not a folder")
    (tmp_path / "metadata.yaml").write_text(METADATA)
    path = tmp_path / "dynamic_kafka.yaml"
    path.write_text(CONFIG)
    return path


def test_check_says_where_no_table_can_be_created(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--json", "--config", str(config)]) == 3

    problems = json.loads(capsys.readouterr().out)["problems"]
    found = {(p["location"], p["message"].split(";")[0]) for p in problems}
    assert (
        "pipelines[0].sink.path",
        f"{config.parent / 'a-file'} is a file, not a folder: the sink table {config.parent / 'a-file/orders'} "
        "cannot be created under it",
    ) in found
    assert (
        "pipelines[1].sink.path",
        "/proc takes no folders: the sink table /proc/dynamic-kafka/orders cannot be created under it",
    ) in found


@pytest.mark.parametrize("pipeline", ["under-a-file", "under-proc"])
def test_plan_refuses_a_sink_where_no_folder_can_be_made(
    config: Path, pipeline: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", "--json", "--config", str(config), "--pipeline", pipeline]) == 1

    error = json.loads(capsys.readouterr().err)["error"]
    assert error["type"] == "ConfigError"
    assert "cannot be created under it" in error["message"]
    assert error["retriable"] is False


def test_an_os_error_in_a_run_is_a_json_error_document_not_a_traceback(config: Path) -> None:
    command = [sys.executable, "-m", "dynamic_kafka.cli.main", "run", "--json", "--config", str(config)]

    # The run-lock folder asked for is under a regular file: the OS refuses to make it.
    locks = {**os.environ, RUN_LOCK_DIR_ENV: str(config.parent / "a-file" / "locks")}
    done = subprocess.run(
        [*command, "--pipeline", "under-a-file"], capture_output=True, text=True, timeout=120, env=locks, check=False
    )

    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    error = json.loads(done.stderr)["error"]
    assert error["type"] == "HostError"
    assert "Not a directory" in error["message"]
    assert error["retriable"] is False


def test_any_unexpected_error_is_one_paragraph_naming_what_to_do(
    config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(path: object) -> object:
        raise RuntimeError("a library failed")

    monkeypatch.setattr("dynamic_kafka.operations.check.check_project", broken)

    assert main(["check", "--config", str(config)]) == 1

    err = capsys.readouterr().err
    assert err.startswith("dynamic-kafka: error: unexpected RuntimeError: a library failed.")
    assert "-v" in err
    assert "Traceback" not in err


def test_an_unknown_pipeline_id_gets_a_did_you_mean(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--config", str(config), "--pipeline", "under-a-fil"]) == 2

    err = capsys.readouterr().err
    assert (
        "no pipeline 'under-a-fil'; did you mean 'under-a-file'? Configured pipelines: under-a-file, under-proc."
        in (err)
    )


def test_the_json_error_document_holds_the_message_and_the_hint_apart_and_attributes_name_neither() -> None:
    error = TopicRecreatedError("east", "orders", "it has a new topic id", hint="Run `dynamic-kafka realign`.")
    body = error_body(error)
    assert body["hint"] == "Run `dynamic-kafka realign`."
    assert isinstance(body["message"], str)
    assert "realign" not in body["message"]
    assert str(error) == f"{body['message']} {body['hint']}"
    assert error.attributes() == {"cluster_id": "east", "topic": "orders"}
