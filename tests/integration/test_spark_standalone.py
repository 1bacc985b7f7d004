"""The two-cluster run on a Spark standalone cluster: nothing depends on local mode or on the driver's classpath.

A master and two workers (1 core, 1 GiB each) run on loopback from the installed pyspark, started once for the
module (the only user of a cluster in the suite, so once per session) by ``python -m devtools spark-cluster``'s
:func:`~devtools.local_spark_cluster.start_cluster`. The pipeline runs in a separate CLI process, once with its own
driver (``spark: {master: spark://127.0.0.1:PORT}``) and then through one Spark Connect server started by
``python -m devtools spark-connect up --master spark://127.0.0.1:PORT``. Either way the Kafka reads and the Delta
write run in executors on the workers, which get the Kafka connector and Delta jars only from the driver (they are
on no classpath of a worker). The last test kills a worker mid-run.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyspark
import pytest
import yaml

from devtools.local_spark_cluster import ClusterInfo, start_cluster, stop_cluster
from devtools.local_spark_cluster.cluster import master_state
from devtools.testing.kafka import wait_for
from dynamic_kafka._toolchain.process import free_port
from tests.support.exactly_once import TwoClusterStream, committed_offsets, summary_of, tail

if TYPE_CHECKING:
    from collections.abc import Iterator

    from devtools.local_kafka import ClusterEndpoint

pytestmark = pytest.mark.integration

LOOPBACK = {"SPARK_HOME": str(Path(pyspark.__file__).parent), "SPARK_LOCAL_IP": "127.0.0.1"}
CONNECT_APP = "dynamic-kafka-spark-connect"


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterInfo]:
    """A Spark standalone master and two workers on 127.0.0.1, stopped at the end of the module."""
    base_dir = tmp_path_factory.mktemp("spark-cluster")
    try:
        yield start_cluster(base_dir=base_dir, workers=2, worker_cores=1, worker_memory="1g")
    finally:
        stop_cluster(base_dir=base_dir)


@pytest.fixture(scope="module")
def connect_on_cluster(standalone: ClusterInfo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One Spark Connect server whose jobs run on the two workers (it holds both cores while it runs)."""
    base_dir = tmp_path_factory.mktemp("spark-connect")
    up = _cli(
        "spark-connect",
        *("up", "--json", "--base-dir", str(base_dir), "--port", str(free_port())),
        *("--master", standalone.master_url, "--driver-memory", "1g"),
        # A server holds its executors' cores while it runs; on a shared cluster it is capped like this.
        *("--conf", "spark.cores.max=2"),
    )
    try:
        assert up.returncode == 0, f"spark-connect up failed:\n{tail(up.stderr)}"
        yield json.loads(up.stdout)
    finally:
        down = _cli("spark-connect", "down", "--base-dir", str(base_dir))
        assert down.returncode == 0, tail(down.stderr)


def _executor_dirs(cluster: ClusterInfo, app_id: str) -> dict[str, list[Path]]:
    """Per worker, the folders of the application's executors it launched."""
    return {
        w.name: sorted((Path(w.work_dir) / app_id).iterdir()) if (Path(w.work_dir) / app_id).is_dir() else []
        for w in cluster.workers
    }


def _connect_app_id(cluster: ClusterInfo) -> str:
    apps = [a for a in master_state(cluster)["activeapps"] if a["name"] == CONNECT_APP]
    assert len(apps) == 1
    return str(apps[0]["id"])


def test_a_two_cluster_run_on_a_standalone_master_lands_every_record_once(
    standalone: ClusterInfo, kafka_clusters: dict[str, ClusterEndpoint], tmp_path: Path
) -> None:
    stream = TwoClusterStream(kafka_clusters, tmp_path)
    harness = stream.harness
    config = yaml.safe_load(harness.config_path.read_text())
    config["spark"] = {"master": standalone.master_url, "app_name": tmp_path.name}
    harness.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    stream.produce("standalone", east=30, west=20)

    run = harness.cli("run", "--json", env=LOOPBACK, timeout=600)

    summary = summary_of(run)
    assert (summary["run_seq"], summary["status"], summary["records"]) == (1, "committed", 50)
    assert {t["cluster_id"]: t["records"] for t in summary["topics"]} == {"east": 30, "west": 20}
    assert harness.sink_rows() == stream.expected_rows()
    assert committed_offsets(harness) == stream.end_offsets()
    # The job ran as an application of the standalone master, in executors on the workers, which fetched the
    # Kafka connector from the driver (it is on no classpath of a worker).
    apps = wait_for(
        lambda: [a for a in master_state(standalone)["completedapps"] if a["name"] == tmp_path.name],
        timeout_s=60,
        what="the master to list the run's application as completed",
    )
    assert len(apps) == 1
    executor_dirs = [d for dirs in _executor_dirs(standalone, apps[0]["id"]).values() for d in dirs]
    assert executor_dirs
    assert all(any(d.glob("*spark-sql-kafka-0-10*.jar")) for d in executor_dirs)


def test_a_connect_server_on_two_workers_lands_every_record_once(
    standalone: ClusterInfo,
    connect_on_cluster: dict[str, Any],
    kafka_clusters: dict[str, ClusterEndpoint],
    tmp_path: Path,
) -> None:
    server = connect_on_cluster
    assert server["master"] == standalone.master_url
    assert "spark.cores.max=2" in Path(f"/proc/{server['pid']}/cmdline").read_bytes().decode().split("\0")
    stream = TwoClusterStream(kafka_clusters, tmp_path / "pipeline", spark_config={"remote": server["remote"]})
    harness = stream.harness
    stream.produce("connect", east=30, west=20)

    run = harness.cli("run", "--json", timeout=600)

    summary = summary_of(run)
    assert (summary["run_seq"], summary["status"], summary["records"]) == (1, "committed", 50)
    assert {t["cluster_id"]: t["records"] for t in summary["topics"]} == {"east": 30, "west": 20}
    assert harness.sink_rows() == stream.expected_rows()
    assert committed_offsets(harness) == stream.end_offsets()
    # The server is an application of the standalone master while it runs, with an executor on each worker, each
    # of which fetched the Kafka connector and Delta from the server (the driver).
    per_worker = _executor_dirs(standalone, _connect_app_id(standalone))
    assert all(per_worker.values()), per_worker
    executor_dirs = [d for dirs in per_worker.values() for d in dirs]
    for jar in ("spark-sql-kafka-0-10", "delta-spark"):
        assert all(any(d.glob(f"*{jar}*.jar")) for d in executor_dirs), jar
    # The cluster is on loopback, so the server's driver listens there too: executors call it back on loopback
    # (Spark names it localhost), not at the host's network address (its pick when the host name is loopback).
    stderr = [(d / "stderr").read_text() for d in executor_dirs]
    driver_hosts = {host for text in stderr for host in re.findall(r"CoarseGrainedScheduler@([^:]+):", text)}
    assert driver_hosts
    assert driver_hosts <= {"127.0.0.1", "localhost"}

    stream.produce("connect-2", east=5, west=0)
    again = harness.cli("run", "--json", timeout=600)

    summary = summary_of(again)
    assert (summary["run_seq"], summary["status"], summary["records"]) == (2, "committed", 5)
    assert harness.sink_rows() == stream.expected_rows()
    assert committed_offsets(harness) == stream.end_offsets()


# Last in the module: it leaves the cluster one worker short.
def test_a_worker_killed_mid_run_loses_nothing_and_duplicates_nothing(
    standalone: ClusterInfo,
    connect_on_cluster: dict[str, Any],
    kafka_clusters: dict[str, ClusterEndpoint],
    tmp_path: Path,
) -> None:
    stream = TwoClusterStream(
        kafka_clusters, tmp_path / "pipeline", spark_config={"remote": connect_on_cluster["remote"]}
    )
    harness = stream.harness
    stream.produce("killed", east=3000, west=2000)
    app_id = _connect_app_id(standalone)
    seen = {path: path.read_text().count("Running task") for path in _executor_logs(standalone, app_id)}
    result: list[subprocess.CompletedProcess[str]] = []
    runner = threading.Thread(target=lambda: result.append(harness.cli("run", "--json", timeout=600)))
    runner.start()
    try:
        # The first task this run starts names the worker to kill: its executor is busy with the run right now.
        busy = wait_for(
            lambda: next(
                (
                    path
                    for path in _executor_logs(standalone, app_id)
                    if path.read_text().count("Running task") > seen.get(path, 0)
                ),
                None,
            ),
            timeout_s=300,
            interval_s=0.05,
            what="an executor of the Connect server to start one of the run's tasks",
        )
        assert busy is not None
        victim = next(w for w in standalone.workers if Path(w.work_dir) in busy.parents)
        os.kill(victim.pid, signal.SIGKILL)
    finally:
        runner.join(timeout=620)

    summary = summary_of(result[0])
    assert (summary["run_seq"], summary["status"], summary["records"]) == (1, "committed", 5000)
    assert harness.sink_rows() == stream.expected_rows()
    assert committed_offsets(harness) == stream.end_offsets()
    # The master saw the worker go, and the server lost the executor it ran and went on with the other.
    workers = {w["port"]: w["state"] for w in master_state(standalone)["workers"]}
    assert workers[victim.port] == "DEAD"
    server_log = Path(connect_on_cluster["log_file"]).read_text()
    assert "Lost executor" in server_log or "lost worker" in server_log.lower(), tail(server_log)


def _executor_logs(cluster: ClusterInfo, app_id: str) -> list[Path]:
    return [d / "stderr" for dirs in _executor_dirs(cluster, app_id).values() for d in dirs if (d / "stderr").exists()]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    """Runs ``python -m devtools ARGS`` in a fresh process."""
    command = [sys.executable, "-m", "devtools", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
