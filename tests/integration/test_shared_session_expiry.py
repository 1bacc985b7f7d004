"""A pipeline's shared Spark Connect session after the server closed it for idleness (issue 35, row 1).

The server keeps a closed session's id for its lifetime and refuses it (``INVALID_HANDLE.SESSION_CLOSED``), so
these tests use a server of their own whose sessions expire after a few idle seconds. Not fewer: the server
closes a session whose only activity is a query running longer than the timeout (seen on Spark 4.1.3), and a
loaded machine stretches a small run's queries to several seconds.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

import pytest

from devtools.local_spark_connect import start_server, stop_server
from devtools.testing.clusters import THROWAWAY_STOP_S
from devtools.testing.kafka import Record, create_topic, produce, unique_name
from devtools.testing.pipeline import PipelineHarness
from dynamic_kafka._toolchain.process import free_port

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from devtools.local_kafka import ClusterEndpoint
    from devtools.local_spark_connect import ServerInfo

pytestmark = pytest.mark.integration

IDLE_TIMEOUT_S = 15
MAINTENANCE_S = 1


@pytest.fixture(scope="module")
def forgetful_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerInfo]:
    """A Spark Connect server that closes a session idle for ``IDLE_TIMEOUT_S`` (checked every second)."""
    base_dir = tmp_path_factory.mktemp("spark-connect-idle")
    yield start_server(
        base_dir=base_dir,
        port=free_port(),
        master="local[1]",
        driver_memory="512m",
        conf={
            "spark.connect.session.manager.defaultSessionTimeout": f"{IDLE_TIMEOUT_S}s",
            "spark.connect.session.manager.maintenanceInterval": f"{MAINTENANCE_S}s",
        },
    )
    stop_server(base_dir=base_dir, timeout_s=THROWAWAY_STOP_S)


def wait_for_expiry() -> None:
    # The server tells no client when it closes a session, and asking about the session would keep it alive:
    # the wait is the server's own bound (the timeout plus two maintenance rounds).
    time.sleep(IDLE_TIMEOUT_S + 2 * MAINTENANCE_S)


def test_a_pipeline_lands_exactly_once_after_the_server_expired_its_shared_session(
    kafka_clusters: dict[str, ClusterEndpoint], forgetful_server: ServerInfo, tmp_path: Path
) -> None:
    east = kafka_clusters["east"].bootstrap_servers
    topic = unique_name("expired-session")
    create_topic(east, topic, 2)
    harness = PipelineHarness(tmp_path, clusters={"east": east}, spark_config={"remote": forgetful_server.remote})
    harness.set_streams({"orders": {"east": [topic]}})
    sent = []
    for rounds in range(2):
        if rounds:
            wait_for_expiry()
        sent += produce(east, topic, [Record(value=f"e-{rounds}-{i}".encode()) for i in range(10)])

        done = harness.cli("run", "--json")

        assert done.returncode == 0, done.stderr[-3000:]
        assert json.loads(done.stdout)["records"] == 10
    assert harness.sink_values() == sorted(r.value for r in sent if r.value is not None)
