"""The Airflow DAGs of docs/airflow.md run by the real ``airflow dags test`` (SQLite metadata DB in a temporary
AIRFLOW_HOME) against the session's Kafka clusters and Spark Connect server.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

from tests.support.airflow import AirflowHome
from tests.support.e2e import Project, Record, create_topic, produce, sasl_project, sink_rows, unique_topic

if TYPE_CHECKING:
    from pathlib import Path

# Each `airflow dags test` is a CLI start, a task process and a Spark job: a loaded machine needs more than the
# suite's default ten minutes for a test's three of them.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]

H = timedelta(hours=1)
M = timedelta(minutes=1)


@pytest.fixture(scope="module")
def airflow_home(tmp_path_factory: pytest.TempPathFactory) -> AirflowHome:
    return AirflowHome.create(tmp_path_factory.mktemp("airflow-home"))


def pipeline_id(prefix: str) -> str:
    # One AIRFLOW_HOME for the module: every test's DAGs get their own ids.
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def at(partition: int, value: str, moment: datetime) -> Record:
    return Record(partition, value, timestamp_ms=int(moment.timestamp() * 1000))


def test_a_dag_run_lands_records_once_with_its_password_from_an_airflow_variable(
    tmp_path: Path, airflow_home: AirflowHome, sasl_cluster: Any, sasl_password: str, spark_connect_server: Any
) -> None:
    client = sasl_cluster.client_config(sasl_password)
    topic = unique_topic("airflow-secured")
    create_topic(client, topic, partitions=2)
    produced = produce("secured", client, topic, [Record(i % 2, f"payment-{i}") for i in range(5)])
    project = sasl_project(
        tmp_path, sasl_cluster, "${airflow:var/kafka_password}", spark={"remote": spark_connect_server.remote}
    )
    project.write_metadata({"payments": {"secured": [topic]}})
    pid = pipeline_id("payments")
    project.add_pipeline(pid, ["payments"])

    done = airflow_home.dags_test(pid, project.config_path, extra={"AIRFLOW_VAR_KAFKA_PASSWORD": sasl_password})

    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert sorted(sink_rows(project.sink_path(pid))) == sorted(produced)
    assert [(task, state) for _, task, state in airflow_home.task_states(pid)] == [
        ("run", "success"),
        ("checks", "success"),
    ]
    (summary,) = airflow_home.xcoms(pid, "run")
    assert (summary["pipeline_id"], summary["run_seq"], summary["status"], summary["records"]) == (
        pid,
        1,
        "committed",
        5,
    )
    (checks,) = airflow_home.xcoms(pid, "checks")
    assert {name: verdict["passed"] for name, verdict in checks.items()} == {
        "lag": True,
        "data_loss": True,
        "dead_letters": True,
        "completeness": True,
    }

    # Without the variable the reference cannot resolve: a config error fails the task at once, never retried.
    produce("secured", client, topic, [Record(0, "payment-5")])
    refused = airflow_home.dags_test(pid, project.config_path)

    assert refused.returncode != 0
    states = airflow_home.task_states(pid)
    assert [(task, state) for _, task, state in states[2:]] == [("run", "failed"), ("checks", "upstream_failed")]
    assert "references airflow secret 'var/kafka_password', which does not exist" in refused.stdout + refused.stderr
    assert sorted(sink_rows(project.sink_path(pid))) == sorted(produced)

    shown = (done.stdout + done.stderr + refused.stdout + refused.stderr).encode()
    assert sasl_password.encode() not in shown
    assert sasl_password.encode() not in airflow_home.every_byte()


def test_a_backfill_over_two_intervals_merges_their_windows_once_beside_the_incremental_run(
    tmp_path: Path, airflow_home: AirflowHome, kafka_clusters: Any, spark_connect_server: Any
) -> None:
    east = kafka_clusters["east"].bootstrap_servers
    topic = unique_topic("airflow-clicks")
    create_topic(east, topic, partitions=2)
    project = Project(root=tmp_path, clusters={"east": east}, spark={"remote": spark_connect_server.remote})
    project.write_metadata({"clicks": {"east": [topic]}})
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - 5 * H
    pid = pipeline_id("clicks")
    project.add_pipeline(pid, ["clicks"], backfill={"start": (hour - 24 * H).isoformat(), "granularity": "hourly"})
    records = produce(
        "east",
        east,
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
    backfill = f"{pid}_backfill"

    # A run's data interval ends at its logical date: these are [hour, hour+1h) and [hour+1h, hour+2h).
    for end in (hour + H, hour + 2 * H):
        done = airflow_home.dags_test(backfill, project.config_path, logical_date=end.isoformat())
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]

    assert sorted(sink_rows(project.sink_path(pid))) == sorted(window)
    assert [s["records"] for s in airflow_home.xcoms(backfill, "backfill")] == [2, 2]

    # The incremental run lands everything else once; the windows' records are not landed again.
    done = airflow_home.dags_test(pid, project.config_path)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert sorted(sink_rows(project.sink_path(pid))) == sorted(records)
