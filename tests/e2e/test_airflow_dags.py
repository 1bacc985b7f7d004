"""The Airflow DAGs of docs/airflow.md run by the real ``airflow dags test`` (SQLite metadata DB in a temporary
AIRFLOW_HOME) against the session's Kafka clusters and Spark Connect server: what a whole deployment does not show
(tests/e2e/test_airflow_deployment.py runs the backfill, the schedule, the watch and a killed task), a config error
that fails the task at once without its retries.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

import pytest

from tests.support.airflow import AirflowHome
from tests.support.e2e import Record, create_topic, produce, sasl_project, unique_topic

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def airflow_home(tmp_path_factory: pytest.TempPathFactory) -> AirflowHome:
    return AirflowHome.create(tmp_path_factory.mktemp("airflow-home"))


def pipeline_id(prefix: str) -> str:
    # One AIRFLOW_HOME for the module: every test's DAGs get their own ids.
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def test_a_secret_reference_that_cannot_resolve_fails_the_task_at_once_without_its_retries(
    tmp_path: Path, airflow_home: AirflowHome, sasl_cluster: Any, sasl_password: str, spark_connect_server: Any
) -> None:
    client = sasl_cluster.client_config(sasl_password)
    topic = unique_topic("airflow-secured")
    create_topic(client, topic, partitions=2)
    produce("secured", client, topic, [Record(i % 2, f"payment-{i}") for i in range(3)])
    project = sasl_project(
        tmp_path, sasl_cluster, "${airflow:var/kafka_password}", spark={"remote": spark_connect_server.remote}
    )
    project.write_metadata({"payments": {"secured": [topic]}})
    pid = pipeline_id("payments")
    project.add_pipeline(pid, ["payments"])

    # No variable kafka_password: a config error, which no retry can fix.
    refused = airflow_home.dags_test(pid, project.config_path)

    assert refused.returncode != 0
    assert [(task, state) for _, task, state in airflow_home.task_states(pid)] == [
        ("run", "failed"),
        ("checks", "upstream_failed"),
    ]
    assert "references airflow secret 'var/kafka_password', which does not exist" in refused.stdout + refused.stderr
    assert not project.sink_path(pid).exists()
