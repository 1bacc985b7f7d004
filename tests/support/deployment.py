"""Dagster as a team deploys it, for end-to-end tests: PostgreSQL storage, a code server (``dagster code-server
start``), ``dagster-webserver`` and ``dagster-daemon run`` as separate processes, the default run launcher (every run
in its own process, a child of the code server), driven through the webserver's GraphQL API.

Usage (session fixtures, see test_deployment.py)::

    with run_deployment(project.config_path, home, postgres) as deployment:
        run_id = deployment.launch_run("orders_incremental")
        deployment.wait_for_run(run_id)  # "SUCCESS", or fails with the run's error events

Why a code server of its own (a ``grpc_server`` entry in the deployment's workspace) rather than the repository's
``workspace.yaml`` (``python_module``), for which the webserver and the daemon each spawn their own code server:
those spawned servers shut down when a heartbeat is 20 s late, which happened on the loaded test machine, and the
daemon re-reads a ``python_module`` workspace only every 60 s. One server that both connect to has neither problem,
and it is the shape a deployment with a separate code container has. What the deployment loads is still fixed when
it starts, so every pipeline the tests need must be in the project config before :func:`run_deployment`. Metadata
files are re-read on every call, so tests change those freely.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import yaml

from dynamic_kafka._toolchain.process import free_port
from tests.support.e2e import REPO_ROOT

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping
    from pathlib import Path

    from devtools.local_postgres import LocalPostgres

log = logging.getLogger(__name__)

BIN = REPO_ROOT / ".venv" / "bin"
STARTUP_TIMEOUT_S = 180.0
RUN_TIMEOUT_S = 900.0  # a run starts its own Spark JVM; on a 2-core machine at load 40 one run took 9 minutes
# The daemon's StartRun call to the code server waits for the run worker process to start; at load 40 that took
# longer than Dagster's default gRPC timeout (60 s), and the run was failed with "Unexpected error in IPC client".
GRPC_TIMEOUT_S = "300"
PASSWORD_ENV = "DAGSTER_PG_PASSWORD"
LOCATION = "dynamic_kafka"
FINISHED = frozenset({"SUCCESS", "FAILURE", "CANCELED"})


def write_dagster_home(home: Path, server: LocalPostgres, code_server_port: int) -> Path:
    """A DAGSTER_HOME: the demo's dagster.yaml (run queue limits, managed loggers) plus dagster-postgres storage and
    a one-second run queue, and a workspace.yaml pointing at the code server.

    The password is read from ``$DAGSTER_PG_PASSWORD`` when Dagster starts; it is not in the file.
    """
    home.mkdir(parents=True, exist_ok=True)
    settings: dict[str, Any] = yaml.safe_load((REPO_ROOT / "examples" / "demo" / "dagster.yaml").read_text())
    settings["storage"] = {
        "postgres": {
            "postgres_db": {
                "username": server.user,
                "password": {"env": PASSWORD_ENV},
                "hostname": server.host,
                "db_name": server.database,
                "port": server.port,
                # SQLAlchemy 2.1 maps plain "postgresql" to psycopg 3, which is not installed; dagster-postgres
                # brings psycopg2.
                "scheme": "postgresql+psycopg2",
            }
        }
    }
    # The queue is polled every 5 s by default; every launched run waits for it, so the tests poll every second.
    settings["run_coordinator"] = {
        "module": "dagster.core.run_coordinator",
        "class": "QueuedRunCoordinator",
        "config": {"dequeue_interval_seconds": 1},
    }
    path = home / "dagster.yaml"
    path.write_text(yaml.safe_dump(settings, sort_keys=False), encoding="utf-8")
    workspace = {
        "load_from": [{"grpc_server": {"host": "127.0.0.1", "port": code_server_port, "location_name": LOCATION}}]
    }
    (home / "workspace.yaml").write_text(yaml.safe_dump(workspace, sort_keys=False), encoding="utf-8")
    return path


class GraphQLError(AssertionError):
    """The webserver answered with errors, or with a result type that is not the success type."""


@dataclass
class Deployment:
    """A running webserver + daemon pair and GraphQL helpers against the webserver."""

    home: Path
    port: int
    env: Mapping[str, str]
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    location: str = ""
    repository: str = ""
    timings: dict[str, float] = field(default_factory=dict)

    def log_path(self, name: str) -> Path:
        return self.home / f"{name}.log"

    def logs(self, lines: int = 40) -> str:
        """The last lines of each process's log, for assertion messages."""
        out = []
        for name in self.processes:
            text = self.log_path(name).read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {name} ---\n" + "\n".join(text))
        return "\n".join(out)

    def graphql(self, query: str, variables: Mapping[str, Any] | None = None, *, timeout_s: float = 30) -> Any:
        """POSTs a GraphQL document; returns ``data`` or raises :class:`GraphQLError` on ``errors``."""
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/graphql",
            data=json.dumps({"query": query, "variables": dict(variables or {})}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 (loopback, our server)
            answer: dict[str, Any] = json.load(response)
        if answer.get("errors"):
            raise GraphQLError(f"GraphQL errors: {answer['errors']}")
        return answer["data"]

    def _check_alive(self) -> None:
        for name, proc in self.processes.items():
            if proc.poll() is not None:
                raise AssertionError(f"{name} exited with {proc.returncode}:\n{self.logs()}")

    def wait_until_ready(self, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        """Until the webserver lists the code location and the daemon's run queue and sensor daemons are healthy."""
        deadline = time.monotonic() + timeout_s
        last: Any = None
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                last = self.graphql(_READY_QUERY, timeout_s=10)
            except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
                last = repr(e)
                time.sleep(0.5)
                continue
            entries = last["workspaceOrError"].get("locationEntries", [])
            errors = [e for e in entries if (e["locationOrLoadError"] or {}).get("__typename") == "PythonError"]
            if errors:
                raise AssertionError(f"the code location failed to load: {errors}")
            loaded = [e for e in entries if (e["locationOrLoadError"] or {}).get("__typename") == "RepositoryLocation"]
            daemons = {d["daemonType"]: d["healthy"] for d in last["instance"]["daemonHealth"]["allDaemonStatuses"]}
            if loaded and daemons.get("QUEUED_RUN_COORDINATOR") and daemons.get("SENSOR"):
                self.location = loaded[0]["name"]
                self.repository = loaded[0]["locationOrLoadError"]["repositories"][0]["name"]
                return
            time.sleep(0.5)
        raise AssertionError(f"the deployment was not ready within {timeout_s}s: {last}\n{self.logs()}")

    def launch_run(self, job_name: str, *, tags: Mapping[str, str] | None = None) -> str:
        """Launches a run of ``job_name`` (the run queue, then the daemon, start it); returns its run id."""
        params = {
            "selector": {
                "repositoryLocationName": self.location,
                "repositoryName": self.repository,
                "jobName": job_name,
            },
            "runConfigData": {},
            "executionMetadata": {"tags": [{"key": k, "value": v} for k, v in (tags or {}).items()]},
        }
        result = self.graphql(_LAUNCH_RUN, {"executionParams": params})["launchRun"]
        if result["__typename"] != "LaunchRunSuccess":
            raise GraphQLError(f"launchRun of {job_name}: {result}")
        run_id: str = result["run"]["runId"]
        return run_id

    def start_sensor(self, sensor_name: str) -> str:
        """Turns a sensor on (as the UI's toggle does); returns its new status (``RUNNING``)."""
        selector = {
            "repositoryLocationName": self.location,
            "repositoryName": self.repository,
            "sensorName": sensor_name,
        }
        result = self.graphql(_START_SENSOR, {"selector": selector})["startSensor"]
        if result["__typename"] != "Sensor":
            raise GraphQLError(f"startSensor {sensor_name}: {result}")
        status: str = result["sensorState"]["status"]
        return status

    def stop_sensor(self, sensor_name: str) -> None:
        selector = {
            "repositoryLocationName": self.location,
            "repositoryName": self.repository,
            "sensorName": sensor_name,
        }
        sensor = self.graphql(_SENSOR_ID, {"selector": selector})["sensorOrError"]
        if sensor["__typename"] != "Sensor":
            raise GraphQLError(f"sensor {sensor_name}: {sensor}")
        # stopSensor takes the sensor's id (Dagster 1.13), not its selector.
        result = self.graphql(_STOP_SENSOR, {"id": sensor["id"]})["stopSensor"]
        if result["__typename"] != "StopSensorMutationResult":
            raise GraphQLError(f"stopSensor {sensor_name}: {result}")

    def run(self, run_id: str) -> dict[str, Any]:
        """The run's id, status, tags and creation and start/end times (epoch seconds)."""
        result: dict[str, Any] = self.graphql(_RUN, {"runId": run_id})["runOrError"]
        if result["__typename"] != "Run":
            raise GraphQLError(f"run {run_id}: {result}")
        return result

    def runs(self, job_name: str) -> list[dict[str, Any]]:
        """Every run of ``job_name``, newest first."""
        result = self.graphql(_RUNS, {"filter": {"pipelineName": job_name}})["runsOrError"]
        if result["__typename"] != "Runs":
            raise GraphQLError(f"runs of {job_name}: {result}")
        runs: list[dict[str, Any]] = result["results"]
        return runs

    def run_messages(self, run_id: str) -> list[dict[str, Any]]:
        """The run's event log (type, message, level, timestamp in epoch milliseconds, event type), oldest first."""
        events: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            result = self.graphql(_LOGS, {"runId": run_id, "cursor": cursor})["logsForRun"]
            if result["__typename"] != "EventConnection":
                raise GraphQLError(f"logs of {run_id}: {result}")
            events.extend(result["events"])
            if not result["hasMore"]:
                return events
            cursor = result["cursor"]

    def worker_pid(self, run_id: str, *, timeout_s: float = RUN_TIMEOUT_S) -> int:
        """The pid of the run's worker process, from the engine event "Started process for run (pid: N)"."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._check_alive()
            for event in self.run_messages(run_id):
                found = re.search(r"Started process for run \(pid: (\d+)\)", event.get("message") or "")
                if found:
                    return int(found.group(1))
            if self.run(run_id)["status"] in FINISHED:
                break
            time.sleep(0.2)
        raise AssertionError(f"run {run_id} reported no worker pid: {self.run_messages(run_id)}")

    def materializations(self, run_id: str) -> list[dict[str, Any]]:
        """The run's asset materializations: ``{"asset": [path...], "partition": ..., "metadata": {label: value}}``."""
        found = []
        for event in self.run_messages(run_id):
            if event["__typename"] == "MaterializationEvent":
                found.append(
                    {
                        "asset": event["assetKey"]["path"],
                        "partition": event.get("partition"),
                        "metadata": {m["label"]: metadata_value(m) for m in event["metadataEntries"]},
                    }
                )
        return found

    def launch_asset_backfill(self, asset_path: list[str], partitions: list[str]) -> str:
        """Launches a backfill of ``partitions`` of one asset (as the UI's "Materialize selected" does); returns its
        id. The daemon's backfill loop (every 30 s) submits its runs."""
        params = {"assetSelection": [{"path": asset_path}], "partitionNames": partitions, "fromFailure": False}
        result = self.graphql(_LAUNCH_BACKFILL, {"params": params})["launchPartitionBackfill"]
        if result["__typename"] != "LaunchBackfillSuccess":
            raise GraphQLError(f"launchPartitionBackfill of {asset_path}: {result}")
        backfill_id: str = result["backfillId"]
        return backfill_id

    def runs_tagged(self, key: str, value: str) -> list[dict[str, Any]]:
        """Every run with the tag ``key=value``, newest first."""
        result = self.graphql(_RUNS, {"filter": {"tags": [{"key": key, "value": value}]}})["runsOrError"]
        if result["__typename"] != "Runs":
            raise GraphQLError(f"runs tagged {key}={value}: {result}")
        runs: list[dict[str, Any]] = result["results"]
        return runs

    def materialized_ranges(self, asset_path: list[str]) -> list[tuple[str, str]]:
        """The materialized ranges ``(first, last partition key)`` of a time-partitioned asset: the partition view's
        filled windows."""
        result = self.graphql(_PARTITIONS, {"key": {"path": asset_path}})["assetNodeOrError"]
        if result["__typename"] != "AssetNode":
            raise GraphQLError(f"asset {asset_path}: {result}")
        ranges = result["assetPartitionStatuses"]["ranges"]
        return [(r["startKey"], r["endKey"]) for r in ranges if r["status"] == "MATERIALIZED"]

    def wait_for_run(self, run_id: str, status: str = "SUCCESS", *, timeout_s: float = RUN_TIMEOUT_S) -> dict[str, Any]:
        """Waits until the run is finished and asserts it ended in ``status``; the run's errors are in the message."""
        deadline = time.monotonic() + timeout_s
        run = self.run(run_id)
        while run["status"] not in FINISHED and time.monotonic() < deadline:
            self._check_alive()
            time.sleep(0.5)
            run = self.run(run_id)
        if run["status"] != status:
            errors = [e for e in self.run_messages(run_id) if e.get("level") in ("ERROR", "CRITICAL")]
            raise AssertionError(
                f"run {run_id} is {run['status']} (wanted {status}) after {timeout_s}s; error events: {errors}\n"
                f"{self.logs()}"
            )
        return run

    def wait_for_runs(self, job_name: str, count: int, *, timeout_s: float = RUN_TIMEOUT_S) -> list[dict[str, Any]]:
        """Waits until ``job_name`` has at least ``count`` runs and all are finished; returns them oldest first."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._check_alive()
            runs = self.runs(job_name)
            if len(runs) >= count and all(r["status"] in FINISHED for r in runs):
                return list(reversed(runs))
            time.sleep(0.5)
        raise AssertionError(f"{job_name}: wanted {count} finished runs, have {self.runs(job_name)}\n{self.logs()}")


def metadata_value(entry: Mapping[str, Any]) -> Any:
    """The value of one GraphQL metadata entry (the fields requested in ``_METADATA_FIELDS``)."""
    for name in ("intValue", "floatValue", "boolValue", "text", "path", "url", "timestamp", "jsonString"):
        if name in entry:
            return entry[name]
    return entry["__typename"]


def _start(name: str, argv: list[str], home: Path, env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    with (home / f"{name}.log").open("ab") as log_file:
        # Own session: at the end the whole group (the process and the code servers it spawned) is signalled.
        return subprocess.Popen(
            argv,
            cwd=REPO_ROOT,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _stop(proc: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    if proc.poll() is None:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=timeout_s)
    # Whatever is left of the group (code servers, a run worker): killed, so nothing outlives the session.
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=timeout_s)


def _wait_for_code_server(deployment: Deployment, port: int, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
    """Until the code server has loaded the definitions: a webserver that asks earlier shows a load error."""
    from dagster._core.errors import DagsterUserCodeUnreachableError
    from dagster._grpc.client import DagsterGrpcClient
    from dagster._serdes import deserialize_value
    from dagster._utils.error import SerializableErrorInfo

    client = DagsterGrpcClient(port=port, host="127.0.0.1")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        deployment._check_alive()
        try:
            answer = deserialize_value(client.list_repositories())
        except DagsterUserCodeUnreachableError:
            time.sleep(0.5)
            continue
        if isinstance(answer, SerializableErrorInfo):
            raise AssertionError(f"the code server failed to load the definitions: {answer.to_string()}")
        return
    raise AssertionError(f"the code server did not load within {timeout_s}s\n{deployment.logs()}")


@contextmanager
def run_deployment(
    config_path: Path, home: Path, server: LocalPostgres, *, extra_env: Mapping[str, str] | None = None
) -> Iterator[Deployment]:
    """Starts the code server (``pipelines.definitions`` for ``config_path``), the webserver and the daemon;
    stops all three (and the runs they started) at the end."""
    code_server_port = free_port()
    write_dagster_home(home, server, code_server_port)
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "DYNAMIC_KAFKA_CONFIG": str(config_path),
        PASSWORD_ENV: server.password(),
        "DAGSTER_GRPC_TIMEOUT_SECONDS": GRPC_TIMEOUT_S,
        **(extra_env or {}),
    }
    deployment = Deployment(home=home, port=free_port(), env=env)
    workspace = str(home / "workspace.yaml")
    started = time.monotonic()
    try:
        deployment.processes["code-server"] = _start(
            "code-server",
            [
                str(BIN / "dagster"),
                "code-server",
                "start",
                "-m",
                "pipelines.definitions",
                "-h",
                "127.0.0.1",
                "-p",
                str(code_server_port),
                "--location-name",
                LOCATION,
            ],
            home,
            env,
        )
        _wait_for_code_server(deployment, code_server_port)
        deployment.processes["webserver"] = _start(
            "webserver",
            [str(BIN / "dagster-webserver"), "-w", workspace, "-h", "127.0.0.1", "-p", str(deployment.port)],
            home,
            env,
        )
        deployment.processes["daemon"] = _start(
            "daemon", [str(BIN / "dagster-daemon"), "run", "-w", workspace], home, env
        )
        deployment.wait_until_ready()
        deployment.timings["startup_s"] = time.monotonic() - started
        log.info("deployment ready in %.1fs on port %d", deployment.timings["startup_s"], deployment.port)
        yield deployment
    finally:
        # The webserver and the daemon first, so nothing launches a run while the code server stops.
        for name in ("daemon", "webserver", "code-server"):
            if name in deployment.processes:
                _stop(deployment.processes[name])


_READY_QUERY = """
{
  workspaceOrError {
    __typename
    ... on Workspace {
      locationEntries {
        name
        locationOrLoadError {
          __typename
          ... on RepositoryLocation { repositories { name } }
          ... on PythonError { message }
        }
      }
    }
  }
  instance { daemonHealth { allDaemonStatuses { daemonType healthy required } } }
}
"""

_LAUNCH_RUN = """
mutation Launch($executionParams: ExecutionParams!) {
  launchRun(executionParams: $executionParams) {
    __typename
    ... on LaunchRunSuccess { run { runId status } }
    ... on PythonError { message stack }
    ... on Error { message }
  }
}
"""

_START_SENSOR = """
mutation Start($selector: SensorSelector!) {
  startSensor(sensorSelector: $selector) {
    __typename
    ... on Sensor { name sensorState { status } }
    ... on PythonError { message }
    ... on Error { message }
  }
}
"""

_SENSOR_ID = """
query Sensor($selector: SensorSelector!) {
  sensorOrError(sensorSelector: $selector) {
    __typename
    ... on Sensor { id }
    ... on PythonError { message }
    ... on Error { message }
  }
}
"""

_STOP_SENSOR = """
mutation Stop($id: String!) {
  stopSensor(id: $id) {
    __typename
    ... on PythonError { message }
    ... on Error { message }
  }
}
"""

_LAUNCH_BACKFILL = """
mutation Backfill($params: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $params) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message stack }
    ... on Error { message }
  }
}
"""

_PARTITIONS = """
query Partitions($key: AssetKeyInput!) {
  assetNodeOrError(assetKey: $key) {
    __typename
    ... on AssetNode {
      assetPartitionStatuses {
        __typename
        ... on DefaultPartitionStatuses { materializedPartitions }
        ... on TimePartitionStatuses { ranges { startKey endKey status } }
      }
    }
  }
}
"""

_RUN_FIELDS = "runId status jobName creationTime startTime endTime tags { key value }"

_RUN = f"""
query Run($runId: ID!) {{
  runOrError(runId: $runId) {{
    __typename
    ... on Run {{ {_RUN_FIELDS} }}
    ... on Error {{ message }}
  }}
}}
"""

_RUNS = f"""
query Runs($filter: RunsFilter) {{
  runsOrError(filter: $filter) {{
    __typename
    ... on Runs {{ results {{ {_RUN_FIELDS} }} }}
    ... on Error {{ message }}
  }}
}}
"""

_METADATA_FIELDS = """
  label
  __typename
  ... on IntMetadataEntry { intValue }
  ... on FloatMetadataEntry { floatValue }
  ... on BoolMetadataEntry { boolValue }
  ... on TextMetadataEntry { text }
  ... on PathMetadataEntry { path }
  ... on UrlMetadataEntry { url }
  ... on TimestampMetadataEntry { timestamp }
  ... on JsonMetadataEntry { jsonString }
"""

_LOGS = f"""
query Logs($runId: ID!, $cursor: String) {{
  logsForRun(runId: $runId, afterCursor: $cursor) {{
    __typename
    ... on EventConnection {{
      cursor
      hasMore
      events {{
        __typename
        ... on MessageEvent {{ message level timestamp eventType }}
        ... on MaterializationEvent {{ assetKey {{ path }} partition metadataEntries {{ {_METADATA_FIELDS} }} }}
      }}
    }}
    ... on Error {{ message }}
  }}
}}
"""
