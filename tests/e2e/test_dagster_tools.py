"""The demo workspace through Dagster's own tools: `dagster definitions validate` and a running webserver."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Any

import pytest

from dynamic_kafka.config.loader import load_project_config
from dynamic_kafka.dagster.names import (
    HEALTH_CHECK_NAMES,
    backfill_job_name,
    catch_up_sensor_name,
    dead_letter_replay_job_name,
    health_job_name,
    health_schedule_name,
    incremental_job_name,
    maintenance_job_name,
    maintenance_schedule_name,
    metadata_sensor_name,
    offsets_reset_job_name,
    offsets_show_job_name,
    schedule_name,
    table_checks_job_name,
)
from tests.support.e2e import REPO_ROOT

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.e2e

DEMO_CONFIG = REPO_ROOT / "examples" / "demo" / "dynamic_kafka.yaml"
BIN = REPO_ROOT / ".venv" / "bin"
STARTUP_TIMEOUT_S = 120.0

WORKSPACE_QUERY = """
{
  repositoriesOrError {
    __typename
    ... on RepositoryConnection {
      nodes {
        name
        jobs { name }
        schedules { name }
        sensors { name }
        assetNodes {
          assetKey { path }
          assetChecksOrError { ... on AssetChecks { checks { name } } }
        }
      }
    }
  }
  workspaceOrError {
    ... on Workspace {
      locationEntries {
        name
        locationOrLoadError { __typename ... on PythonError { message } }
      }
    }
  }
}
"""


def demo_env(dagster_home: Path) -> dict[str, str]:
    dagster_home.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO_ROOT / "examples" / "demo" / "dagster.yaml", dagster_home / "dagster.yaml")
    return {**os.environ, "DAGSTER_HOME": str(dagster_home), "DYNAMIC_KAFKA_CONFIG": str(DEMO_CONFIG)}


def expected_checks() -> set[tuple[str, str]]:
    """(sink asset name, check name) of every asset check: the same four on each pipeline's sink."""
    project = load_project_config(DEMO_CONFIG)
    checks = ("lag", "data_loss", "dead_letters", "completeness", *HEALTH_CHECK_NAMES)
    table_checks = ("lag", "data_loss", "dead_letters")  # per stream's table (a partition each)
    return {(p.id, check) for p in project.pipelines for check in checks} | {
        (f"{p.id}_tables", check) for p in project.pipelines if p.sink.per_stream for check in table_checks
    }


def expected_names() -> tuple[set[tuple[str, ...]], set[str], set[str], set[str]]:
    project = load_project_config(DEMO_CONFIG)
    # Per pipeline its sink and dead-letter tables, its backfill windows, and the Kafka streams upstream of them.
    assets = {("dynamic_kafka", p.id) for p in project.pipelines}
    assets |= {("dynamic_kafka", f"{p.id}_dead_letter") for p in project.pipelines}
    assets |= {("dynamic_kafka", f"{p.id}_backfill") for p in project.pipelines if p.orchestration.backfill}
    assets |= {("dynamic_kafka", f"{p.id}_tables") for p in project.pipelines if p.sink.per_stream}
    assets |= {("kafka", stream) for p in project.pipelines for stream in p.streams or ()}
    jobs = {incremental_job_name(p.id) for p in project.pipelines}
    jobs |= {backfill_job_name(p.id) for p in project.pipelines if p.orchestration.backfill}
    jobs |= {table_checks_job_name(p.id) for p in project.pipelines if p.sink.per_stream}
    jobs |= {
        name(p.id)
        for p in project.pipelines
        for name in (
            offsets_show_job_name,
            offsets_reset_job_name,
            dead_letter_replay_job_name,
            maintenance_job_name,
            health_job_name,
        )
    }
    schedules = {schedule_name(p.id) for p in project.pipelines if p.orchestration.schedule}
    schedules |= {maintenance_schedule_name(p.id) for p in project.pipelines if p.maintenance.schedule}
    schedules |= {health_schedule_name(p.id) for p in project.pipelines if p.health.schedule}
    sensors = {metadata_sensor_name(p.id) for p in project.pipelines}
    sensors |= {catch_up_sensor_name(p.id) for p in project.pipelines}
    return assets, jobs, schedules, sensors


def validate_workspace(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "dagster"), "definitions", "validate", "-w", "workspace.yaml"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_dagster_definitions_validate_with_nothing_set_loads_the_demo(tmp_path: Path) -> None:
    # A new user's first try: the repository root, no $DYNAMIC_KAFKA_CONFIG, no dynamic_kafka.yaml there.
    assert not (REPO_ROOT / "dynamic_kafka.yaml").exists()
    env = demo_env(tmp_path / "home")
    del env["DYNAMIC_KAFKA_CONFIG"]

    done = validate_workspace(env)

    assert done.returncode == 0, done.stdout + done.stderr
    assert "Validation successful" in done.stdout + done.stderr


def test_a_missing_config_named_by_the_variable_is_one_line_naming_it_and_the_example(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "dynamic_kafka.yaml"
    env = {**demo_env(tmp_path / "home"), "DYNAMIC_KAFKA_CONFIG": str(missing)}

    done = validate_workspace(env)

    assert done.returncode == 1
    (line,) = [x for x in (done.stdout + done.stderr).splitlines() if x.startswith("dynamic_kafka.errors.ConfigError")]
    assert f"$DYNAMIC_KAFKA_CONFIG names {missing}, which does not exist." in line
    assert f"Copy {DEMO_CONFIG} there" in line
    assert "FileNotFoundError" not in done.stdout + done.stderr


def test_dagster_definitions_validate_names_a_broken_config(tmp_path: Path) -> None:
    broken = tmp_path / "dynamic_kafka.yaml"
    broken.write_text("metadata_service: {type: file, path: m.yaml}\npipelines:\n  - id: orders\n    sink: {}\n")
    env = {**demo_env(tmp_path / "home"), "DYNAMIC_KAFKA_CONFIG": str(broken)}

    done = validate_workspace(env)

    assert done.returncode == 1
    output = done.stdout + done.stderr
    assert str(broken) in output
    assert "pipelines[0].sink.path: required key is missing" in output


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def graphql(port: int, query: str) -> dict[str, Any]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql",
        data=json.dumps({"query": query}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 (loopback, our own server)
        answer: dict[str, Any] = json.load(response)
    assert "errors" not in answer, answer
    return answer["data"]


def test_webserver_lists_every_pipelines_asset_job_schedule_and_sensor(tmp_path: Path) -> None:
    port = free_port()
    log = (tmp_path / "webserver.log").open("w")
    server = subprocess.Popen(
        [str(BIN / "dagster-webserver"), "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
        cwd=REPO_ROOT,
        env=demo_env(tmp_path / "home"),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        data: dict[str, Any] = {}
        while time.monotonic() < deadline:
            assert server.poll() is None, (tmp_path / "webserver.log").read_text()
            try:
                data = graphql(port, WORKSPACE_QUERY)
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                data = {}
            if data.get("repositoriesOrError", {}).get("nodes"):
                break
            errors = [
                e["locationOrLoadError"]
                for e in data.get("workspaceOrError", {}).get("locationEntries", [])
                if (e.get("locationOrLoadError") or {}).get("__typename") == "PythonError"
            ]
            assert not errors, errors
            time.sleep(0.5)
        else:
            pytest.fail(f"the webserver listed no repository within {STARTUP_TIMEOUT_S}s: {data}")

        (repo,) = data["repositoriesOrError"]["nodes"]
        assets, jobs, schedules, sensors = expected_names()
        assert {tuple(a["assetKey"]["path"]) for a in repo["assetNodes"]} == assets
        checks = {
            (a["assetKey"]["path"][-1], c["name"])
            for a in repo["assetNodes"]
            for c in (a.get("assetChecksOrError") or {}).get("checks", [])
        }
        assert checks == expected_checks()
        assert {j["name"] for j in repo["jobs"] if not j["name"].startswith("__")} == jobs
        assert {s["name"] for s in repo["schedules"]} == schedules
        assert {s["name"] for s in repo["sensors"]} == sensors
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=30)
        log.close()
