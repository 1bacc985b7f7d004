"""Concurrent launches of one pipeline: one run wins, the other stops with "another run is in progress".

Runs at the same moment are CLI processes on the same state: whichever takes the pipeline's run first executes; the
other must exit non-zero at once, having written nothing. A run started while another holds its planned run (held
in this process at the point right before its Spark read, so the window is certain at any load) must be refused
too: a planned run that is alive must not be taken for a crashed one and executed twice.

The race is decided by the lock and the state, not by Spark: the racing processes use the session's Spark Connect
server, so none of them starts a driver JVM.

Each case also runs as on two hosts: every process gets its own run-lock folder (``DYNAMIC_KAFKA_RUN_LOCK_DIR``), so
the local lock cannot tell them apart. Then only the state can: the exact-version commit of the plan (two runs at
the same moment, after a first run made the state exist) and the planned run's owner and lease (a run started while
the other is in its Spark job must be refused, naming the owner, not recover the live run).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

from devtools.local_kafka import ClusterEndpoint
from dynamic_kafka.faults import acting_at
from dynamic_kafka.protocol.guard import RUN_LOCK_DIR_ENV
from tests.support.exactly_once import (
    TwoClusterStream,
    assert_nothing_left,
    cli_runs_together,
    committed_offsets,
    summary_of,
    tail,
)

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from devtools.local_kafka import ClusterEndpoint
    from devtools.testing.pipeline import PipelineHarness
    from dynamic_kafka.model.summary import RunSummary

pytestmark = pytest.mark.integration

T = TypeVar("T")

IN_PROGRESS = "another run is in progress for pipeline 'p'"


def host_envs(folder: Path, count: int) -> list[dict[str, str]]:
    """One environment per process, each with its own run-lock folder: processes as on separate hosts."""
    return [{RUN_LOCK_DIR_ENV: str(folder / f"host-{i}")} for i in range(count)]


@pytest.fixture
def stream(kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path) -> TwoClusterStream:
    """A fresh two-cluster stream with 50 records waiting for the pipeline's first run (in this process, on the
    session's Spark)."""
    stream = TwoClusterStream(kafka_clusters, tmp_path, spark=lambda: spark)
    stream.produce("first", east=30, west=20)
    return stream


@pytest.mark.parametrize("spark_mode", ["connect"], indirect=True)
def test_two_runs_started_at_the_same_moment_one_lands_the_records_once_the_other_is_refused(
    kafka_clusters: dict[str, ClusterEndpoint], tmp_path: Path, spark_mode: Any
) -> None:
    stream = TwoClusterStream(kafka_clusters, tmp_path, spark=spark_mode.session, spark_config=spark_mode.config)
    stream.produce("first", east=30, west=20)
    harness = stream.harness

    results = cli_runs_together(harness, 2)

    winners = [r for r in results if r.returncode == 0]
    losers = [r for r in results if r.returncode != 0]
    assert len(winners) == 1, "\n---\n".join(tail(r.stderr) for r in results)
    _assert_first_run_landed_everything(winners[0])
    _assert_refused(losers[0], run_seq=1)
    _assert_consistent(harness, stream)


def test_a_run_started_while_another_holds_its_planned_run_is_refused_and_recovers_nothing(
    stream: TwoClusterStream,
) -> None:
    harness = stream.harness

    refused = run_while_planned(harness, lambda: harness.cli("run", "--json"))

    _assert_refused(refused, run_seq=1)
    _assert_consistent(harness, stream)


@pytest.mark.parametrize("spark_mode", ["connect"], indirect=True)
def test_on_two_hosts_two_runs_started_at_the_same_moment_one_lands_the_records_once_the_other_is_refused(
    kafka_clusters: dict[str, ClusterEndpoint], spark_mode: Any, tmp_path: Path
) -> None:
    # The first run only makes the state exist, so it runs in this process; the two racing runs are CLI processes.
    stream = TwoClusterStream(kafka_clusters, tmp_path, spark=spark_mode.session, spark_config=spark_mode.config)
    stream.produce("first", east=30, west=20)
    harness = stream.harness
    envs = host_envs(tmp_path, 2)
    first = harness.face().run()
    assert (first.run_seq, first.status, first.records, first.recovered_run_seq) == (1, "committed", 50, None)
    stream.produce("second", east=7, west=5)

    results = cli_runs_together(harness, 2, envs=envs)

    winners = [r for r in results if r.returncode == 0]
    losers = [r for r in results if r.returncode != 0]
    assert len(winners) == 1, "\n---\n".join(tail(r.stderr) for r in results)
    summary = summary_of(winners[0])
    assert (summary["run_seq"], summary["status"], summary["records"]) == (2, "committed", 12)
    _assert_refused(losers[0], run_seq=2)
    assert harness.sink_rows() == stream.expected_rows()
    assert committed_offsets(harness) == stream.end_offsets()
    assert [(r.run_seq, r.status) for r in harness.runner().store.run_history()] == [(2, "committed"), (1, "committed")]
    assert_nothing_left(harness)


def test_on_two_hosts_a_run_started_while_another_holds_its_planned_run_is_refused_naming_its_owner(
    stream: TwoClusterStream, tmp_path: Path
) -> None:
    harness = stream.harness
    (other_host,) = host_envs(tmp_path, 1)

    refused = run_while_planned(harness, lambda: harness.cli("run", "--json", env=other_host))

    _assert_refused(refused, run_seq=1)
    assert "it is held by host " in refused.stderr
    assert "its lease runs until" in refused.stderr
    _assert_consistent(harness, stream)


def run_while_planned(harness: PipelineHarness, second: Callable[[], T]) -> T:
    """Runs the pipeline in this process, holding it right before its Spark read (its plan written, its lease and
    lock held) while ``second`` runs; then lets it finish, checks it landed everything, and returns what ``second``
    returned."""
    reached, release = threading.Event(), threading.Event()

    def hold() -> None:
        reached.set()
        assert release.wait(timeout=600), "the test never released the first run"

    outcome: list[RunSummary] = []
    with acting_at("before_read", hold):
        first = threading.Thread(target=lambda: outcome.append(harness.runner().run()))
        first.start()
        try:
            assert reached.wait(timeout=300), "the first run never reached its read"
            head = harness.runner().store.load().last_run
            assert head is not None
            assert (head.run_seq, head.status) == (1, "planned")
            result = second()
        finally:
            release.set()
            first.join(timeout=600)
    assert outcome, "the first run did not end"
    assert (outcome[0].run_seq, outcome[0].status, outcome[0].records) == (1, "committed", 50)
    assert outcome[0].recovered_run_seq is None
    return result


def _assert_first_run_landed_everything(result: Any) -> None:
    summary = summary_of(result)
    assert (summary["run_seq"], summary["status"], summary["records"]) == (1, "committed", 50)
    assert summary["recovered_run_seq"] is None


def _assert_refused(result: Any, *, run_seq: int) -> None:
    assert result.returncode == 1, tail(result.stderr)
    assert result.stdout == ""
    assert f"{IN_PROGRESS} (it planned run_seq {run_seq} first)" in result.stderr
    assert "Traceback" not in result.stderr


def _assert_consistent(harness: PipelineHarness, stream: TwoClusterStream) -> None:
    """Every record once in the sink, every offset committed, one committed run, nothing left to recover."""
    assert harness.sink_rows() == stream.expected_rows()
    assert committed_offsets(harness) == stream.end_offsets()
    assert [(r.run_seq, r.status) for r in harness.runner().store.run_history()] == [(1, "committed")]
    assert_nothing_left(harness)
