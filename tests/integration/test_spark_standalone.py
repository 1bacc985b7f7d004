"""The two-cluster run on a Spark standalone cluster: nothing depends on local mode or on the driver's classpath.

A master and a worker (1 core, 1 GiB) run on loopback from the installed pyspark. The pipeline runs in a separate
CLI process, once with its own driver (``spark: {master: spark://127.0.0.1:PORT}``) and once through a Spark
Connect server started by ``python -m devtools spark-connect up --master spark://127.0.0.1:PORT``. Either way the Kafka
reads and the Delta write run in an executor on the worker, which gets the Kafka connector and Delta jars only
from the driver (they are on no classpath of the worker).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyspark
import pytest
import yaml

from devtools.testing.clusters import distinct_free_ports
from devtools.testing.kafka import wait_for
from dynamic_kafka._toolchain.process import free_port
from tests.support.exactly_once import TwoClusterStream, committed_offsets, summary_of, tail

if TYPE_CHECKING:
    from collections.abc import Iterator

    from devtools.local_kafka import ClusterEndpoint

pytestmark = pytest.mark.integration

SPARK_HOME = Path(pyspark.__file__).parent
LOOPBACK = {"SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1"}


@dataclass(frozen=True)
class StandaloneCluster:
    master_url: str
    web_url: str
    work_dir: Path

    def state(self) -> dict[str, Any]:
        """The master's JSON status page (workers, applications)."""
        with urllib.request.urlopen(f"{self.web_url}/json/", timeout=5) as response:  # noqa: S310 (loopback URL)
            state: dict[str, Any] = json.load(response)
        return state


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    """A Spark standalone master and one worker on 127.0.0.1, killed (process groups) at the end of the module."""
    folder = tmp_path_factory.mktemp("spark-standalone")
    port, web_port = distinct_free_ports(2)
    cluster = StandaloneCluster(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{web_port}", folder / "work")
    logs = {"master": folder / "master.log", "worker": folder / "worker.log"}
    processes: dict[str, subprocess.Popen[bytes]] = {}
    try:
        processes["master"] = _spark_class(
            logs["master"],
            "org.apache.spark.deploy.master.Master",
            *("--host", "127.0.0.1", "--port", str(port), "--webui-port", str(web_port)),
        )
        processes["worker"] = _spark_class(
            logs["worker"],
            "org.apache.spark.deploy.worker.Worker",
            cluster.master_url,
            *("--host", "127.0.0.1", "--cores", "1", "--memory", "1g", "--webui-port", "0"),
            *("--work-dir", str(cluster.work_dir)),
        )

        def worker_alive() -> bool:
            for name, process in processes.items():
                if process.poll() is not None:
                    raise AssertionError(f"the {name} exited ({process.returncode}):\n{tail(logs[name].read_text())}")
            try:
                return any(w["state"] == "ALIVE" for w in cluster.state()["workers"])
            except (OSError, ValueError):  # not serving yet
                return False

        wait_for(worker_alive, timeout_s=180, interval_s=0.5, what="the Spark worker to register with the master")
        yield cluster
    finally:
        for process in reversed(processes.values()):
            _kill_group(process)


def _spark_class(log: Path, main_class: str, *args: str) -> subprocess.Popen[bytes]:
    """Starts ``spark-class main_class args`` in its own process group, output to ``log``."""
    with log.open("wb") as output:
        return subprocess.Popen(
            [str(SPARK_HOME / "bin" / "spark-class"), main_class, *args],
            stdout=output,
            stderr=subprocess.STDOUT,
            env={**os.environ, **LOOPBACK},
            start_new_session=True,
        )


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group (the daemon and the executors it launched), SIGKILL what is left after 30 s."""
    for sig, wait_s in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def test_a_two_cluster_run_on_a_standalone_master_lands_every_record_once(
    standalone: StandaloneCluster, kafka_clusters: dict[str, ClusterEndpoint], tmp_path: Path
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
    # The job ran as an application of the standalone master, in an executor on the worker, which fetched the
    # Kafka connector from the driver (it is on no classpath of the worker).
    apps = wait_for(
        lambda: [a for a in standalone.state()["completedapps"] if a["name"] == tmp_path.name],
        timeout_s=60,
        what="the master to list the run's application as completed",
    )
    assert len(apps) == 1
    executor_dirs = list((standalone.work_dir / apps[0]["id"]).iterdir())
    assert executor_dirs
    assert all(any(d.glob("*spark-sql-kafka-0-10*.jar")) for d in executor_dirs)

    again = harness.cli("run", "--json", env=LOOPBACK)

    summary = summary_of(again)
    assert (summary["run_seq"], summary["status"], summary["records"], summary["spark_started"]) == (
        2,
        "empty",
        0,
        False,
    )
    assert harness.sink_rows() == stream.expected_rows()


def test_a_connect_server_on_the_standalone_master_lands_every_record_once(
    standalone: StandaloneCluster, kafka_clusters: dict[str, ClusterEndpoint], tmp_path: Path
) -> None:
    base_dir = tmp_path / "spark-connect"
    up = _cli(
        "spark-connect",
        "up",
        "--json",
        "--base-dir",
        str(base_dir),
        "--port",
        str(free_port()),
        "--master",
        standalone.master_url,
        "--driver-memory",
        "1g",
        # A server holds its executors' cores while it runs; on a shared cluster it is capped like this.
        "--conf",
        "spark.cores.max=1",
    )
    try:
        assert up.returncode == 0, f"spark-connect up failed:\n{tail(up.stderr)}"
        server = json.loads(up.stdout)
        assert server["master"] == standalone.master_url
        assert "spark.cores.max=1" in Path(f"/proc/{server['pid']}/cmdline").read_bytes().decode().split("\0")
        stream = TwoClusterStream(kafka_clusters, tmp_path / "pipeline", spark_config={"remote": server["remote"]})
        harness = stream.harness
        stream.produce("connect", east=30, west=20)

        run = harness.cli("run", "--json", timeout=600)

        summary = summary_of(run)
        assert (summary["run_seq"], summary["status"], summary["records"]) == (1, "committed", 50)
        assert {t["cluster_id"]: t["records"] for t in summary["topics"]} == {"east": 30, "west": 20}
        assert harness.sink_rows() == stream.expected_rows()
        assert committed_offsets(harness) == stream.end_offsets()
        # The server is an application of the standalone master while it runs, and its jobs ran in an executor on
        # the worker, which fetched the Kafka connector and Delta from the server (the driver).
        apps = [a for a in standalone.state()["activeapps"] if a["name"] == "dynamic-kafka-spark-connect"]
        assert len(apps) == 1
        executor_dirs = list((standalone.work_dir / apps[0]["id"]).iterdir())
        assert executor_dirs
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
    finally:
        down = _cli("spark-connect", "down", "--base-dir", str(base_dir))
        assert down.returncode == 0, tail(down.stderr)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    """Runs ``python -m devtools ARGS`` in a fresh process."""
    command = [sys.executable, "-m", "devtools", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
