"""Benchmark 10 (``dagster``): a small run launched by Dagster's schedule, beside the same run from the CLI (issue 42,
item 5).

Dagster as a team deploys it (``tests/support/deployment.py``: PostgreSQL storage, a code server, the webserver and
the daemon as separate processes, the default run launcher: every run in a worker process of its own), the runs
through benchmark 8's Spark Connect server. Four pipelines over two topics of 2 clusters x 8 partitions:
``dagster-empty`` and ``cli-empty`` read a topic nobody writes to (a run with nothing to read);
``dagster-small`` and ``cli-small`` read one that gets 10,000 new records before each small tick. The two Dagster
pipelines run on schedules a minute apart (even and odd minutes, so their runs never overlap); the CLI pipelines
run as fresh ``dynamic-kafka run`` processes between the ticks. Every pipeline's server session is warmed first by
:data:`WARM_RUNS` CLI runs (quick: 2).

Per Dagster run, from its event log (GraphQL), the run record and the pipeline's state (``planned_at`` and
``committed_at`` of the run it recorded): the schedule tick (the scheduled time) -> the run created (scheduler
daemon) -> its worker process started (run queue, launcher) -> ``RUN_START`` (the worker's imports and the code
location loaded: Dagster's, and the definitions our ``pipelines`` module builds) -> the step's start -> our run
planned (our imports, the state, the plan) -> committed (the read, the write, the commits) -> the run's end
(the materialization events, the step's and the run's end). The CLI run's process start -> planned -> committed ->
exit beside them. Reported: medians of ``settings.repeats`` runs of each.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from bench.connect import SMALL_PARTITIONS, SMALL_RECORDS, _fresh_topic, _server
from bench.env import CLUSTERS, DataSet, fresh_dir, produce_fast
from bench.runs import run_ours

if TYPE_CHECKING:
    from bench.env import BenchEnv
    from tests.support.deployment import Deployment

EMPTY_TOPIC = "dagster-empty-8p"
SMALL_TOPIC = "dagster-small-8p"
# Even and odd minutes: one Dagster run at a time, each tick a minute after the other's.
SCHEDULES = {"dagster-empty": "*/2 * * * *", "dagster-small": "1-59/2 * * * *"}
STREAMS = {"dagster-empty": "empty", "cli-empty": "empty", "dagster-small": "small", "cli-small": "small"}
WARM_RUNS = 5
WAIT_S = 600.0  # for the next scheduled run: two minutes, and what a loaded machine adds
PHASES = (
    ("tick_to_created_s", "schedule tick -> run created (scheduler daemon)"),
    ("created_to_process_s", "run created -> worker process started (run queue, launcher)"),
    ("process_to_start_s", "worker process -> RUN_START (imports, code location loaded)"),
    ("start_to_step_s", "RUN_START -> step start (Dagster)"),
    ("to_planned_s", "step start / process start -> run planned (ours: imports, state, plan)"),
    ("planned_to_committed_s", "planned -> committed (ours: read, write, commits)"),
    ("committed_to_end_s", "committed -> run end / process exit"),
    ("start_to_commit_s", "RUN_START / process start -> committed"),
    ("tick_to_commit_s", "schedule tick -> committed"),
)


def bench_dagster(env: BenchEnv, settings: Any) -> dict[str, Any]:
    """10. Scheduled Dagster runs (nothing to read, 10,000 records) beside the same runs from the CLI."""
    from bench.suite import _progress, median_of
    from devtools.local_postgres import start_postgres, stop_postgres
    from dynamic_kafka._toolchain.process import free_port
    from tests.support.deployment import run_deployment

    server = _server()
    _fresh_topic(env, EMPTY_TOPIC, SMALL_PARTITIONS)
    _fresh_topic(env, SMALL_TOPIC, SMALL_PARTITIONS)
    small_data = DataSet(SMALL_RECORDS, SMALL_PARTITIONS, settings.value_bytes)
    folder = fresh_dir("dagster")
    config = _write_project(folder, env, server.remote)

    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in STREAMS}

    def produce_small() -> None:
        for c in CLUSTERS:
            produce_fast(env.bootstrap(c), SMALL_TOPIC, SMALL_RECORDS // len(CLUSTERS), small_data)

    def cli(pipeline: str, expected: int) -> dict[str, Any]:
        began = time.time()
        measured, summary = run_ours(config, pipeline=pipeline)
        if summary["records"] != expected:
            raise RuntimeError(f"the CLI run of {pipeline} read {summary['records']} records, not {expected}")
        planned, committed, _ = _last_run(folder, pipeline)
        return {
            "wall_s": measured.wall_s,
            "to_planned_s": planned - began,
            "planned_to_committed_s": committed - planned,
            "committed_to_end_s": began + measured.wall_s - committed,
            "start_to_commit_s": committed - began,
        }

    def cli_pair() -> None:
        # The records of the next scheduled small run, read by the CLI's small pipeline first.
        produce_small()
        runs["cli-small"].append(cli("cli-small", SMALL_RECORDS))
        runs["cli-empty"].append(cli("cli-empty", 0))
        _progress(
            f"dagster: CLI small {runs['cli-small'][-1]['wall_s']:.2f}s, empty {runs['cli-empty'][-1]['wall_s']:.2f}s"
        )

    for pipeline in STREAMS:  # empty topics: pins every position, starts no Spark
        cli(pipeline, 0)
    for _ in range(2 if settings.quick else WARM_RUNS):  # each pipeline's server session compiles its write
        produce_small()
        cli("cli-small", SMALL_RECORDS)
        cli("dagster-small", SMALL_RECORDS)
    _progress("dagster: pipelines pinned and their server sessions warmed")
    pg_base = Path(tempfile.mkdtemp(prefix="dynamic-kafka-bench-pg-"))
    pg_base.chmod(0o755)  # as root the server runs as the postgres user
    try:
        postgres = start_postgres(base_dir=pg_base, port=free_port(), database="dagster")
        with run_deployment(config, fresh_dir("dagster-home"), postgres) as deployment:
            startup_s = deployment.timings["startup_s"]
            _progress(f"dagster: deployment ready in {startup_s:.1f}s")
            # The CLI runs go right after a scheduled run, so they never overlap the next tick's run (a minute away):
            # the first pair before the schedules start, the others after each scheduled small run.
            cli_pair()
            for pipeline in SCHEDULES:
                _start_schedule(deployment, pipeline)
            seen = dict.fromkeys(SCHEDULES, 0)
            while min(len(runs[p]) for p in SCHEDULES) < settings.repeats:
                pipeline, run_id = _next_run(deployment, seen)
                if len(runs[pipeline]) == settings.repeats:
                    continue  # one more tick of a pipeline that has its runs (a small one would read nothing)
                expected = SMALL_RECORDS if pipeline == "dagster-small" else 0
                runs[pipeline].append(_dagster_times(deployment, run_id, folder, pipeline, expected))
                _progress(f"dagster: {pipeline} tick -> commit {runs[pipeline][-1]['tick_to_commit_s']:.2f}s")
                if pipeline == "dagster-small" and len(runs[pipeline]) < settings.repeats:
                    cli_pair()
    finally:
        stop_postgres(base_dir=pg_base, purge=True)
        shutil.rmtree(pg_base, ignore_errors=True)
    return {
        "records": SMALL_RECORDS,
        "deployment_startup_s": startup_s,
        "runs": runs,
        "medians": {
            name: {key: median_of(measured, key) for key, _ in (*PHASES, ("wall_s", ""))}
            for name, measured in runs.items()
        },
    }


def _write_project(folder: Path, env: BenchEnv, remote: str) -> Path:
    metadata = {
        "clusters": {c: {"bootstrap_servers": env.bootstrap(c)} for c in CLUSTERS},
        "streams": {
            stream: {c: [topic] for c in CLUSTERS} for stream, topic in (("empty", EMPTY_TOPIC), ("small", SMALL_TOPIC))
        },
    }
    (folder / "metadata.yaml").write_text(yaml.safe_dump(metadata, sort_keys=False))
    pipelines = [{"id": p, "streams": [stream], "sink": {"path": str(folder / p)}} for p, stream in STREAMS.items()]
    for pipeline in pipelines:
        if pipeline["id"] in SCHEDULES:
            pipeline["orchestration"] = {"schedule": SCHEDULES[pipeline["id"]]}
    config = {
        "metadata_service": {"type": "file", "path": str(folder / "metadata.yaml")},
        "spark": {"remote": remote},
        "pipelines": pipelines,
    }
    path = folder / "dynamic_kafka.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _last_run(folder: Path, pipeline: str) -> tuple[float, float, int | None]:
    """When the pipeline's last run was planned and committed (epoch seconds) and the records it read, from its
    state.
    """
    from dynamic_kafka.state import StateStore

    last = StateStore(str(folder / f"{pipeline}_state"), pipeline).load().last_run
    if last is None or last.committed_at is None:
        raise RuntimeError(f"pipeline {pipeline} has no committed run in its state")
    records = json.loads(last.summary_json).get("records") if last.summary_json else None
    return last.planned_at.timestamp(), last.committed_at.timestamp(), records


def _start_schedule(deployment: Deployment, pipeline: str) -> None:
    from dynamic_kafka.dagster.names import schedule_name

    selector = {
        "repositoryLocationName": deployment.location,
        "repositoryName": deployment.repository,
        "scheduleName": schedule_name(pipeline),
    }
    result = deployment.graphql(_START_SCHEDULE, {"selector": selector})["startSchedule"]
    if result["__typename"] != "ScheduleStateResult":
        raise RuntimeError(f"starting the schedule of {pipeline}: {result}")


def _next_run(deployment: Deployment, seen: dict[str, int]) -> tuple[str, str]:
    """The next finished scheduled run of either pipeline (its id), counting it as seen."""
    from dynamic_kafka.dagster.names import incremental_job_name

    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        for pipeline in SCHEDULES:
            found = list(reversed(deployment.runs(incremental_job_name(pipeline))))  # oldest first
            if len(found) > seen[pipeline] and found[seen[pipeline]]["status"] in ("SUCCESS", "FAILURE", "CANCELED"):
                run = found[seen[pipeline]]
                seen[pipeline] += 1
                if run["status"] != "SUCCESS":
                    raise RuntimeError(f"the scheduled run {run['runId']} of {pipeline} is {run['status']}")
                return pipeline, run["runId"]
        time.sleep(0.5)
    raise RuntimeError(f"no scheduled run finished within {WAIT_S:.0f}s\n{deployment.logs()}")


def _dagster_times(deployment: Deployment, run_id: str, folder: Path, pipeline: str, expected: int) -> dict[str, Any]:
    """A scheduled run's timeline: Dagster's records of it and our state's."""
    run = deployment.run(run_id)
    tags = {t["key"]: t["value"] for t in run["tags"]}
    tick_tag = tags.get(".dagster/scheduled_execution_time") or tags.get("dagster/scheduled_execution_time")
    created = float(run["creationTime"])
    # Cron ticks fall on whole minutes: without the tag, the minute the run was created in.
    tick = datetime.fromisoformat(tick_tag).timestamp() if tick_tag else created - created % 60
    events = _events(deployment, run_id)
    process = next(t for t, kind, text in events if kind == "ENGINE_EVENT" and "Started process for run" in text)
    step = next(t for t, kind, _ in events if kind == "STEP_START")
    planned, committed, records = _last_run(folder, pipeline)
    if records != expected:
        raise RuntimeError(f"the scheduled run {run_id} of {pipeline} read {records} records, not {expected}")
    started, ended = float(run["startTime"]), float(run["endTime"])
    return {
        "run_id": run_id,
        "tick_to_created_s": created - tick,
        "created_to_process_s": process - created,
        "process_to_start_s": started - process,
        "start_to_step_s": step - started,
        "to_planned_s": planned - step,
        "planned_to_committed_s": committed - planned,
        "committed_to_end_s": ended - committed,
        "start_to_commit_s": committed - started,
        "tick_to_commit_s": committed - tick,
        "wall_s": ended - started,
    }


def _events(deployment: Deployment, run_id: str) -> list[tuple[float, str, str]]:
    """The run's events as (epoch seconds, event type, message), oldest first."""
    return [
        (int(e["timestamp"]) / 1000, e["eventType"] or "", e["message"] or "")
        for e in deployment.run_messages(run_id)
        if "timestamp" in e
    ]


def rows(k: dict[str, Any]) -> tuple[list[list[Any]], list[list[Any]]]:
    """The report's phase rows (Dagster and CLI, nothing to read and 10,000 records) and target rows."""
    m = k["medians"]
    columns = ("dagster-empty", "cli-empty", "dagster-small", "cli-small")
    table = [[label, *(m[c][key] for c in columns)] for key, label in PHASES]
    n = f"{k['records']:,}"
    targets: list[list[Any]] = []
    for size, label in (("empty", "nothing to read"), ("small", n)):
        dagster, cli = m[f"dagster-{size}"], m[f"cli-{size}"]
        if dagster["start_to_commit_s"] is None or cli["start_to_commit_s"] is None:
            continue
        measured = (
            f"{dagster['start_to_commit_s']:.2f}s (CLI {cli['start_to_commit_s']:.2f}s); "
            f"tick -> commit {dagster['tick_to_commit_s']:.2f}s"
        )
        targets.append([f"10 Dagster-launched run, {label}: run start -> commit", measured, "(report)", "-"])
    return table, targets


_START_SCHEDULE = """
mutation Start($selector: ScheduleSelector!) {
  startSchedule(scheduleSelector: $selector) {
    __typename
    ... on ScheduleStateResult { scheduleState { status } }
    ... on PythonError { message }
    ... on UnauthorizedError { message }
  }
}
"""
