"""The DAG file of docs/airflow.md in a real Airflow 3 deployment: its scheduler (LocalExecutor), DAG processor,
triggerer and API server on a fresh database of the session's PostgreSQL, against the session's Kafka clusters and
Spark Connect server. One deployment for the whole story, as an operator runs it: a backfill over two data
intervals, a scheduled run, a run started by a metadata change through the triggerer, a task process killed
mid-run and recovered by the next try, and no secret anywhere Airflow writes.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import psycopg2
import pytest

from dynamic_kafka._toolchain.process import free_port
from tests.support.airflow import COMPONENTS, AirflowDeployment
from tests.support.e2e import Record, create_topic, produce, sasl_project, sink_rows, unique_topic

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from devtools.local_postgres import LocalPostgres

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]

H = timedelta(hours=1)
M = timedelta(minutes=1)
PID = "orders"
# A run takes a CLI start, a task process and a Spark job: minutes on a loaded machine.
RUN_TIMEOUT_S = 420.0


@pytest.fixture
def database(postgres: LocalPostgres) -> Iterator[str]:
    """A fresh database on the session's PostgreSQL, dropped afterwards; its SQLAlchemy URL."""
    name = f"airflow_{uuid.uuid4().hex[:8]}"
    admin = psycopg2.connect(postgres.url())
    admin.autocommit = True
    try:
        with admin.cursor() as cursor:
            cursor.execute(f'CREATE DATABASE "{name}"')
        yield postgres.url().replace("postgresql://", "postgresql+psycopg2://").rsplit("/", 1)[0] + f"/{name}"
        with admin.cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.close()


def at(partition: int, value: str, moment: datetime) -> Record:
    return Record(partition, value, timestamp_ms=int(moment.timestamp() * 1000))


def test_an_airflow_deployment_backfills_schedules_watches_and_recovers_a_killed_task_exactly_once(
    tmp_path: Path,
    database: str,
    sasl_cluster: Any,
    sasl_password: str,
    kafka_clusters: Any,
    spark_connect_server: Any,
) -> None:
    client = sasl_cluster.client_config(sasl_password)
    topic = unique_topic("airflow-orders")
    create_topic(client, topic, partitions=2)
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - 5 * H
    records = produce(
        "secured",
        client,
        topic,
        [
            at(0, "before", hour - 30 * M),
            at(0, "h0-a", hour + 10 * M),
            at(1, "h0-b", hour + 59 * M),
            at(1, "h1-a", hour + H),
            at(0, "h1-b", hour + H + 30 * M),
            at(0, "after", hour + 2 * H),
        ],
    )
    window = [r for r in records if r.value.startswith(("h0", "h1"))]
    project = sasl_project(
        tmp_path / "project",
        sasl_cluster,
        "${airflow:var/kafka_password}",
        spark={"remote": spark_connect_server.remote},
    )
    project.root.mkdir()
    project.write_metadata({"orders": {"secured": [topic]}})
    project.add_pipeline(
        PID,
        ["orders"],
        # Once a year: unpausing the DAG starts one scheduled run (its latest tick, no catch-up), and no other.
        orchestration={
            "schedule": "0 0 1 1 *",
            "backfill": {"start": (hour - 24 * H).isoformat(), "granularity": "hourly"},
            "sensor": {"interval_seconds": 2},
        },
    )
    airflow = AirflowDeployment.create(
        tmp_path / "airflow-home",
        database,
        project.config_path,
        free_port(),
        {"AIRFLOW_VAR_KAFKA_PASSWORD": sasl_password},
    )
    try:
        for component in COMPONENTS:
            airflow.start(component)
        # Set while the DAG processor parses (nothing is unpaused yet, so no task waits for the pool).
        airflow.cli("pools", "set", "dynamic_kafka_spark", "1", "Spark Connect server")
        dag_ids = {PID, f"{PID}_backfill", f"{PID}_health", f"{PID}_offsets", f"{PID}_watch"}
        airflow.wait_for(
            "the DAG processor to parse the documented DAG file",
            lambda: dag_ids <= {d for (d,) in airflow.query("SELECT dag_id FROM dag")},
            RUN_TIMEOUT_S,
        )

        def finished(dag_id: str, run_type: str, count: int = 1) -> list[str]:
            """The ids of the DAG's runs of that type once ``count`` of them succeeded (a failed one fails)."""

            def probe() -> list[str]:
                runs = [(r, s) for r, t, s in airflow.runs(dag_id) if t == run_type]
                assert all(s != "failed" for _, s in runs), f"{dag_id}: {runs}\n{airflow.diagnosis()}"
                done = [r for r, s in runs if s == "success"]
                return done if len(done) >= count else []

            return airflow.wait_for(f"{count} {run_type} run(s) of {dag_id}", probe, RUN_TIMEOUT_S * count)

        # (b) `airflow backfill create` over two hourly intervals: each window merged once.
        backfill = f"{PID}_backfill"
        airflow.set_paused(backfill, paused=False)
        airflow.cli(
            "backfill",
            "create",
            "--dag-id",
            backfill,
            "--from-date",
            hour.isoformat(),
            "--to-date",
            (hour + H).isoformat(),
        )
        windows = finished(backfill, "backfill", count=2)
        # Its own schedule is off from here: the next hour's tick would only merge an empty window.
        airflow.set_paused(backfill, paused=True)
        assert sorted(sink_rows(project.sink_path(PID))) == sorted(window)
        # --from-date/--to-date bound the intervals' starts (their logical dates; a run's id names its end).
        assert airflow.intervals(backfill, windows) == [(hour, hour + H), (hour + H, hour + 2 * H)]
        assert [airflow.xcom(backfill, run, "backfill")["records"] for run in windows] == [2, 2]

        # (a) The scheduled run lands the rest; the windows' records are not landed again.
        airflow.set_paused(PID, paused=False)
        (scheduled,) = finished(PID, "scheduled")
        summary = airflow.xcom(PID, scheduled, "run")
        assert (summary["run_seq"], summary["status"]) == (1, "committed")
        assert sorted(sink_rows(project.sink_path(PID))) == sorted(records)
        # The windows' records were read again and skipped, not landed twice.
        assert (summary["records"], summary["deduplicated"]) == (len(records) - len(window), len(window))
        assert airflow.task(PID, scheduled, "checks")[0] == "success"
        verdicts = airflow.xcom(PID, scheduled, "checks")
        assert {name: v["passed"] for name, v in verdicts.items()} == dict.fromkeys(
            ["lag", "data_loss", "dead_letters", "completeness"], True
        )

        # (c) The watch: its first wait fires at once (no cursor: the baseline run), the next one waits in the
        # triggerer until a new cluster and topic appear in the metadata file, then starts a run that lands them.
        west = kafka_clusters["west"].bootstrap_servers
        new_topic = unique_topic("airflow-returns")
        create_topic(west, new_topic, partitions=1)
        returns = produce("west", west, new_topic, [Record(0, f"return-{i}") for i in range(3)])
        watch = f"{PID}_watch"
        airflow.set_paused(watch, paused=False)
        finished(PID, "operator_triggered")  # the baseline run, started by the watch's first wait
        airflow.wait_for(
            "the watch's second wait to defer to the triggerer",
            lambda: [
                r
                for r, _, s in airflow.runs(watch)
                if airflow.task(watch, r, "wait_for_metadata_change")[0] == "deferred"
            ],
            RUN_TIMEOUT_S,
        )
        project.clusters = {**project.clusters, "west": west}
        project.write_metadata({"orders": {"secured": [topic], "west": [new_topic]}})
        changed = finished(PID, "operator_triggered", count=2)[-1]
        assert airflow.xcom(PID, changed, "run")["records"] == len(returns)
        assert sorted(sink_rows(project.sink_path(PID))) == sorted(records + returns)

        # (d) The task process killed (SIGKILL) after the sink commit, before the state's: Airflow's retry only
        # starts the next try, whose recovery finishes the crashed run; nothing is landed twice.
        more = produce("secured", client, topic, [Record(i % 2, f"late-{i}") for i in range(4)])
        airflow.stop("scheduler")
        airflow.start("scheduler", DYNAMIC_KAFKA_FAULT="after_sink")
        airflow.cli("dags", "trigger", PID)
        (killed,) = finished(PID, "manual")
        state, tries = airflow.task(PID, killed, "run")
        assert (state, tries) == ("success", 2), airflow.diagnosis()
        recovered = airflow.xcom(PID, killed, "run")
        assert recovered["recovered_run_seq"] is not None, recovered
        assert sorted(sink_rows(project.sink_path(PID))) == sorted(records + returns + more)
    finally:
        airflow.stop_all()

    # (e) The password was resolved in every task (each read the secured cluster), and is nowhere Airflow wrote.
    secret = sasl_password.encode()
    assert secret not in airflow.every_byte()
    assert sasl_password not in airflow.database_text()
