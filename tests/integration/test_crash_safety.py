"""Crash safety: a run process killed with SIGKILL at each step, then the next run leaves every record exactly once.

Each case commits a first run, then runs the CLI in a fresh process that dies at one step of the second run:

- ``after_plan``: ``DYNAMIC_KAFKA_FAULT=after_plan``, right after the plan was written ahead (before any JVM);
- ``during_write``: the test SIGKILLs the run's process tree as soon as the Spark write has put a data file into
  the sink, so it dies with files written and no Delta commit. (``DYNAMIC_KAFKA_FAULT=during_write:SECONDS``
  counts from the session start: the read setup before the write took 11 s at load 7 and ~3 s when idle, the
  write itself 15-50 s, so no fixed delay lands inside the write at every load of a shared machine; the first
  data file is a trigger that does.)
- ``after_sink``: ``DYNAMIC_KAFKA_FAULT=after_sink``, after the sink commit but before the state commit.

The next, normal run must recover exactly that run_seq (re-executing its plan, or only committing its offsets
when the sink holds it) and read what came since; the run after that must find nothing to do.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from exactly_once_support import TwoClusterStream, assert_nothing_left, committed_offsets, tail

from dynamic_kafka.faults import ENV as FAULT_ENV
from dynamic_kafka.local_kafka import ClusterEndpoint
from dynamic_kafka.local_spark_connect import server_status
from dynamic_kafka.sink import committed_txn_version
from dynamic_kafka.testing.kafka import wait_for
from dynamic_kafka.testing.pipeline import PipelineHarness

pytestmark = pytest.mark.integration

FAULTS = ("after_plan", "during_write", "after_sink")


@pytest.mark.parametrize("fault", FAULTS)
def test_a_run_killed_at_any_step_is_recovered_by_the_next_run_exactly_once(
    fault: str, kafka_clusters: dict[str, ClusterEndpoint], spark_mode: Any, tmp_path: Path
) -> None:
    if spark_mode.name == "connect" and fault == "during_write":
        pytest.skip(
            "over Spark Connect the write runs in the server: killing the client leaves the server to finish (or "
            "abandon) it; the server-kill test below is the connect-mode case"
        )
    stream = TwoClusterStream(kafka_clusters, tmp_path, spark=spark_mode.session, spark_config=spark_mode.config)
    harness = stream.harness
    first_rows = stream.produce("first", east=12, west=8)
    assert harness.runner().run().run_seq == 1
    ends_before_crash = stream.end_offsets()
    crashed_rows = stream.produce("crashed", east=10, west=6)
    planned_ranges = {k: (ends_before_crash.get(k, 0), stop) for k, stop in stream.end_offsets().items()}

    crash = _kill_during_write(harness) if fault == "during_write" else _cli_run_with_fault(harness, fault)

    assert crash.returncode == -signal.SIGKILL, f"the run was not killed:\n{tail(crash.stderr)}"
    assert crash.stdout == ""
    state = harness.runner().store.load()
    assert state.last_run is not None
    assert (state.last_run.run_seq, state.last_run.status) == (2, "planned")
    assert {
        (s.cluster_id, s.topic, s.partition): (s.start_offset, s.stop_offset) for s in state.last_run.plan.read_splits
    } == planned_ranges
    assert committed_offsets(harness) == ends_before_crash
    sink_txn = committed_txn_version(harness.sink_path, "p")
    if fault == "after_sink":
        assert sink_txn == 2
        assert harness.sink_rows() == sorted(first_rows + crashed_rows)
    else:
        assert sink_txn == 1
        assert harness.sink_rows() == first_rows
    if fault == "during_write":
        assert _unreferenced_data_files(harness.sink_path), "no partial files: the kill did not land mid-write"

    later_rows = stream.produce("later", east=5, west=3)
    recovering = harness.runner().run()

    assert recovering.recovered_run_seq == 2
    assert (recovering.run_seq, recovering.status, recovering.records) == (3, "committed", len(later_rows))
    assert harness.sink_rows() == stream.expected_rows()
    assert committed_offsets(harness) == stream.end_offsets()
    history = {r.run_seq: r.status for r in harness.runner().store.run_history()}
    assert history == {1: "committed", 2: "committed", 3: "committed"}

    assert_nothing_left(harness)
    assert harness.sink_rows() == stream.expected_rows()


def test_a_spark_connect_server_killed_during_the_write_fails_the_run_retriably_and_the_next_run_is_exact(
    kafka_clusters: dict[str, ClusterEndpoint],
    spark_connect_server: Any,
    restart_spark_connect_server: Callable[[], Any],
    tmp_path: Path,
) -> None:
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"  # this process uses Connect (see conftest's spark_mode)
    stream = TwoClusterStream(kafka_clusters, tmp_path, spark_config={"remote": spark_connect_server.remote})
    harness = stream.harness
    stream.produce("first", east=12, west=8)
    assert harness.runner().run().run_seq == 1
    ends_before_crash = stream.end_offsets()
    # Enough records that the server's write tasks take a while: the kill must land between the first data file
    # and the commit.
    stream.produce("crashed", east=40_000, west=40_000)

    referenced = _referenced_files(harness.sink_path)
    outcome: list[subprocess.CompletedProcess[str]] = []
    runner = threading.Thread(target=lambda: outcome.append(harness.cli("run", "--json")))
    runner.start()
    try:
        wait_for(
            _alive_or_done(lambda: bool(_unreferenced_data_files(harness.sink_path, referenced)), runner),
            timeout_s=300,
            interval_s=0.02,
            what="the server's write to put a data file into the sink",
        )
        os.kill(spark_connect_server_pid(spark_connect_server), signal.SIGKILL)
    finally:
        runner.join(timeout=120)
    assert outcome, "the run process did not end"
    failed = outcome[0]

    assert failed.returncode == 1, tail(failed.stderr)
    assert "Spark Connect server" in failed.stderr, tail(failed.stderr)
    assert "Traceback" not in failed.stderr
    state = harness.runner().store.load()
    assert state.last_run is not None
    assert (state.last_run.run_seq, state.last_run.status) == (2, "planned")
    assert committed_txn_version(harness.sink_path, "p") == 1
    assert _unreferenced_data_files(harness.sink_path), "no partial files: the kill did not land mid-write"
    assert committed_offsets(harness) == ends_before_crash

    restart_spark_connect_server()  # `dynamic-kafka spark-connect up` again
    stream.produce("later", east=5, west=3)
    recovering = harness.runner().run()

    assert recovering.recovered_run_seq == 2
    assert (recovering.run_seq, recovering.status, recovering.records) == (3, "committed", 8)
    assert harness.sink_rows() == stream.expected_rows()
    assert committed_offsets(harness) == stream.end_offsets()
    assert_nothing_left(harness)


def spark_connect_server_pid(info: Any) -> int:
    """The test server's pid now (it may have been restarted since the session started)."""
    status = server_status(Path(info.log_file).parent)
    assert status is not None
    assert status.running
    return status.info.pid


def _cli_run_with_fault(harness: PipelineHarness, fault: str) -> subprocess.CompletedProcess[str]:
    return harness.cli("run", "--json", env={FAULT_ENV: fault})


def _kill_during_write(harness: PipelineHarness) -> subprocess.CompletedProcess[str]:
    """Runs the CLI and SIGKILLs its process and the Spark JVM once an uncommitted data file is in the sink."""
    referenced = _referenced_files(harness.sink_path)
    outcome: list[subprocess.CompletedProcess[str]] = []
    runner = threading.Thread(target=lambda: outcome.append(harness.cli("run", "--json")))
    runner.start()
    try:
        pid = wait_for(
            _alive_or_done(lambda: _cli_pid(harness.config_path), runner),
            timeout_s=60,
            what="the run process to start",
        )
        wait_for(
            _alive_or_done(lambda: bool(_unreferenced_data_files(harness.sink_path, referenced)), runner),
            timeout_s=300,
            interval_s=0.05,
            what="the Spark write to put a data file into the sink",
        )
        _kill_tree(pid)
    finally:
        runner.join(timeout=120)
    assert outcome, "the run process did not end"
    return outcome[0]


def _alive_or_done(condition: Callable[[], Any], runner: threading.Thread) -> Callable[[], Any]:
    """``condition``, failing at once if the run ended first (it was never killed)."""

    def check() -> Any:
        found = condition()
        if not found and not runner.is_alive():
            raise AssertionError("the run process ended before it could be killed")
        return found

    return check


def _unreferenced_data_files(sink: Path, referenced: set[str] | None = None) -> list[str]:
    """Data files in the sink folder that no Delta version references (a write that never committed)."""
    if referenced is None:
        referenced = _referenced_files(sink)
    return sorted(p.name for p in sink.glob("part-*.parquet") if p.name not in referenced)


def _referenced_files(sink: Path) -> set[str]:
    return {uri.rsplit("/", 1)[-1] for uri in DeltaTable(str(sink)).file_uris()}


def _cli_pid(config_path: Path) -> int | None:
    """The process running ``dynamic_kafka.cli.main ... --config config_path``, if it runs."""
    wanted = str(config_path).encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"dynamic_kafka.cli.main" in argv and wanted in argv:
            return int(entry.name)
    return None


def _kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and every process descended from it (the Spark JVM), like ``kill -9`` of a container."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    tree, frontier = [pid], [pid]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier]
        tree += children
        frontier = children
    for member in tree:
        with contextlib.suppress(ProcessLookupError):
            os.kill(member, signal.SIGKILL)
