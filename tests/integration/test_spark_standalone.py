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

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyspark
import pytest
import yaml

from devtools.local_spark_cluster import ClusterInfo, start_cluster, stop_cluster
from devtools.local_spark_cluster.cluster import master_state
from devtools.testing.kafka import wait_for
from dynamic_kafka._toolchain.process import free_port
from dynamic_kafka.faults import ENV as FAULT_ENV
from dynamic_kafka.sink import committed_txn_version
from tests.support.exactly_once import (
    TwoClusterStream,
    alive_or_done,
    assert_nothing_left,
    assert_recovered_once,
    committed_offsets,
    first_run_then_more,
    referenced_files,
    summary_of,
    tail,
    unreferenced_data_files,
    window_start_now,
)
from tests.support.secrets import PASSWORD_VAR, assert_absent, sasl_harness, secured_topic

if TYPE_CHECKING:
    from collections.abc import Iterator

    from devtools.local_kafka import ClusterEndpoint, LocalCluster

pytestmark = pytest.mark.integration

S3_SECRET_ENV = "DYNAMIC_KAFKA_TEST_S3_SECRET"  # exported by the local_s3 fixture (tests/conftest.py)

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
    try:
        yield _connect_up(base_dir, free_port(), standalone)
    finally:
        down = _cli("spark-connect", "down", "--base-dir", str(base_dir))
        assert down.returncode == 0, tail(down.stderr)


def _connect_up(base_dir: Path, port: int, cluster: ClusterInfo) -> dict[str, Any]:
    """``python -m devtools spark-connect up`` in ``base_dir`` on ``port``, its jobs on ``cluster``; its JSON."""
    up = _cli(
        "spark-connect",
        *("up", "--json", "--base-dir", str(base_dir), "--port", str(port)),
        *("--master", cluster.master_url, "--driver-memory", "1g"),
        # A server holds its executors' cores while it runs; on a shared cluster it is capped like this.
        *("--conf", "spark.cores.max=2"),
    )
    assert up.returncode == 0, f"spark-connect up failed:\n{tail(up.stderr)}"
    server: dict[str, Any] = json.loads(up.stdout)
    return server


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


@pytest.mark.timeout(900)
def test_a_two_cluster_run_on_a_standalone_master_lands_every_record_once_and_shows_no_key_on_a_command_line(
    standalone: ClusterInfo,
    kafka_clusters: dict[str, ClusterEndpoint],
    s3_storage: dict[str, Any],
    tmp_path: Path,
) -> None:
    """The run's own driver on the standalone master, its sink and state on S3: the executors on the workers write
    with the storage's keys, which no process shows on its command line (the driver's JVM included)."""
    stream = TwoClusterStream(kafka_clusters, tmp_path)
    harness = stream.harness
    harness.configure(sink={"path": f"s3://lake/{tmp_path.name}/orders"}, storage=s3_storage)
    config = yaml.safe_load(harness.config_path.read_text())
    config["spark"] = {"master": standalone.master_url, "app_name": tmp_path.name}
    harness.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    stream.produce("standalone", east=30, west=20)
    secret = os.environ[S3_SECRET_ENV]
    showing: set[str] = set()
    watching = threading.Event()
    watcher = threading.Thread(target=_watch_command_lines, args=(secret, showing, watching))
    watcher.start()
    try:
        run = harness.cli("run", "--json", env=LOOPBACK, timeout=600)
    finally:
        watching.set()
        watcher.join()

    summary = summary_of(run)
    assert (summary["run_seq"], summary["status"], summary["records"]) == (1, "committed", 50)
    assert {t["cluster_id"]: t["records"] for t in summary["topics"]} == {"east": 30, "west": 20}
    assert harness.sink_rows() == stream.expected_rows()
    assert committed_offsets(harness) == stream.end_offsets()
    assert not showing, f"the storage's secret key is on the command line of {sorted(showing)}"
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


@pytest.mark.timeout(600)
def test_a_sasl_run_on_the_cluster_puts_the_password_on_no_command_line_and_in_no_log_of_the_cluster(
    standalone: ClusterInfo,
    connect_on_cluster: dict[str, Any],
    sasl_cluster: LocalCluster,
    sasl_password: str,
    tmp_path: Path,
) -> None:
    """The executors on the workers log in to Kafka with the password, which reaches them inside the server's
    tasks: no process of the machine (master, workers, executors, server) has it in its command line, and no
    file the master, the workers, their executors or the server wrote holds it."""
    topic, sent = secured_topic(sasl_cluster, sasl_password, 20)
    harness = sasl_harness(tmp_path, sasl_cluster, topic, spark_config={"remote": connect_on_cluster["remote"]})

    run = harness.cli("-v", "run", "--json", env={PASSWORD_VAR: sasl_password}, timeout=600)

    summary = summary_of(run)
    assert (summary["status"], summary["records"]) == ("committed", len(sent))
    assert sorted(v for *_, v in harness.sink_rows()) == sorted(r.value for r in sent)
    # The records were read by executors on the workers (the secured cluster's consumers ran there).
    per_worker = _executor_dirs(standalone, _connect_app_id(standalone))
    logs = [d / "stderr" for dirs in per_worker.values() for d in dirs]
    assert any("SASL_PLAINTEXT" in log.read_text() for log in logs), "no executor logged a SASL consumer"
    outputs: dict[str, str | bytes] = {"run stdout": run.stdout, "run stderr": run.stderr}
    outputs.update(_command_lines())
    cluster_dir = Path(standalone.workers[0].work_dir).parent.parent
    outputs.update(_files_under(cluster_dir, Path(connect_on_cluster["log_file"]).parent))
    assert any("worker-" in name and name.endswith("/stderr") for name in outputs), sorted(outputs)[:20]
    assert_absent([sasl_password], outputs)


@pytest.mark.timeout(900)
def test_a_run_killed_after_staging_on_the_cluster_is_recovered_once_and_a_backfill_merges_exactly(
    connect_on_cluster: dict[str, Any], kafka_clusters: dict[str, ClusterEndpoint], tmp_path: Path
) -> None:
    """Recovery and backfill through the cluster: run 2 dies with its files staged in the sink's folder by the
    executors, the next run re-executes it there once, then a backfill of a window past the committed offsets
    merges it, and the run after that dedupes what the backfill landed."""
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"  # this process uses Connect (see conftest's spark_mode)
    stream = TwoClusterStream(kafka_clusters, tmp_path, spark_config={"remote": connect_on_cluster["remote"]})
    harness = stream.harness
    ends_before_crash = first_run_then_more(stream, east=10, west=6)

    crash = harness.cli("run", "--json", env={FAULT_ENV: "after_staging"}, timeout=600)

    assert crash.returncode == -signal.SIGKILL, f"the run was not killed:\n{tail(crash.stderr)}"
    assert committed_txn_version(harness.sink_path, "p") == 1
    assert unreferenced_data_files(harness.sink_path), "no staged files: the run died before its write"
    assert committed_offsets(harness) == ends_before_crash

    assert_recovered_once(stream)

    start = window_start_now()
    stream.produce("window", east=4, west=4)
    backfill = harness.face().backfill(start, datetime.now(UTC) + timedelta(minutes=1))

    assert backfill.records == 8
    assert harness.sink_rows() == stream.expected_rows()
    after = harness.face().run()
    assert (after.run_seq, after.records, after.deduplicated) == (4, 0, 8)
    assert harness.sink_rows() == stream.expected_rows()
    assert committed_offsets(harness) == stream.end_offsets()
    assert_nothing_left(harness)


@pytest.mark.timeout(900)
def test_the_connect_server_killed_during_a_write_on_the_cluster_is_recovered_exactly_after_its_restart(
    standalone: ClusterInfo,
    connect_on_cluster: dict[str, Any],
    kafka_clusters: dict[str, ClusterEndpoint],
    tmp_path: Path,
) -> None:
    """The server (the driver of the executors on the workers) is SIGKILLed while they write the sink: the run
    fails retriably, and the first run after ``spark-connect up`` again recovers it once."""
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"  # this process uses Connect (see conftest's spark_mode)
    server = connect_on_cluster
    stream = TwoClusterStream(kafka_clusters, tmp_path, spark_config={"remote": server["remote"]})
    harness = stream.harness
    # Enough records that the executors' write tasks take a while: the kill lands between a data file and the commit.
    ends_before_crash = first_run_then_more(stream, east=40_000, west=40_000)
    referenced = referenced_files(harness.sink_path)
    outcome: list[subprocess.CompletedProcess[str]] = []
    runner = threading.Thread(target=lambda: outcome.append(harness.cli("run", "--json", timeout=600)))
    runner.start()
    try:
        wait_for(
            alive_or_done(lambda: bool(unreferenced_data_files(harness.sink_path, referenced)), runner),
            timeout_s=300,
            interval_s=0.02,
            what="the executors' write to put a data file into the sink",
        )
        os.kill(server["pid"], signal.SIGKILL)
    finally:
        runner.join(timeout=620)
    assert outcome, "the run process did not end"

    assert outcome[0].returncode == 1, tail(outcome[0].stderr)
    assert "Spark Connect server" in outcome[0].stderr, tail(outcome[0].stderr)
    # The kill landed mid-write (a data file of the run was in the sink's folder) and nothing was committed. The
    # executors outlive their driver for a moment and abort their tasks, deleting those files: unlike local mode,
    # none is left behind.
    assert committed_txn_version(harness.sink_path, "p") == 1
    assert committed_offsets(harness) == ends_before_crash
    # The master drops the dead server's application, and frees its cores for the restarted one.
    wait_for(
        lambda: not [a for a in master_state(standalone)["activeapps"] if a["name"] == CONNECT_APP],
        timeout_s=120,
        what="the master to drop the killed server's application",
    )
    connect_on_cluster.update(_connect_up(Path(server["log_file"]).parent, server["port"], standalone))

    assert_recovered_once(stream)
    assert_nothing_left(harness)


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


def _command_lines() -> dict[str, bytes]:
    """Every process's command line on this machine, by pid (the cluster's daemons and executors, the server)."""
    found = {}
    for entry in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            found[f"the command line of process {entry.parent.name}"] = entry.read_bytes()
    return found


def _watch_command_lines(secret: str, showing: set[str], stop: threading.Event) -> None:
    """Until ``stop``, adds to ``showing`` every process whose command line holds ``secret`` (its arguments)."""
    while not stop.wait(0.1):
        for name, line in _command_lines().items():
            if secret.encode() in line:
                showing.add(name)


def _files_under(*folders: Path) -> dict[str, bytes]:
    """Every file under ``folders`` (logs, executors' stdout and stderr, scratch files) but jars, by path."""
    return {
        str(path): path.read_bytes()
        for folder in folders
        for path in folder.rglob("*")
        if path.is_file() and path.suffix != ".jar"
    }
