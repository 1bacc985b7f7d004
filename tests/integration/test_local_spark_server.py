"""The local Spark server runs start with ``spark.local_server``: the first run starts it, the next reuses it and
starts no JVM of its own, its token is on no command line, ``spark-server status|stop`` report and stop it, two
processes starting at once share one server, and the idle watchdog stops it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from devtools.testing.kafka import wait_for
from dynamic_kafka._toolchain.process import accepts_connections
from dynamic_kafka.spark.local_server import SERVER_DIR_ENV
from tests.support.exactly_once import TwoClusterStream, committed_offsets, summary_of, tail

if TYPE_CHECKING:
    from collections.abc import Iterator

    from devtools.local_kafka import ClusterEndpoint

pytestmark = pytest.mark.integration


@pytest.fixture
def server_dir(tmp_path: Path) -> Iterator[Path]:
    """The local server's folder for this test; whatever server it holds is stopped at the end."""
    folder = tmp_path / "spark-server"
    yield folder
    _spark_server(folder, "stop")


def _spark_server(folder: Path, command: str) -> dict[str, Any]:
    """``dynamic-kafka spark-server COMMAND --json`` in a fresh process; its JSON."""
    done = subprocess.run(
        [sys.executable, "-m", "dynamic_kafka.cli.main", "spark-server", command, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, SERVER_DIR_ENV: str(folder)},
        check=False,
    )
    assert done.returncode == 0, tail(done.stderr)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


class _Watch:
    """Until stopped, notes every ``java`` process started under a ``dynamic-kafka`` command's process, and every
    process whose command line holds ``secret``."""

    def __init__(self, secret: str) -> None:
        self.secret = secret.encode()
        self.javas: set[int] = set()
        self.showing: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def __enter__(self) -> _Watch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            parents: dict[int, int] = {}
            cmdlines: dict[int, bytes] = {}
            javas = []
            for proc in Path("/proc").glob("[0-9]*"):
                try:
                    cmdline = (proc / "cmdline").read_bytes()
                    stat = (proc / "stat").read_text()
                except OSError:
                    continue
                pid = int(proc.name)
                parents[pid], cmdlines[pid] = int(stat.rpartition(")")[2].split()[1]), cmdline
                if self.secret in cmdline:
                    self.showing.add(cmdline.replace(b"\0", b" ").decode(errors="replace")[:200])
                if stat.split(" (", 1)[1].startswith("java)"):
                    javas.append(pid)
            self.javas.update(pid for pid in javas if _under_the_cli(pid, parents, cmdlines))


def _under_the_cli(pid: int, parents: dict[int, int], cmdlines: dict[int, bytes]) -> bool:
    while pid in parents and pid > 1:
        pid = parents[pid]
        if b"dynamic_kafka.cli.main" in cmdlines.get(pid, b""):
            return True
    return False


@pytest.mark.timeout(900)
def test_the_second_run_reuses_the_first_runs_local_server_and_starts_no_jvm(
    kafka_clusters: dict[str, ClusterEndpoint], tmp_path: Path, server_dir: Path
) -> None:
    env = {SERVER_DIR_ENV: str(server_dir)}
    stream = TwoClusterStream(
        kafka_clusters, tmp_path / "pipeline", spark_config={"local_server": True, "master": "local[2]"}
    )
    harness = stream.harness
    stream.produce("first", east=30, west=20)

    with _Watch("no secret yet") as starting:
        first = harness.cli("run", "--json", env=env, timeout=600)

    summary = summary_of(first)
    assert (summary["run_seq"], summary["status"], summary["records"]) == (1, "committed", 50)
    started = _spark_server(server_dir, "status")
    assert started["running"] is True
    assert started["in_use"] is False  # the run let go of it when it ended
    server = started["server"]
    pid = server["pid"]
    assert pid in starting.javas  # the first run started the server (the watch sees a JVM a run starts)
    token_file = server_dir / "token"
    assert token_file.stat().st_mode & 0o777 == 0o600
    assert server_dir.stat().st_mode & 0o777 == 0o700
    token = token_file.read_text().strip()
    assert len(token) >= 32
    assert token not in json.dumps(started)
    assert token not in Path(server["log_file"]).read_text()
    assert token not in first.stderr + first.stdout

    stream.produce("second", east=5, west=3)
    with _Watch(token) as watch:
        second = harness.cli("-v", "run", "--json", env=env, timeout=600)

    summary = summary_of(second)
    assert (summary["run_seq"], summary["status"], summary["records"]) == (2, "committed", 8)
    assert harness.sink_rows() == stream.expected_rows()
    assert committed_offsets(harness) == stream.end_offsets()
    assert f"using the local Spark server at sc://127.0.0.1:{server['port']} (pid {pid})" in second.stderr
    assert watch.javas == set(), "the second run started a JVM of its own"
    assert not watch.showing, f"the server's token is on a command line: {watch.showing}"
    assert token not in second.stderr + second.stdout
    ps = subprocess.run(["ps", "-eww", "-o", "pid,args"], capture_output=True, text=True, check=True).stdout
    assert token not in ps
    assert _spark_server(server_dir, "status")["server"]["pid"] == pid

    assert _spark_server(server_dir, "stop") == {"stopped": True, "pid": pid}
    assert not accepts_connections(server["port"])
    assert not Path(f"/proc/{pid}").exists() or b"SparkConnectServer" not in Path(f"/proc/{pid}/cmdline").read_bytes()
    assert not token_file.exists()
    assert _spark_server(server_dir, "status") == {
        "folder": str(server_dir),
        "running": False,
        "in_use": False,
        "idle_seconds": None,
        "server": None,
    }
    assert _spark_server(server_dir, "stop") == {"stopped": False, "pid": None}


# Attaches to the local server (starting it if none runs), runs a query, prints the server's pid and lets go.
_ATTACH = """
import logging
from dynamic_kafka.config.models import SparkConfig
from dynamic_kafka.spark.local_server import local_server_status
from dynamic_kafka.spark.session import build_spark_session, stop_spark_session
logging.basicConfig(level=logging.INFO)
spark = build_spark_session(SparkConfig(local_server=True, master="local[1]", local_server_idle_minutes=0.05))
assert spark.range(3).count() == 3
print(local_server_status().server.pid)
stop_spark_session()
"""


@pytest.mark.timeout(600)
def test_two_processes_starting_at_once_share_one_server_which_stops_when_idle(server_dir: Path) -> None:
    env = {**os.environ, SERVER_DIR_ENV: str(server_dir)}
    attaching = [
        subprocess.Popen(
            [sys.executable, "-c", _ATTACH], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    outcomes = [process.communicate(timeout=480) for process in attaching]

    assert [process.returncode for process in attaching] == [0, 0], [tail(err) for _, err in outcomes]
    pids = {int(out.strip()) for out, _ in outcomes}
    assert len(pids) == 1
    assert sum(err.count("starting the local Spark server") for _, err in outcomes) == 1
    # Idle past its 3 seconds with no process attached: the watchdog stops it (it looks every second or so).
    wait_for(
        lambda: not _spark_server(server_dir, "status")["running"],
        timeout_s=120,
        what="the idle local Spark server to stop",
    )
    assert "was idle" in (server_dir / "watchdog.log").read_text()


def test_a_server_that_does_not_come_up_is_a_retriable_error_naming_its_log(
    server_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dynamic_kafka.config.models import SparkConfig
    from dynamic_kafka.errors import LocalSparkServerError
    from dynamic_kafka.spark.local_server import local_server_status
    from dynamic_kafka.spark.session import build_spark_session

    monkeypatch.setenv(SERVER_DIR_ENV, str(server_dir))
    # A heap too small for the JVM to start: the server exits at once.
    unstartable = SparkConfig(local_server=True, conf={"spark.driver.extraJavaOptions": "-Xmx1k"})
    with pytest.raises(LocalSparkServerError, match="exited while starting") as failure:
        build_spark_session(unstartable)
    assert failure.value.retriable
    assert f"last lines of {server_dir / 'server.log'}" in str(failure.value)
    assert "spark.local_server: false" in str(failure.value.hint)
    assert not local_server_status().running
