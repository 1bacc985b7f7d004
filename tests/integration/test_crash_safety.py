"""Crash safety: a run process killed with SIGKILL at each step, then the next run leaves every record exactly once.

Each case commits a first run, then runs the CLI in a fresh process that dies at one step of the second run:

- ``after_plan``: ``DYNAMIC_KAFKA_FAULT=after_plan``, right after the plan was written ahead (before any JVM);
- ``during_write``: the test SIGKILLs the run's process tree as soon as the Spark write has put a data file into
  the sink, so it dies with files written and no Delta commit. (``DYNAMIC_KAFKA_FAULT=during_write:SECONDS``
  counts from the session start: the read setup before the write took 11 s at load 7 and ~3 s when idle, the
  write itself 15-50 s, so no fixed delay lands inside the write at every load of a shared machine; the first
  data file is a trigger that does.)
- ``after_staging``: ``DYNAMIC_KAFKA_FAULT=after_staging``, a staged append's files are written into the sink's
  folder, not yet committed to its log;
- ``after_sink``: ``DYNAMIC_KAFKA_FAULT=after_sink``, after the sink commit but before the state commit.

The next, normal run must recover exactly that run_seq (re-executing its plan, or only committing its offsets
when the sink holds it) and read what came since; the run after that must find nothing to do.

More points, each killed in a CLI process with the exact next run checked: during a recovery itself (having taken
the crashed run over, and after re-executing it into the sink), between the dead-letter commit and the sink commit
(JSON values with bad records), and in a backfill between recording its frontier and its MERGE. (The Spark
Connect server itself killed mid-write: ``test_spark_standalone.py``, with the server's executors on a cluster.)
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from devtools.testing.kafka import wait_for
from dynamic_kafka.faults import ENV as FAULT_ENV
from dynamic_kafka.model.summary import RunSummary
from dynamic_kafka.sink import committed_txn_version
from tests.support.exactly_once import (
    DeadLetterStream,
    TwoClusterStream,
    alive_or_done,
    assert_nothing_left,
    committed_offsets,
    referenced_files,
    table_coordinates,
    tail,
    unreferenced_data_files,
)

if TYPE_CHECKING:
    from devtools.local_kafka import ClusterEndpoint
    from devtools.testing.pipeline import PipelineHarness
from devtools.testing.kafka import Record, create_topic, produce, unique_name
from devtools.testing.pipeline import PipelineHarness, Row
from dynamic_kafka.model.plan import TopicPartition

pytestmark = pytest.mark.integration

FAULTS = ("after_plan", "during_write", "after_staging", "after_sink")
# Every point with the write in a Spark Connect server, the mode a deployment runs. The points where the process
# that dies holds the write's driver (local mode: its JVM dies with it) run with the in-process driver too; the
# others die before any JVM or after the sink commit, where the mode changes nothing the recovery sees.
LOCAL_DRIVER_FAULTS = ("during_write", "after_staging")


@pytest.mark.parametrize(
    ("spark_mode", "fault"),
    [("connect", fault) for fault in FAULTS] + [("local", fault) for fault in LOCAL_DRIVER_FAULTS],
    indirect=["spark_mode"],
)
def test_a_run_killed_at_any_step_is_recovered_by_the_next_run_exactly_once(
    fault: str, kafka_clusters: dict[str, ClusterEndpoint], spark_mode: Any, tmp_path: Path
) -> None:
    stream = TwoClusterStream(kafka_clusters, tmp_path, spark=spark_mode.session, spark_config=spark_mode.config)
    harness = stream.harness
    first_rows = stream.produce("first", east=12, west=8)
    assert harness.face().run().run_seq == 1
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
    # Over Spark Connect the write runs in the server, which may finish or abandon it after its client died: the
    # sink holds run 2 or not, and the next run must land every record once either way (of two writers of run 2,
    # Delta's transaction check refuses the later one: it sees txn 2, or fails its commit on the winner's txn).
    orphaned = spark_mode.name == "connect" and fault == "during_write"
    if orphaned:
        assert sink_txn in (1, 2)
    elif fault == "after_sink":
        assert sink_txn == 2
        assert harness.sink_rows() == sorted(first_rows + crashed_rows)
    else:
        assert sink_txn == 1
        assert harness.sink_rows() == first_rows
    if fault in ("during_write", "after_staging") and not orphaned:
        assert unreferenced_data_files(harness.sink_path), "no partial files: the kill did not land mid-write"

    later_rows = stream.produce("later", east=5, west=3)
    recovering = harness.face().run()

    assert recovering.recovered_run_seq == 2
    assert (recovering.run_seq, recovering.status, recovering.records) == (3, "committed", len(later_rows))
    assert harness.sink_rows() == stream.expected_rows()
    assert committed_offsets(harness) == stream.end_offsets()
    history = {r.run_seq: r.status for r in harness.runner().store.run_history()}
    assert history == {1: "committed", 2: "committed", 3: "committed"}

    assert_nothing_left(harness)
    assert harness.sink_rows() == stream.expected_rows()


def _cli_run_with_fault(harness: PipelineHarness, fault: str) -> subprocess.CompletedProcess[str]:
    return harness.cli("run", "--json", env={FAULT_ENV: fault}, timeout=900)  # a loaded machine: minutes


def _kill_during_write(harness: PipelineHarness) -> subprocess.CompletedProcess[str]:
    """Runs the CLI and SIGKILLs its process and the Spark JVM once an uncommitted data file is in the sink."""
    referenced = referenced_files(harness.sink_path)
    outcome: list[subprocess.CompletedProcess[str]] = []
    runner = threading.Thread(target=lambda: outcome.append(harness.cli("run", "--json")))
    runner.start()
    try:
        pid = wait_for(
            alive_or_done(lambda: _cli_pid(harness.config_path), runner),
            timeout_s=60,
            what="the run process to start",
        )
        wait_for(
            alive_or_done(lambda: bool(unreferenced_data_files(harness.sink_path, referenced)), runner),
            timeout_s=300,
            interval_s=0.05,
            what="the Spark write to put a data file into the sink",
        )
        _kill_tree(pid)
    finally:
        runner.join(timeout=120)
    assert outcome, "the run process did not end"
    return outcome[0]


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


@pytest.mark.parametrize("fault", ["recovering", "recovery_after_sink"])
def test_a_recovery_killed_midway_is_recovered_by_the_next_run_exactly_once(
    fault: str, kafka_clusters: dict[str, ClusterEndpoint], spark: Any, spark_connect_server: Any, tmp_path: Path
) -> None:
    """Run 2 dies after its plan; the run recovering it dies too (``recovering``: having taken the run over;
    ``recovery_after_sink``: with run 2 re-executed into the sink); the next run still finishes run 2 exactly.
    The processes that die write through the Spark Connect server; this process's runs use its own driver."""
    stream = TwoClusterStream(
        kafka_clusters, tmp_path, spark=lambda: spark, spark_config={"remote": spark_connect_server.remote}
    )
    harness = stream.harness
    stream.produce("first", east=6, west=4)
    assert harness.face().run().run_seq == 1
    ends_after_first = stream.end_offsets()
    stream.produce("crashed", east=5, west=3)
    crash = _cli_run_with_fault(harness, "after_plan")
    assert crash.returncode == -signal.SIGKILL, tail(crash.stderr)
    owner_of_crash = harness.runner().store.load().last_run
    assert owner_of_crash is not None
    later_rows = stream.produce("later", east=2, west=2)

    recovery = _cli_run_with_fault(harness, fault)

    assert recovery.returncode == -signal.SIGKILL, tail(recovery.stderr)
    state = harness.runner().store.load()
    assert state.last_run is not None
    assert (state.last_run.run_seq, state.last_run.status) == (2, "planned")
    assert state.last_run.plan == owner_of_crash.plan  # the same plan, never re-planned
    assert state.last_run.owner != owner_of_crash.owner  # the recovery had taken the run over
    assert committed_offsets(harness) == ends_after_first
    assert committed_txn_version(harness.sink_path, "p") == (2 if fault == "recovery_after_sink" else 1)

    summary = harness.face().run()

    assert summary.recovered_run_seq == 2
    assert (summary.run_seq, summary.status, summary.records) == (3, "committed", len(later_rows))
    assert harness.sink_rows() == stream.expected_rows()
    assert committed_offsets(harness) == stream.end_offsets()
    history = {r.run_seq: r.status for r in harness.runner().store.run_history()}
    assert history == {1: "committed", 2: "committed", 3: "committed"}
    assert_nothing_left(harness)


def test_a_run_killed_between_the_dead_letter_and_the_sink_commits_lands_both_exactly_once(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, spark_connect_server: Any, tmp_path: Path
) -> None:
    """JSON values with bad records under ``on_decode_error: dead_letter``: the dead-letter table is committed with
    run 2's txn, the sink is not, and the process dies. The next run finishes run 2: the dead letters are not
    written twice (Delta skips the txn it holds), the good records land once."""
    remote = {"remote": spark_connect_server.remote}  # the process that dies writes through the server
    stream = DeadLetterStream(kafka_clusters["east"].bootstrap_servers, tmp_path, spark, 2, spark_config=remote)
    harness, send = stream.harness, stream.send
    good, bad = send("first", 3, 2)
    assert harness.face().run().dead_letters == 2
    crashed_good, crashed_bad = send("crashed", 4, 3)

    crash = _cli_run_with_fault(harness, "after_dead_letter")

    assert crash.returncode == -signal.SIGKILL, tail(crash.stderr)
    dead_letter_path = stream.dead_letter_path
    assert committed_txn_version(dead_letter_path, "p") == 2
    assert committed_txn_version(harness.sink_path, "p") == 1
    assert table_coordinates(dead_letter_path) == sorted(bad | crashed_bad)
    assert table_coordinates(harness.sink_path) == sorted(good)

    summary = harness.face().run()

    assert (summary.recovered_run_seq, summary.run_seq, summary.status) == (2, 3, "empty")
    # The recovery's completeness counts its own sink commit and the crashed attempt's dead-letter commit.
    recovered = next(r for r in harness.runner().store.run_history() if r.run_seq == 2)
    assert recovered.summary_json is not None
    counted = RunSummary.model_validate_json(recovered.summary_json).completeness
    assert counted is not None
    assert (counted.read, counted.landed, counted.matches) == (7, 7, True)
    assert table_coordinates(harness.sink_path) == sorted(good | crashed_good)
    assert table_coordinates(dead_letter_path) == sorted(bad | crashed_bad)
    assert committed_txn_version(harness.sink_path, "p") == 2
    assert_nothing_left(harness)


def test_a_backfill_killed_between_its_frontier_and_its_merge_leaves_every_record_once(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, spark_connect_server: Any, tmp_path: Path
) -> None:
    """The backfill raised the state's frontier and died before its MERGE: the sink lacks the window. The next
    incremental run lands it (the frontier only makes it check the sink), and the backfill run again merges
    nothing new."""
    servers = kafka_clusters["east"].bootstrap_servers
    topic = unique_name("backfill-crash")
    create_topic(servers, topic, 1)
    # The backfill process that dies uses the Spark Connect server; this process's runs its own driver.
    remote = {"remote": spark_connect_server.remote}
    harness = PipelineHarness(tmp_path, clusters={"east": servers}, spark=lambda: spark, spark_config=remote)
    harness.set_streams({"orders": {"east": [topic]}})
    t0 = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(hours=2)

    def send(*values: tuple[str, int]) -> list[Row]:
        records = [
            Record(value=v.encode(), timestamp_ms=int((t0 + timedelta(minutes=m)).timestamp() * 1000))
            for v, m in values
        ]
        return [("east", topic, r.partition or 0, r.offset or 0, r.value) for r in produce(servers, topic, records)]

    first = send(("a0", 1), ("a1", 2))
    assert harness.face().run().records == 2
    window = send(("b0", 10), ("b1", 11), ("b2", 12))
    start, end = (t0 + timedelta(minutes=5)).isoformat(), (t0 + timedelta(minutes=30)).isoformat()

    crash = _backfill_cli(harness, start, end, env={FAULT_ENV: "after_frontier"})

    assert crash.returncode == -signal.SIGKILL, tail(crash.stderr)
    state = harness.runner().store.load()
    assert state.backfilled == {TopicPartition(cluster_id="east", topic=topic, partition=0): 5}
    assert state.last_run is not None
    assert (state.last_run.run_seq, state.last_run.status) == (1, "committed")
    assert harness.sink_rows() == sorted(first)

    summary = harness.face().run()

    assert (summary.run_seq, summary.records, summary.deduplicated) == (2, 3, 0)
    assert harness.sink_rows() == sorted(first + window)
    again = harness.face().backfill(datetime.fromisoformat(start), datetime.fromisoformat(end))
    assert (again.records, again.sink_version is not None) == (3, True)
    assert harness.sink_rows() == sorted(first + window)
    assert_nothing_left(harness)


def _backfill_cli(
    harness: PipelineHarness, start: str, end: str, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """A backfill of ``[start, end)`` in a fresh process (there is no backfill command: Dagster runs them)."""
    program = (
        "import sys\n"
        "from datetime import datetime\n"
        "from dynamic_kafka.operations.backfill import run_backfill\n"
        "from dynamic_kafka.config.loader import load_project_config\n"
        "from dynamic_kafka.protocol.context import PipelineContext\n"
        "context = PipelineContext(load_project_config(sys.argv[1]), 'p')\n"
        "run_backfill(context, datetime.fromisoformat(sys.argv[2]), datetime.fromisoformat(sys.argv[3]))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", program, str(harness.config_path), start, end],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env},
        check=False,
    )
