"""Start, stop and inspect a local Spark standalone cluster (a master and N workers) under a base folder.

Layout of the base folder (``./.local-spark-cluster`` unless ``$DYNAMIC_KAFKA_SPARK_CLUSTER_DIR`` or an argument
says otherwise)::

    cluster.json        the cluster (ClusterInfo as JSON: pids, ports, URLs; never a secret)
    master/             the master's folder: spark.properties, process.pid, master.log
    worker-N/           a worker's folder: spark.properties, process.pid, worker.log, work/ (its executors' folders)

Each daemon is pyspark's own ``spark-class org.apache.spark.deploy.master.Master`` or ``...worker.Worker`` (the
classes Spark's ``start-master.sh`` and ``start-worker.sh`` run), so the cluster's Spark is exactly the client's.
A daemon is identified by its pid and by the path of its ``--properties-file`` in its command line, so a reused
pid never counts as ours. Everything binds to 127.0.0.1. The workers get no jar and no secret: a Spark Connect
server (the driver) ships the Kafka connector and Delta to its executors, and the Kafka and storage options travel
inside its tasks, never on a worker's command line or in its environment.

``up`` on a folder whose master runs starts only the workers that are not running (e.g. one killed by a test),
each on a fresh port: the master may still hold the dead one's address.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from devtools.errors import LocalSparkClusterError
from devtools.lifecycle import ServiceKind, is_running
from dynamic_kafka._toolchain import process
from dynamic_kafka._toolchain.filelock import exclusive_lock

if TYPE_CHECKING:
    from collections.abc import Callable

logger = logging.getLogger(__name__)

BASE_DIR_ENV = "DYNAMIC_KAFKA_SPARK_CLUSTER_DIR"
HOST = "127.0.0.1"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
START_TIMEOUT_S = 300.0
STOP_TIMEOUT_S = 30.0
KIND = ServiceKind(
    label="Spark standalone cluster",
    dir_env=BASE_DIR_ENV,
    default_dir=".local-spark-cluster",
    state_file="cluster.json",
    pid_file="process.pid",
    error=LocalSparkClusterError,
)
_PROPERTIES_FILE = "spark.properties"
_LOCK_FILE = ".lock"
# What a daemon reads besides its arguments: the master forgets finished applications early (a long-lived test
# or benchmark cluster runs hundreds), and a worker deletes the folders of finished applications' executors.
_MASTER_PROPERTIES = "spark.deploy.retainedApplications=50\nspark.deploy.retainedDrivers=50\n"
_WORKER_PROPERTIES = (
    "spark.worker.cleanup.enabled=true\nspark.worker.cleanup.interval=600\nspark.worker.cleanup.appDataTtl=3600\n"
)


class WorkerInfo(BaseModel):
    """One worker of the cluster."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="The worker's folder name under the base folder, e.g. worker-1.")
    pid: int = Field(description="The worker's JVM process id.")
    port: int = Field(description="The worker's RPC port on 127.0.0.1.")
    web_port: int = Field(description="The worker's web UI port on 127.0.0.1.")
    work_dir: str = Field(description="Where the worker keeps its executors' folders (one per application).")


class ClusterInfo(BaseModel):
    """A local Spark standalone cluster, as recorded in ``cluster.json``.

    Example:
        >>> ClusterInfo(master_pid=1, port=17077, web_port=18080, worker_cores=1, worker_memory="1g", workers=[],
        ...             started_at="2026-01-01T00:00:00+00:00").master_url
        'spark://127.0.0.1:17077'
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    master_pid: int = Field(description="The master's JVM process id.")
    port: int = Field(description="The master's RPC port on 127.0.0.1 (clients and workers connect to it).")
    web_port: int = Field(description="The master's web UI port on 127.0.0.1 (JSON status at /json/).")
    worker_cores: int = Field(description="Cores each worker offers to executors.")
    worker_memory: str = Field(description="Memory each worker offers to executors, e.g. 1g.")
    workers: list[WorkerInfo] = Field(description="The workers, in folder order.")
    started_at: str = Field(description="When the master was started (ISO 8601, UTC).")

    @property
    def master_url(self) -> str:
        """The URL drivers give as their master (``spark-connect up --master``)."""
        return f"spark://{HOST}:{self.port}"

    @property
    def web_url(self) -> str:
        """The master's web UI."""
        return f"http://{HOST}:{self.web_port}"

    def as_json(self) -> dict[str, object]:
        """What ``spark-cluster up --json`` prints."""
        return {"master_url": self.master_url, "web_url": self.web_url, **self.model_dump()}


class ClusterStatus(BaseModel):
    """A recorded cluster and which of its daemons run now."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    info: ClusterInfo
    master_running: bool
    workers_running: dict[str, bool]


def resolve_base_dir(base_dir: Path | None = None) -> Path:
    """Return the base folder: the argument, else ``$DYNAMIC_KAFKA_SPARK_CLUSTER_DIR``, else
    ``./.local-spark-cluster``.
    """
    return KIND.resolve_base_dir(base_dir)


def start_cluster(
    *,
    base_dir: Path | None = None,
    workers: int = 2,
    worker_cores: int = 1,
    worker_memory: str = "1g",
    port: int | None = None,
    web_port: int | None = None,
    start_timeout_s: float = START_TIMEOUT_S,
) -> ClusterInfo:
    """Start a master and ``workers`` workers and wait until every worker is registered; a running cluster of the
    same shape is left alone, except that its workers that stopped are started again (each on a fresh port).

    Args:
        base_dir: the cluster's folder (see :func:`resolve_base_dir`).
        workers: how many workers, each its own process.
        worker_cores: cores each worker offers (``--cores``).
        worker_memory: memory each worker offers (``--memory``, e.g. ``1g``).
        port: the master's RPC port (default: a free one).
        web_port: the master's web UI port (default: a free one).
        start_timeout_s: how long to wait for every worker to register.

    Returns:
        The running cluster.

    Raises:
        LocalSparkClusterError: a cluster of another shape runs from this folder, a port is taken, or a daemon
            did not come up (the message has its log's tail).
        ToolchainError: no Java 17+.
    """
    if workers < 1 or worker_cores < 1:
        raise LocalSparkClusterError(
            f"a cluster needs at least one worker with one core; asked for {workers} with {worker_cores}.",
            hint="Pass --workers 1 or more and --worker-cores 1 or more.",
        )
    base = resolve_base_dir(base_dir)
    with exclusive_lock(base / _LOCK_FILE):
        current = KIND.load(base, ClusterInfo)
        if current is not None and is_running(current.master_pid, _marker(base / "master")):
            shape = (len(current.workers), current.worker_cores, current.worker_memory)
            if shape != (workers, worker_cores, worker_memory):
                raise LocalSparkClusterError(
                    f"a Spark standalone cluster already runs from {base} with {shape[0]} worker(s) of "
                    f"{shape[1]} core(s) and {shape[2]}; asked for {workers} of {worker_cores} and {worker_memory}.",
                    hint="Stop it first (`python -m devtools spark-cluster down`) or use another --base-dir.",
                )
            return _restart_stopped_workers(base, current, start_timeout_s=start_timeout_s)
        return _start(
            base,
            workers=workers,
            worker_cores=worker_cores,
            worker_memory=worker_memory,
            port=port,
            web_port=web_port,
            start_timeout_s=start_timeout_s,
        )


def stop_cluster(*, base_dir: Path | None = None, timeout_s: float = STOP_TIMEOUT_S) -> ClusterInfo | None:
    """Stop the workers (each stops its executors), then the master; return the cluster, None if none ran."""
    base = resolve_base_dir(base_dir)
    with exclusive_lock(base / _LOCK_FILE):
        current = KIND.load(base, ClusterInfo)
        if current is None:
            return None
        outcomes = [
            KIND.stop(base / w.name, w.pid, _marker(base / w.name), timeout_s=timeout_s) for w in current.workers
        ]
        outcomes.append(KIND.stop(base / "master", current.master_pid, _marker(base / "master"), timeout_s=timeout_s))
        return None if all(o is None for o in outcomes) else current


def cluster_status(base_dir: Path | None = None) -> ClusterStatus | None:
    """Return the recorded cluster of ``base_dir`` and which daemons run, or None if none was ever started there."""
    base = resolve_base_dir(base_dir)
    current = KIND.load(base, ClusterInfo)
    if current is None:
        return None
    return ClusterStatus(
        info=current,
        master_running=is_running(current.master_pid, _marker(base / "master")),
        workers_running={w.name: is_running(w.pid, _marker(base / w.name)) for w in current.workers},
    )


def master_state(info: ClusterInfo) -> dict[str, Any]:
    """The master's JSON status page: its workers (with ``state`` ALIVE or DEAD) and applications.

    Raises:
        OSError: the master does not answer.
    """
    with urllib.request.urlopen(f"{info.web_url}/json/", timeout=5) as response:  # noqa: S310 (loopback URL)
        state: dict[str, Any] = json.load(response)
    return state


def _start(
    base: Path,
    *,
    workers: int,
    worker_cores: int,
    worker_memory: str,
    port: int | None,
    web_port: int | None,
    start_timeout_s: float,
) -> ClusterInfo:
    ports = _free_ports(2, wanted=[p for p in (port, web_port) if p is not None])
    port = port if port is not None else ports.pop()
    web_port = web_port if web_port is not None else ports.pop()
    for wanted in (port, web_port):
        if not process.port_is_free(wanted):
            raise LocalSparkClusterError(
                f"port {wanted} on 127.0.0.1 is in use by another process; the Spark master cannot bind it.",
                hint="Stop that process or pick other ports (--port, --web-port).",
            )
    begun = time.monotonic()
    master_dir = base / "master"
    master_pid = _spawn(
        master_dir,
        "master",
        MASTER_CLASS,
        _MASTER_PROPERTIES,
        ["--host", HOST, "--port", str(port), "--webui-port", str(web_port)],
    )
    info = ClusterInfo(
        master_pid=master_pid,
        port=port,
        web_port=web_port,
        worker_cores=worker_cores,
        worker_memory=worker_memory,
        workers=[],
        started_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    )
    logger.info("starting Spark master at %s (pid %d)", info.master_url, master_pid)
    try:
        _wait(
            base,
            info,
            lambda: None if process.accepts_connections(port) else "not listening",
            deadline=begun + start_timeout_s,
        )
        info = info.model_copy(update={"workers": [_spawn_worker(base, info, i + 1) for i in range(workers)]})
        KIND.save(base, info)
        _wait_for_workers(base, info, deadline=begun + start_timeout_s)
    except BaseException:
        for worker in info.workers:
            KIND.stop(base / worker.name, worker.pid, _marker(base / worker.name), timeout_s=STOP_TIMEOUT_S)
        KIND.stop(master_dir, master_pid, _marker(master_dir), timeout_s=STOP_TIMEOUT_S)
        raise
    logger.info("Spark standalone cluster ready after %.1f s: %d worker(s)", time.monotonic() - begun, workers)
    return info


def _restart_stopped_workers(base: Path, info: ClusterInfo, *, start_timeout_s: float) -> ClusterInfo:
    workers = [
        w if is_running(w.pid, _marker(base / w.name)) else _spawn_worker(base, info, int(w.name.split("-")[1]))
        for w in info.workers
    ]
    if workers == info.workers:
        logger.info("Spark standalone cluster already runs at %s", info.master_url)
        return info
    info = info.model_copy(update={"workers": workers})
    KIND.save(base, info)
    _wait_for_workers(base, info, deadline=time.monotonic() + start_timeout_s)
    return info


def _spawn_worker(base: Path, info: ClusterInfo, number: int) -> WorkerInfo:
    name = f"worker-{number}"
    port, web_port = _free_ports(2)
    work_dir = base / name / "work"
    arguments = [info.master_url, "--host", HOST, "--port", str(port), "--webui-port", str(web_port)]
    arguments += ["--cores", str(info.worker_cores), "--memory", info.worker_memory, "--work-dir", str(work_dir)]
    pid = _spawn(base / name, "worker", WORKER_CLASS, _WORKER_PROPERTIES, arguments)
    logger.info("starting Spark %s on 127.0.0.1:%d (pid %d)", name, port, pid)
    return WorkerInfo(name=name, pid=pid, port=port, web_port=web_port, work_dir=str(work_dir))


def _spawn(folder: Path, role: str, main_class: str, properties: str, arguments: list[str]) -> int:
    import pyspark

    from dynamic_kafka._toolchain.java import find_java

    java = find_java()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / _PROPERTIES_FILE).write_text(properties)
    spark_home = Path(pyspark.__file__).parent
    argv = [str(spark_home / "bin" / "spark-class"), main_class, *arguments]
    argv += ["--properties-file", _marker(folder)]
    env = {**os.environ, "SPARK_HOME": str(spark_home), "JAVA_HOME": str(java.resolve().parent.parent)}
    # A calling pyspark process's variables must not reach the daemon; every daemon port binds to loopback.
    for key in ("PYSPARK_SUBMIT_ARGS", "SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE"):
        env.pop(key, None)
    env |= {"SPARK_LOCAL_IP": HOST, "SPARK_LOG_DIR": str(folder)}
    return KIND.spawn(argv, folder=folder, log_file=folder / f"{role}.log", env=env)


def _wait_for_workers(base: Path, info: ClusterInfo, *, deadline: float) -> None:
    wanted = {w.port for w in info.workers}

    def registered() -> str | None:
        for worker in info.workers:
            if not is_running(worker.pid, _marker(base / worker.name)):
                log = base / worker.name / "worker.log"
                raise LocalSparkClusterError(
                    f"the Spark standalone cluster under {base} did not come up: {worker.name} exited "
                    f"(code {process.exit_code(worker.pid)}); last lines of {log}:\n{process.tail(log)}",
                    hint="Check that the machine has the cores and memory asked for (--worker-cores, --worker-memory).",
                )
        try:
            alive = {w["port"] for w in master_state(info)["workers"] if w["state"] == "ALIVE"}
        except (OSError, ValueError) as e:
            return f"the master's status page did not answer ({e})"
        missing = wanted - alive
        return None if not missing else f"{len(missing)} worker(s) not registered yet"

    _wait(base, info, registered, deadline=deadline)


def _wait(base: Path, info: ClusterInfo, probe: Callable[[], str | None], *, deadline: float) -> None:
    log = base / "master" / "master.log"
    KIND.wait_until_ready(
        info.master_pid,
        _marker(base / "master"),
        probe,
        deadline=deadline,
        not_ready=lambda why: LocalSparkClusterError(
            f"the Spark standalone cluster under {base} did not come up: {why}; last lines of {log}:\n"
            f"{process.tail(log)}",
            hint="Check that Java 17+ is installed and that the machine has the cores and memory asked for.",
        ),
        interval_s=0.5,
    )


def _free_ports(count: int, *, wanted: list[int] | None = None) -> list[int]:
    ports: set[int] = set()
    while len(ports) < count:
        candidate = process.free_port()
        if candidate not in (wanted or []):
            ports.add(candidate)
    return sorted(ports)


def _marker(folder: Path) -> str:
    return str(folder / _PROPERTIES_FILE)
