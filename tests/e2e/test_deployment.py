"""The real deployment shape: PostgreSQL storage, webserver and daemon as separate processes, runs launched through
GraphQL and executed by the default run launcher in their own processes."""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Any

import pytest
from deployment_support import Deployment, local_postgres_server, run_deployment
from e2e_support import Project, Record, create_topic, produce, sink_rows, unique_topic

from pipelines.names import incremental_job_name

if TYPE_CHECKING:
    from collections.abc import Iterator

    from dynamic_kafka.local_postgres import LocalPostgres

pytestmark = pytest.mark.e2e

# Every pipeline the deployment tests use: the deployment loads the config once (see deployment_support).
ORDERS = "deployed-orders"


@pytest.fixture(scope="session")
def postgres() -> Iterator[LocalPostgres]:
    with local_postgres_server() as server:
        yield server


@pytest.fixture(scope="session")
def deployment_project(tmp_path_factory: pytest.TempPathFactory, kafka_clusters: Any) -> Project:
    clusters = {name: c.bootstrap_servers for name, c in kafka_clusters.items()}
    project = Project(root=tmp_path_factory.mktemp("deployment-project"), clusters=clusters)
    project.write_metadata({})
    project.add_pipeline(ORDERS, ["orders"], starting_offsets="earliest", max_lag_records=100)
    return project


@pytest.fixture(scope="session")
def deployment(
    deployment_project: Project, postgres: LocalPostgres, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    with run_deployment(deployment_project.config_path, tmp_path_factory.mktemp("dagster-home"), postgres) as d:
        yield d


def test_a_run_launched_through_graphql_is_started_by_the_daemon_in_its_own_process(
    deployment: Deployment, deployment_project: Project
) -> None:
    # Nothing to read: the run plans, finds no records and never starts a JVM, so this is the deployment's cost.
    project = deployment_project
    topic = unique_topic("deployed-empty")
    create_topic(project.clusters["east"], topic, partitions=1)
    project.write_metadata({"orders": {"east": [topic]}})

    launched = time.monotonic()
    run_id = deployment.launch_run(incremental_job_name(ORDERS), tags={"test": "deployment"})
    run = deployment.wait_for_run(run_id)
    deployment.timings["empty_run_s"] = time.monotonic() - launched

    tags = {t["key"]: t["value"] for t in run["tags"]}
    assert tags["dynamic_kafka/pipeline"] == ORDERS
    assert tags["test"] == "deployment"
    messages = [e.get("message") or "" for e in deployment.run_messages(run_id)]
    pids = [int(m) for text in messages for m in re.findall(r"Started process for run \(pid: (\d+)\)", text)]
    assert len(pids) == 1, messages
    assert pids[0] not in {p.pid for p in deployment.processes.values()}
    print(f"deployment timings: {deployment.timings}")  # shown with -s


@pytest.mark.timeout(1800)  # with the session's start of Kafka, PostgreSQL, webserver, daemon; see RUN_TIMEOUT_S
def test_a_run_launched_through_graphql_lands_every_record(deployment: Deployment, deployment_project: Project) -> None:
    project = deployment_project
    east, west = project.clusters["east"], project.clusters["west"]
    east_topic, west_topic = unique_topic("deployed-east"), unique_topic("deployed-west")
    create_topic(east, east_topic, partitions=2)
    create_topic(west, west_topic, partitions=1)
    project.write_metadata({"orders": {"east": [east_topic], "west": [west_topic]}})
    produced = produce("east", east, east_topic, [Record(i % 2, f"east-{i}") for i in range(6)])
    produced += produce("west", west, west_topic, [Record(0, f"west-{i}") for i in range(4)])

    launched = time.monotonic()
    deployment.wait_for_run(deployment.launch_run(incremental_job_name(ORDERS)))
    deployment.timings["spark_run_s"] = time.monotonic() - launched

    assert sorted(sink_rows(project.sink_path(ORDERS))) == sorted(produced)
    print(f"deployment timings: {deployment.timings}")  # shown with -s
