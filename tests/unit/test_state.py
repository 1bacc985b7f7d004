"""The Delta state: write-ahead protocol, one row per partition, the exact-version guard, crash atomicity and
bounded reads. Real Delta tables (delta-rs) on local disk; no JVM, no broker."""

from __future__ import annotations

import gc
import json
import multiprocessing
import os
import random
import signal
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import deltalake
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

from dynamic_kafka.errors import RunInProgressError, StateError
from dynamic_kafka.frozen import building_many
from dynamic_kafka.model.plan import Finding, Plan, Split, TopicPartition
from dynamic_kafka.model.snapshots import PartitionState, StateSnapshot
from dynamic_kafka.model.summary import RunSummary
from dynamic_kafka.state import StateStore
from dynamic_kafka.state import rows as state_rows
from dynamic_kafka.state import store as store_module
from dynamic_kafka.state import table as table_module
from dynamic_kafka.state.store import RecordedBackfill
from tests.support.builders import a_split

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path


T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
PID = "orders"


def _removed(store: StateStore) -> list[PartitionState]:
    """The partitions the state marks removed."""
    return [p for p in store.load().partitions.values() if p.status == "removed"]


def tp(partition: int, topic: str = "orders", cluster: str = "east") -> TopicPartition:
    return TopicPartition(cluster_id=cluster, topic=topic, partition=partition)


def split(partition: int, start: int, stop: int, topic: str = "orders", cluster: str = "east", **kw: Any) -> Split:
    return a_split(partition, start, stop, topic=topic, cluster=cluster, topic_id="tid-1", **kw)


def plan(run_seq: int, splits: list[Split], removals: tuple[TopicPartition, ...] = (), **kw: Any) -> Plan:
    return Plan(
        pipeline_id=PID,
        run_seq=run_seq,
        splits=tuple(splits),
        removals=removals,
        planned_at=T0 + timedelta(minutes=run_seq),
        **kw,
    )


def uniform_plan(run_seq: int, partitions: int, step: int = 10) -> Plan:
    """Run n reads ``[(n-1)*step, n*step)`` of every partition."""
    return plan(run_seq, [split(p, (run_seq - 1) * step, run_seq * step) for p in range(partitions)])


def run_once(store: StateStore, make_plan: Callable[[int], Plan]) -> StateSnapshot:
    state = store.load()
    p = make_plan(state.next_run_seq)
    version = store.begin_run(p, expected_version=state.table_version)
    store.commit_run(p, summary=RunSummary.of_plan(p, "committed"), expected_version=version)
    return state


def rows_of_kind(path: Path, kind: str) -> list[dict[str, Any]]:
    dt = DeltaTable(path)
    rows: list[dict[str, Any]] = dt.to_pyarrow_dataset(file_pruning_predicate=f"kind = '{kind}'").to_table().to_pylist()
    return rows


@pytest.fixture
def store(tmp_path: Path) -> StateStore:
    return StateStore(tmp_path / "state", PID, clock=lambda: T0 + timedelta(hours=1))


# ------------------------------------------------------------------------------------------------ round trips


def test_missing_table_is_an_empty_state(store: StateStore) -> None:
    state = store.load()
    assert state == StateSnapshot(pipeline_id=PID, table_version=None)
    assert state.next_run_seq == 1
    assert store.run_history() == []
    assert _removed(store) == []
    store.maintain()  # nothing to do, no error


def test_begin_then_commit_round_trip(store: StateStore) -> None:
    p = plan(1, [split(0, 0, 5), split(1, 0, 0), split(0, 3, 9, topic="audit", cluster="west")])
    v0 = store.begin_run(p, expected_version=None)
    assert v0 == 0

    planned = store.load()
    assert planned.table_version == 0
    assert planned.partitions == {}
    assert planned.last_run is not None
    assert planned.last_run.status == "planned"
    assert planned.last_run.plan == p  # the recovery view: exactly the plan written ahead
    assert planned.last_run.committed_at is None

    summary = RunSummary(pipeline_id=p.pipeline_id, run_seq=p.run_seq, status="committed", records=11)
    v1 = store.commit_run(p, summary=summary, expected_version=v0)
    assert v1 == 1
    state = store.load()
    assert state.table_version == 1
    assert {k: v.next_offset for k, v in state.partitions.items()} == {
        tp(0): 5,
        tp(1): 0,  # empty ranges record their position too
        tp(0, "audit", "west"): 9,
    }
    row = state.partitions[tp(0, "audit", "west")]
    assert (row.status, row.topic_id, row.bootstrap_servers, row.stream_ids, row.updated_run_seq) == (
        "active",
        "tid-1",
        "west:9092",
        ("orders",),
        1,
    )
    run = state.last_run
    assert run is not None
    assert (run.status, run.run_seq, run.plan) == ("committed", 1, p)
    assert RunSummary.model_validate_json(run.summary_json or "") == summary
    assert run.committed_at == T0 + timedelta(hours=1)
    assert run.planned_at == p.planned_at
    assert state.next_run_seq == 2
    assert [r.run_seq for r in store.run_history()] == [1]


def test_timestamps_are_utc_and_findings_are_kept(store: StateStore) -> None:
    naive = datetime(2026, 11, 21, 8, 30)  # taken as UTC
    finding = Finding(kind="new_topic", cluster_id="east", topic="orders", message="new topic orders")
    p = Plan(pipeline_id=PID, run_seq=1, splits=(split(0, 0, 1),), planned_at=naive, findings=(finding,))
    store.commit_run(
        p, summary=RunSummary.of_plan(p, "committed"), expected_version=store.begin_run(p, expected_version=None)
    )
    run = store.run_history()[0]
    assert run.planned_at == naive.replace(tzinfo=UTC)
    assert run.committed_at is not None
    assert run.committed_at.utcoffset() == timedelta(0)
    assert run.findings == (finding,)


def test_one_row_per_partition_over_many_runs(store: StateStore, tmp_path: Path) -> None:
    for _ in range(25):
        run_once(store, lambda seq: uniform_plan(seq, partitions=4))
    state = store.load()
    assert {k: v.next_offset for k, v in state.partitions.items()} == {tp(p): 250 for p in range(4)}
    assert {v.updated_run_seq for v in state.partitions.values()} == {25}
    assert len(rows_of_kind(tmp_path / "state", "partition")) == 4
    assert len(rows_of_kind(tmp_path / "state", "head")) == 1
    assert len(DeltaTable(tmp_path / "state").file_uris(file_pruning_predicate="kind = 'partition'")) == 1
    assert [r.run_seq for r in store.run_history(limit=30)] == list(range(25, 0, -1))


def test_partitions_the_plan_does_not_mention_keep_their_rows(store: StateStore) -> None:
    run_once(store, lambda seq: plan(seq, [split(0, 0, 5), split(1, 0, 7)]))
    run_once(store, lambda seq: plan(seq, [split(0, 5, 8)], skipped_clusters=("west",)))
    state = store.load()
    assert (state.partitions[tp(0)].next_offset, state.partitions[tp(0)].updated_run_seq) == (8, 2)
    assert (state.partitions[tp(1)].next_offset, state.partitions[tp(1)].updated_run_seq) == (7, 1)


def test_removals_keep_offsets_and_readded_partitions_resume(tmp_path: Path) -> None:
    now = [T0]
    store = StateStore(tmp_path / "state", PID, clock=lambda: now[0])
    run_once(store, lambda seq: plan(seq, [split(0, 0, 5), split(1, 0, 6), split(2, 0, 7)]))

    now[0] = T0 + timedelta(hours=2)
    # partition 1 is removed; partition 2 is drained to 9 and removed in the same run; tp(7) was never seen.
    run_once(
        store,
        lambda seq: plan(seq, [split(0, 5, 5), split(2, 7, 9, draining=True)], removals=(tp(1), tp(2), tp(7, "gone"))),
    )
    state = store.load()
    assert {k: (v.status, v.next_offset, v.updated_run_seq) for k, v in state.partitions.items()} == {
        tp(0): ("active", 5, 2),
        tp(1): ("removed", 6, 2),
        tp(2): ("removed", 9, 2),
    }
    assert state.partitions[tp(1)].removed_at == T0 + timedelta(hours=2)
    assert [p.key for p in _removed(store)] == [tp(1), tp(2)]

    now[0] = T0 + timedelta(hours=3)
    run_once(store, lambda seq: plan(seq, [split(0, 5, 5)], removals=(tp(1),)))  # removed again: date kept
    assert store.load().partitions[tp(1)].removed_at == T0 + timedelta(hours=2)

    run_once(store, lambda seq: plan(seq, [split(0, 5, 5), split(1, 6, 11)]))  # re-added: resumes at 6
    row = store.load().partitions[tp(1)]
    assert (row.status, row.next_offset, row.removed_at) == ("active", 11, None)


def test_commit_empty_run_creates_the_state_in_one_commit(store: StateStore, tmp_path: Path) -> None:
    p = plan(1, [split(0, 4, 4), split(1, 0, 0)])
    assert store.commit_empty_run(p, summary=RunSummary.of_plan(p, "empty"), expected_version=None) == 0
    state = store.load()
    assert state.table_version == 0
    assert {k: v.next_offset for k, v in state.partitions.items()} == {tp(0): 4, tp(1): 0}
    assert state.last_run is not None
    assert state.last_run.status == "committed"
    assert RunSummary.model_validate_json(state.last_run.summary_json or "").status == "empty"
    assert [r.run_seq for r in store.run_history()] == [1]
    assert len(DeltaTable(tmp_path / "state").history()) == 1

    p2 = plan(2, [split(0, 4, 4)], removals=(tp(1),))
    assert store.commit_empty_run(p2, summary=RunSummary.of_plan(p2, "empty"), expected_version=0) == 1
    assert store.load().partitions[tp(1)].status == "removed"


def test_commit_empty_run_refuses_a_plan_with_records(store: StateStore) -> None:
    with pytest.raises(StateError, match="without reading"):
        store.commit_empty_run(
            plan(1, [split(0, 0, 3)]),
            summary=RunSummary.of_plan(plan(1, [split(0, 0, 3)]), "empty"),
            expected_version=None,
        )
    assert store.load().table_version is None


def test_run_history_is_newest_first_with_the_planned_head_on_top(store: StateStore) -> None:
    for _ in range(5):
        run_once(store, lambda seq: uniform_plan(seq, partitions=2))
    state = store.load()
    store.begin_run(uniform_plan(6, 2), expected_version=state.table_version)
    history = store.run_history(limit=3)
    assert [(r.run_seq, r.status) for r in history] == [(6, "planned"), (5, "committed"), (4, "committed")]
    assert RunSummary.model_validate_json(history[1].summary_json or "").run_seq == 5
    assert store.run_history(limit=0) == []
    assert len(store.run_history(limit=100)) == 6


# ----------------------------------------------------------------------------------- protocol violations


def test_commit_requires_the_plan_written_ahead(store: StateStore) -> None:
    p = plan(1, [split(0, 0, 5)])
    with pytest.raises(StateError, match="no state table"):
        store.commit_run(p, summary=RunSummary.of_plan(p, "committed"), expected_version=0)
    v = store.begin_run(p, expected_version=None)
    other = plan(1, [split(0, 0, 6)])
    with pytest.raises(StateError, match="differs from the plan written ahead"):
        store.commit_run(other, summary=RunSummary.of_plan(other, "committed"), expected_version=v)
    v = store.commit_run(p, summary=RunSummary.of_plan(p, "committed"), expected_version=v)
    with pytest.raises(StateError, match="run 1 committed"):
        store.commit_run(p, summary=RunSummary.of_plan(p, "committed"), expected_version=v)


def test_begin_refuses_a_wrong_run_seq_or_an_unfinished_run(store: StateStore) -> None:
    with pytest.raises(StateError, match="next run"):
        store.begin_run(plan(2, [split(0, 0, 1)]), expected_version=None)
    v = store.begin_run(plan(1, [split(0, 0, 1)]), expected_version=None)
    with pytest.raises(StateError, match="Recover the planned run first"):
        store.begin_run(plan(2, [split(0, 1, 2)]), expected_version=v)
    with pytest.raises(RunInProgressError):  # run 1 is planned by someone else already
        store.begin_run(plan(1, [split(0, 0, 1)]), expected_version=v)
    with pytest.raises(StateError, match="plan of pipeline 'other'"):
        store.begin_run(plan(2, [split(0, 0, 1)]).model_copy(update={"pipeline_id": "other"}), expected_version=v)


def test_a_table_of_another_pipeline_is_refused(store: StateStore, tmp_path: Path) -> None:
    run_once(store, lambda seq: uniform_plan(seq, 1))
    with pytest.raises(StateError, match="belongs to pipeline 'orders', not 'payments'"):
        StateStore(tmp_path / "state", "payments").load()


def test_the_state_records_its_format_and_a_newer_format_is_refused_before_anything_is_written(
    store: StateStore, tmp_path: Path
) -> None:
    run_once(store, lambda n: uniform_plan(n, 2))
    table = DeltaTable(tmp_path / "state")
    assert table.metadata().description == f"dynamic-kafka state of pipeline {PID}, format 1"
    # A state an older release created (no format recorded) is format 1: it reads and takes the next run.
    table.alter.set_table_description(f"dynamic-kafka state of pipeline {PID}")
    assert run_once(store, lambda n: uniform_plan(n, 2)).next_run_seq == 2
    # A newer release's state: refused, naming both formats and the fix, and left as it is.
    DeltaTable(tmp_path / "state").alter.set_table_description(f"dynamic-kafka state of pipeline {PID}, format 2")
    version = DeltaTable(tmp_path / "state").version()
    with pytest.raises(StateError, match=r"format 2.*reads formats up to 1") as failure:
        run_once(store, lambda n: uniform_plan(n, 2))
    assert "upgrade dynamic-kafka" in (failure.value.hint or "")
    assert DeltaTable(tmp_path / "state").version() == version


def test_a_damaged_table_raises_state_error_naming_the_path(store: StateStore, tmp_path: Path) -> None:
    run_once(store, lambda seq: uniform_plan(seq, 2))
    for uri in DeltaTable(tmp_path / "state").file_uris(file_pruning_predicate="kind = 'partition'"):
        os.remove(uri)
    with pytest.raises(StateError, match="is unreadable or corrupt") as info:
        store.load()
    assert str(tmp_path / "state") in str(info.value)
    assert isinstance(info.value.__cause__, OSError | DeltaError)


# ------------------------------------------------------------------------------------------------ the guard


def test_stale_expected_version_fails_and_writes_nothing(store: StateStore, tmp_path: Path) -> None:
    run_once(store, lambda seq: uniform_plan(seq, 2))
    stale = store.load()
    run_once(store, lambda seq: uniform_plan(seq, 2))  # another run planned and committed run 2 meanwhile
    before = store.load()

    with pytest.raises(RunInProgressError) as info:
        store.begin_run(uniform_plan(stale.next_run_seq, 2), expected_version=stale.table_version)
    assert (info.value.pipeline_id, info.value.run_seq, info.value.retriable) == (PID, 2, True)
    with pytest.raises(RunInProgressError):
        store.commit_empty_run(
            plan(2, []), summary=RunSummary.of_plan(plan(2, []), "empty"), expected_version=stale.table_version
        )
    with pytest.raises(RunInProgressError):  # the table exists: "no table yet" is stale too
        store.begin_run(uniform_plan(1, 2), expected_version=None)
    assert store.load() == before
    assert DeltaTable(tmp_path / "state").version() == before.table_version


def test_commit_against_a_moved_table_fails(store: StateStore) -> None:
    p = uniform_plan(1, 2)
    v = store.begin_run(p, expected_version=None)
    other = StateStore(store.path, PID)
    other.commit_run(
        p, summary=RunSummary.of_plan(p, "committed", reason="recovery"), expected_version=v
    )  # a recovering run got there first
    with pytest.raises(RunInProgressError):
        store.commit_run(p, summary=RunSummary.of_plan(p, "committed", reason="first"), expected_version=v)
    run = store.load().last_run
    assert run is not None
    assert RunSummary.model_validate_json(run.summary_json or "").reason == "recovery"


def _race_begin(stores: list[StateStore], p: Plan, expected: int | None) -> list[str | int]:
    barrier = threading.Barrier(len(stores))
    results: list[str | int] = [""] * len(stores)

    def attempt(i: int) -> None:
        barrier.wait()
        try:
            results[i] = stores[i].begin_run(p, expected_version=expected)
        except RunInProgressError:
            results[i] = "conflict"

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


@pytest.mark.parametrize("existing_runs", [0, 1])
def test_concurrent_begin_in_threads_exactly_one_wins(tmp_path: Path, existing_runs: int) -> None:
    path = tmp_path / "state"
    first = StateStore(path, PID)
    for _ in range(existing_runs):
        run_once(first, lambda seq: uniform_plan(seq, 3))
    for round_ in range(8):
        state = first.load()
        stores = [StateStore(path, PID) for _ in range(4)]
        p = uniform_plan(state.next_run_seq, 3)
        results = _race_begin(stores, p, state.table_version)
        winners = [r for r in results if r != "conflict"]
        expected_version = 0 if state.table_version is None else state.table_version + 1
        assert winners == [expected_version], (round_, results)
        assert results.count("conflict") == 3
        after = first.load()
        assert after.table_version == expected_version
        assert after.last_run is not None
        assert (after.last_run.run_seq, after.last_run.status) == (p.run_seq, "planned")
        assert len(rows_of_kind(path, "head")) == 1
        first.commit_run(p, summary=RunSummary.of_plan(p, "committed"), expected_version=expected_version)
    begins = [h for h in DeltaTable(path).history() if h.get("dynamic_kafka.action") == "begin_run"]
    assert len(begins) == 8 + existing_runs  # one per run_seq, never two


def _process_racer(path: str, rounds: int, barrier: Any, results: Any) -> None:
    store = StateStore(path, PID)
    for _ in range(rounds):
        barrier.wait()  # the parent has committed the previous run
        state = store.load()
        p = uniform_plan(state.next_run_seq, 3)
        barrier.wait()  # everyone has read the same version: plan the same run_seq at the same moment
        try:
            results.put((p.run_seq, store.begin_run(p, expected_version=state.table_version)))
        except RunInProgressError:
            results.put((p.run_seq, "conflict"))
        barrier.wait()


def test_concurrent_begin_in_processes_exactly_one_wins(tmp_path: Path) -> None:
    path = tmp_path / "state"
    rounds, workers = 3, 3
    ctx = multiprocessing.get_context("spawn")  # no fork: delta-rs runs a tokio thread pool
    barrier = ctx.Barrier(workers + 1)
    results = ctx.Queue()
    procs = [ctx.Process(target=_process_racer, args=(str(path), rounds, barrier, results)) for _ in range(workers)]
    for proc in procs:
        proc.start()
    store = StateStore(path, PID)
    try:
        for round_ in range(rounds):
            barrier.wait(timeout=60)
            barrier.wait(timeout=60)
            barrier.wait(timeout=60)
            outcomes = sorted((results.get(timeout=30) for _ in range(workers)), key=str)
            seq = round_ + 1
            wins = [o for o in outcomes if o[1] != "conflict"]
            assert wins == [(seq, 0 if seq == 1 else 2 * (seq - 1))], outcomes
            assert [o for o in outcomes if o[1] == "conflict"] == [(seq, "conflict")] * (workers - 1)
            state = store.load()
            assert state.last_run is not None
            assert (state.last_run.run_seq, state.last_run.status) == (seq, "planned")
            assert len(rows_of_kind(path, "head")) == 1
            assert state.table_version is not None
            store.commit_run(
                state.last_run.plan,
                summary=RunSummary.of_plan(state.last_run.plan, "committed"),
                expected_version=state.table_version,
            )
    finally:
        for proc in procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
    assert [proc.exitcode for proc in procs] == [0] * workers


# ------------------------------------------------------------------------------------- crashes and failures

CRASH_PARTITIONS = 20


def _crash_writer(path: str, ready: Any) -> None:
    """Runs forever: recover a planned run if any, else plan and commit the next one. Killed by the test."""
    store = StateStore(
        path,
        PID,
        checkpoint_interval=5,
        maintain_every=4,
        log_retention=timedelta(0),
        deleted_file_retention=timedelta(0),
    )
    ready.set()
    while True:
        state = store.load()
        if state.last_run is not None and state.last_run.status == "planned":
            store.commit_run(
                state.last_run.plan,
                summary=RunSummary.of_plan(state.last_run.plan, "committed"),
                expected_version=state.table_version or 0,
            )
        else:
            run_once(store, lambda seq: uniform_plan(seq, CRASH_PARTITIONS))
        store.maintain()


def _checkpointing_writer(path: str, ready: Any) -> None:
    """Runs forever: commit runs, each writing a checkpoint and deleting the log before it. Killed by the test."""
    store = StateStore(path, PID, checkpoint_interval=1, log_retention=timedelta(0))
    ready.set()
    while True:
        run_once(store, lambda seq: uniform_plan(seq, 3))


def test_reads_are_not_broken_by_another_process_cleaning_the_log(tmp_path: Path) -> None:
    """Regression (fresh-clone CI, 2026-11-24): a load listed the log, the writer then wrote a newer checkpoint and
    deleted the older one (log retention), and the load failed with ``….checkpoint.parquet not found`` although
    the table was intact."""
    path = tmp_path / "state"
    store = StateStore(path, PID)
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    proc = ctx.Process(target=_checkpointing_writer, args=(str(path), ready))
    proc.start()
    try:
        assert ready.wait(timeout=60)
        deadline = time.monotonic() + 60
        while (store.load().table_version or 0) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        first = store.load().table_version or 0
        # Read until the writer has cleaned the log many times meanwhile (a count, not a time: a loaded machine
        # only takes longer).
        end = time.monotonic() + 300
        while (store.load().table_version or 0) <= first + 20:
            assert time.monotonic() < end, "the writer made fewer than 20 commits in 300 s"
            state = store.load()
            assert state.last_run is not None
            assert store.run_history(limit=3)
    finally:
        proc.kill()
        proc.join(timeout=30)


def test_a_log_listed_while_its_expired_entries_go_is_read_again(
    store: StateStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (a loaded run of the unit tests, 2026-11-28): a directory listing is no snapshot, so a load that
    listed the log while another process's cleanup deleted expired entries saw ``2`` but not ``3`` and delta-rs
    refused the table ("Expected contiguous commit files, but found gap"), although it was intact. Here the first
    open sees the log with that entry gone, as such a listing does; the next sees it whole."""
    for _ in range(3):
        run_once(store, lambda seq: uniform_plan(seq, 3))
    entry = tmp_path / "state" / "_delta_log" / "00000000000000000002.json"
    aside = entry.with_name("aside")
    opened: list[int] = []
    real_open = table_module.DeltaTable

    def mid_cleanup(*args: Any, **kwargs: Any) -> DeltaTable:
        opened.append(1)
        if len(opened) > 1:
            return real_open(*args, **kwargs)
        entry.rename(aside)
        try:
            return real_open(*args, **kwargs)
        finally:
            aside.rename(entry)

    monkeypatch.setattr(table_module, "DeltaTable", mid_cleanup)

    state = store.load()

    assert len(opened) >= 2
    assert state.table_version == 5
    assert state.last_run is not None
    assert state.last_run.run_seq == 3


def _assert_consistent(store: StateStore) -> None:
    state = store.load()
    if state.last_run is None:  # killed before the first commit
        assert state.partitions == {}
        return
    committed = state.last_run.run_seq - (state.last_run.status == "planned")
    # All partitions moved together, to the last committed run's stops: never a mix of old and new rows.
    assert len(state.partitions) == (CRASH_PARTITIONS if committed else 0)
    assert {(p.next_offset, p.updated_run_seq) for p in state.partitions.values()} == {(10 * committed, committed)}
    assert [r.run_seq for r in store.run_history(limit=1000) if r.status == "committed"] == list(
        range(committed, 0, -1)
    )


def test_a_killed_writer_leaves_the_old_or_the_new_state(tmp_path: Path) -> None:
    path = tmp_path / "state"
    store = StateStore(path, PID, deleted_file_retention=timedelta(0), log_retention=timedelta(0))
    rng = random.Random(7)
    ctx = multiprocessing.get_context("spawn")
    progress: list[int] = []
    for _ in range(3):
        ready = ctx.Event()
        proc = ctx.Process(target=_crash_writer, args=(str(path), ready))
        proc.start()
        assert ready.wait(timeout=60)
        # On a loaded machine the writer may need seconds for its first commit: kill only once it has moved on.
        before = progress[-1] if progress else -1
        deadline = time.monotonic() + 60
        while (store.load().table_version or -1) < before + 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(rng.uniform(0.0, 0.5))
        os.kill(proc.pid or 0, signal.SIGKILL)  # kill -9, wherever it is: mid-write, mid-commit, mid-vacuum
        proc.join(timeout=30)
        assert proc.exitcode == -signal.SIGKILL
        _assert_consistent(store)
        progress.append(store.load().table_version or -1)
    assert progress == sorted(progress)
    assert progress[-1] > 6  # the writers did commit between kills
    store.maintain(force=True)  # the state stays readable and maintainable after kills
    _assert_consistent(store)


def test_leftovers_of_a_commit_killed_before_publishing_are_invisible(store: StateStore, tmp_path: Path) -> None:
    """What a kill -9 can leave behind before the atomic publish (object_store stages the log entry as
    ``<version>.json#<n>`` and hard-links it into place): new data files, a truncated staged log entry."""
    path = tmp_path / "state"
    run_once(store, lambda seq: uniform_plan(seq, 3))
    before = store.load()
    assert before.table_version == 1
    (path / "kind=partition" / "part-00000-orphan-c000.snappy.parquet").write_bytes(b"PAR1 half a file")
    (path / "kind=head" / "part-00000-orphan-c000.snappy.parquet").write_bytes(b"PAR1")
    (path / "_delta_log" / "00000000000000000002.json#1").write_text('{"commitInfo":{"timestamp":1')
    assert store.load() == before
    run_once(store, lambda seq: uniform_plan(seq, 3))  # and the next run commits version 2 over it
    assert store.load().table_version == 3
    assert store.load().partitions[tp(0)].next_offset == 20


def test_failure_before_the_commit_is_a_state_error_with_nothing_written(
    store: StateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_once(store, lambda seq: uniform_plan(seq, 2))
    before = store.load()

    def broken(*args: Any, **kwargs: Any) -> None:
        raise OSError("No space left on device")

    monkeypatch.setattr(table_module, "write_deltalake", broken)
    with pytest.raises(StateError, match="No space left on device") as info:
        store.begin_run(uniform_plan(2, 2), expected_version=before.table_version)
    assert "Nothing was committed" in str(info.value)
    assert store.load() == before


def test_failure_after_the_commit_is_recognized_as_ours(store: StateStore, monkeypatch: pytest.MonkeyPatch) -> None:
    real = deltalake.write_deltalake

    def fails_after_commit(*args: Any, **kwargs: Any) -> None:
        real(*args, **kwargs)
        raise DeltaError("post-commit hook: checkpoint failed")

    monkeypatch.setattr(table_module, "write_deltalake", fails_after_commit)
    p = uniform_plan(1, 2)
    assert store.begin_run(p, expected_version=None) == 0
    assert store.commit_run(p, summary=RunSummary.of_plan(p, "committed"), expected_version=0) == 1
    assert store.load().partitions[tp(0)].next_offset == 10


def test_maintain_compacts_the_history_and_leaves_a_planned_run_alone(tmp_path: Path) -> None:
    path = tmp_path / "state"
    store = StateStore(path, PID, maintain_every=5)
    for _ in range(12):
        run_once(store, lambda seq: uniform_plan(seq, 3))
        store.maintain()
    assert len(DeltaTable(path).file_uris(file_pruning_predicate="kind = 'run'")) < 5
    assert [r.run_seq for r in store.run_history(limit=100)] == list(range(12, 0, -1))
    assert any(h["operation"] == "OPTIMIZE" for h in DeltaTable(path).history())

    state = store.load()
    version = store.begin_run(uniform_plan(13, 3), expected_version=state.table_version)
    store.maintain(force=True)  # a run is in flight: no maintenance commit may move the table under it
    assert DeltaTable(path).version() == version
    store.commit_run(
        uniform_plan(13, 3), summary=RunSummary.of_plan(uniform_plan(13, 3), "committed"), expected_version=version
    )


# --------------------------------------------------------------------------------------- backfill frontier


class _Waits:
    """Stands in for the store module's ``time``: records the waits of ``record_backfill`` and runs ``action`` on
    the first one (what another process does meanwhile), so the tests need no real sleeping."""

    perf_counter = staticmethod(time.perf_counter)

    def __init__(self, action: Callable[[], object] = lambda: None) -> None:
        self.seconds: list[float] = []
        self._action = action

    def sleep(self, seconds: float) -> None:
        self.seconds.append(seconds)
        if len(self.seconds) == 1:
            self._action()


def test_backfill_frontier_is_a_max_merge_kept_apart_from_the_offsets(store: StateStore, tmp_path: Path) -> None:
    west = tp(0, "audit", "west")
    # A backfill on a fresh pipeline creates the state with the frontier alone: no run, no offsets.
    assert store.record_backfill({tp(0): 40, tp(1): 7}) == RecordedBackfill(version=0, sequence=1)
    fresh = store.load()
    assert (fresh.table_version, fresh.last_run, fresh.partitions) == (0, None, {})
    assert fresh.backfilled == {tp(0): 40, tp(1): 7}
    assert fresh.next_run_seq == 1

    run_once(store, lambda seq: plan(seq, [split(0, 0, 25), split(1, 0, 3)]))  # the first run plans from it
    # lower for tp(0): kept at 40; each backfill that raises a frontier takes the next sequence number
    assert store.record_backfill({tp(0): 30, tp(1): 12, west: 5}) == RecordedBackfill(version=3, sequence=2)
    # Nothing higher: no commit at all, and no number (its MERGEs land nothing beyond the frontier).
    assert store.record_backfill({tp(0): 40, west: 1}) == RecordedBackfill(version=3, sequence=None)
    assert store.record_backfill({}).version == 3

    state = store.load()
    assert state.table_version == 3
    assert state.backfill_sequence == 2
    assert state.backfilled == {tp(0): 40, tp(1): 12, west: 5}
    assert {k: v.next_offset for k, v in state.partitions.items()} == {tp(0): 25, tp(1): 3}  # never moved
    assert state.last_run is not None
    assert (state.last_run.run_seq, state.last_run.status) == (1, "committed")
    assert [r.run_seq for r in store.run_history()] == [1]
    rows = rows_of_kind(tmp_path / "state", "backfill")
    frontiers = [r for r in rows if r["status"] == "recorded"]
    assert sorted((r["cluster_id"], r["topic"], r["partition"], r["next_offset"]) for r in frontiers) == [
        ("east", "orders", 0, 40),
        ("east", "orders", 1, 12),
        ("west", "audit", 0, 5),
    ]
    assert [(r["status"], r["cluster_id"], r["next_offset"]) for r in rows if r not in frontiers] == [
        ("sequence", None, 2)
    ]
    assert {r["committed_at"] for r in rows} == {T0 + timedelta(hours=1)}


def test_runs_and_maintenance_keep_the_backfill_frontier(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state", PID, maintain_every=2)
    run_once(store, lambda seq: uniform_plan(seq, 2))
    store.record_backfill({tp(0): 50, tp(1): 15})
    frontier = {tp(0): 50, tp(1): 15}

    run_once(store, lambda seq: uniform_plan(seq, 2))  # commit_run rewrites partition and head rows only
    assert store.load().backfilled == frontier
    state = store.load()
    store.commit_empty_run(
        plan(3, [split(0, 20, 20)]),
        summary=RunSummary.of_plan(plan(3, [split(0, 20, 20)]), "empty"),
        expected_version=state.table_version,
    )
    assert store.load().backfilled == frontier
    store.maintain(force=True)  # compaction of the history, vacuum, checkpoint
    after = store.load()
    assert after.backfilled == frontier
    assert any(h["operation"] == "OPTIMIZE" for h in DeltaTable(tmp_path / "state").history())
    assert {k: v.next_offset for k, v in after.partitions.items()} == {tp(0): 20, tp(1): 20}
    assert [r.run_seq for r in store.run_history()] == [3, 2, 1]


def test_a_backfill_frontier_commit_is_guarded_like_a_run(store: StateStore) -> None:
    run_once(store, lambda seq: uniform_plan(seq, 2))
    stale = store.load()
    store.record_backfill({tp(0): 99})
    with pytest.raises(RunInProgressError):  # a run planned from the state before the frontier loses
        store.begin_run(uniform_plan(2, 2), expected_version=stale.table_version)
    assert store.load().last_run == stale.last_run


def test_a_backfill_frontier_waits_for_a_planned_run(store: StateStore, monkeypatch: pytest.MonkeyPatch) -> None:
    run_once(store, lambda seq: uniform_plan(seq, 2))
    state = store.load()
    p = uniform_plan(2, 2)
    version = store.begin_run(p, expected_version=state.table_version)
    # The run in flight commits while the backfill waits: the frontier lands after it, not under it.
    waits = _Waits(lambda: store.commit_run(p, summary=RunSummary.of_plan(p, "committed"), expected_version=version))
    monkeypatch.setattr(store_module, "time", waits)

    assert store.record_backfill({tp(0): 30}, retry_delay=0.25).version == version + 2

    assert waits.seconds == [0.25]
    after = store.load()
    assert after.backfilled == {tp(0): 30}
    assert after.last_run is not None
    assert (after.last_run.run_seq, after.last_run.status) == (2, "committed")


def test_a_backfill_frontier_gives_up_on_a_run_that_stays_planned(
    store: StateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_once(store, lambda seq: uniform_plan(seq, 2))
    state = store.load()
    version = store.begin_run(uniform_plan(2, 2), expected_version=state.table_version)  # crashed: never committed
    waits = _Waits()
    monkeypatch.setattr(store_module, "time", waits)

    with pytest.raises(RunInProgressError) as info:
        store.record_backfill({tp(0): 30}, attempts=3, retry_delay=0.5)

    assert (info.value.pipeline_id, info.value.run_seq, info.value.retriable) == (PID, 2, True)
    assert waits.seconds == [0.5, 1.0]
    assert store.load().backfilled == {}
    assert DeltaTable(store.path).version() == version


def test_a_backfill_frontier_that_loses_a_race_is_merged_again(
    store: StateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_once(store, lambda seq: uniform_plan(seq, 2))
    other = StateStore(store.path, PID)
    waits = _Waits()
    monkeypatch.setattr(store_module, "time", waits)
    real = deltalake.write_deltalake
    raced: list[bool] = []

    def another_backfill_first(*args: Any, **kwargs: Any) -> None:
        if not raced:  # another backfill commits between our read and our commit, once
            raced.append(True)
            other.record_backfill({tp(0): 80, tp(1): 4})
        real(*args, **kwargs)

    monkeypatch.setattr(table_module, "write_deltalake", another_backfill_first)

    assert store.record_backfill({tp(0): 60, tp(1): 9}).version == 3

    assert len(waits.seconds) == 1
    assert store.load().backfilled == {tp(0): 80, tp(1): 9}  # both backfills' maximum


def test_a_backfill_frontier_that_always_loses_is_a_state_error(
    store: StateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_once(store, lambda seq: uniform_plan(seq, 2))
    other = StateStore(store.path, PID)
    monkeypatch.setattr(store_module, "time", _Waits())
    real = deltalake.write_deltalake
    competitor = iter(range(100, 200))
    ours = threading.local()

    def someone_always_first(*args: Any, **kwargs: Any) -> None:
        if not getattr(ours, "inside", False):
            ours.inside = True
            try:
                other.record_backfill({tp(1): next(competitor)})
            finally:
                ours.inside = False
        real(*args, **kwargs)

    monkeypatch.setattr(table_module, "write_deltalake", someone_always_first)

    with pytest.raises(StateError, match="won the race 3 times") as info:
        store.record_backfill({tp(0): 60}, attempts=3)

    assert not isinstance(info.value, RunInProgressError)
    assert "retry the backfill" in str(info.value)
    assert store.load().backfilled == {tp(1): 102}  # the competitor's three commits; ours never landed


def test_backfill_overlaps_are_the_split_parts_below_the_frontier() -> None:
    state = StateSnapshot(pipeline_id=PID, backfilled={tp(0): 15, tp(1): 40, tp(2): 5, tp(3): 9})
    splits = [
        split(0, 10, 20),  # frontier inside: [10, 15)
        split(1, 10, 20),  # frontier beyond the stop: the whole split
        split(2, 10, 20),  # frontier below the start: nothing to dedupe
        split(3, 9, 9),  # empty range
        split(4, 0, 20),  # never backfilled
    ]

    overlaps = state.backfill_overlaps(splits)

    assert [(s.partition, s.start_offset, s.stop_offset) for s in overlaps] == [(0, 10, 15), (1, 10, 20)]
    assert overlaps[0].key == tp(0)
    assert StateSnapshot(pipeline_id=PID).backfill_overlaps(splits) == ()


# ------------------------------------------------------------------------------------------- bounded reads


def _bytes_read() -> int:
    with open("/proc/self/io") as io:
        return next(int(line.split()[1]) for line in io if line.startswith("rchar:"))


def _measure_load(store: StateStore) -> tuple[int, float]:
    """Bytes read by the process (every read syscall: log, checkpoint, data) and time of one load()."""
    samples = []
    for _ in range(3):
        before, started = _bytes_read(), time.perf_counter()
        store.load()
        samples.append((_bytes_read() - before, time.perf_counter() - started))
    return min(b for b, _ in samples), min(t for _, t in samples)


@pytest.mark.skipif(not os.path.exists("/proc/self/io"), reason="counts bytes read through Linux /proc")
def test_load_does_not_grow_with_the_number_of_runs(tmp_path: Path) -> None:
    path = tmp_path / "state"
    store = StateStore(
        path,
        PID,
        checkpoint_interval=10,
        maintain_every=20,
        log_retention=timedelta(0),
        deleted_file_retention=timedelta(0),
    )

    def runs(n: int) -> None:
        for _ in range(n):
            run_once(store, lambda seq: uniform_plan(seq, partitions=10))
            store.maintain()

    runs(20)
    store.maintain(force=True)
    early_bytes, early_time = _measure_load(store)
    # Five times the runs (with ten partitions a run, state that grew with them would read about five times the
    # bytes, far past the 10% margin below); 100 runs in all keep this unit test short.
    runs(80)
    store.maintain(force=True)
    late_bytes, late_time = _measure_load(store)

    dt = DeltaTable(path)
    current = dt.to_pyarrow_dataset(file_pruning_predicate="kind IN ('partition', 'head')")
    assert len(current.files) == 2  # data files load() reads: one per kind, whatever the number of runs
    assert current.count_rows() == 11  # rows scanned: partitions + head
    history = dt.to_pyarrow_dataset(file_pruning_predicate="kind = 'run'").to_table()
    assert pc.count_distinct(history.column("run_seq")).as_py() == 100  # the history is all there ...
    assert len(os.listdir(path / "_delta_log")) <= 10 + 4  # ... and the log replayed on open is bounded
    assert late_bytes <= early_bytes * 1.1 + 4096, (early_bytes, late_bytes)
    print(f"\nload() after 20 runs: {early_bytes} B read, {1000 * early_time:.1f} ms")
    print(f"load() after 100 runs: {late_bytes} B read, {1000 * late_time:.1f} ms")


def test_a_backfill_frontier_covers_one_topic_incarnation_and_a_reset_drops_it(store: StateStore) -> None:
    """Hole 3: the frontier is recorded with the topic id the backfill read; a split of another id (the topic was
    recreated) has no overlap with it, a later backfill of the new id replaces it, and the commit of a run that
    resets the recreated topic drops the old incarnation's frontier."""
    run_once(store, lambda seq: plan(seq, [split(0, 0, 5)]))
    store.record_backfill({tp(0): 30}, topic_ids={tp(0): "tid-1"})
    state = store.load()
    assert state.backfill_topic_ids == {tp(0): "tid-1"}
    new = split(0, 0, 4).model_copy(update={"topic_id": "tid-2"})
    assert state.backfill_overlaps([split(0, 5, 40)]) == (split(0, 5, 30),)
    assert state.backfill_overlaps([new]) == ()

    reset = Finding(kind="topic_recreated", cluster_id="east", topic="orders", message="recreated")
    run_once(store, lambda seq: plan(seq, [new], findings=(reset,)))
    assert store.load().backfilled == {}

    store.record_backfill({tp(0): 3}, topic_ids={tp(0): "tid-2"})
    store.record_backfill({tp(0): 2}, topic_ids={tp(0): "tid-3"})  # another incarnation: replaced, not max-merged
    after = store.load()
    assert (after.backfilled, after.backfill_topic_ids) == ({tp(0): 2}, {tp(0): "tid-3"})


def test_abandon_run_leaves_the_offsets_and_records_why(store: StateStore) -> None:
    """Hole 4: a planned run that cannot complete is abandoned: the offsets stay, the history says why, and the
    next run is planned afresh with the next run_seq."""
    run_once(store, lambda seq: plan(seq, [split(0, 0, 5)]))
    state = store.load()
    stuck = plan(2, [split(0, 5, 9)])
    store.begin_run(stuck, expected_version=state.table_version)
    with pytest.raises(StateError, match="not run 3 planned"):
        store.abandon_run(3, reason="wrong run")
    store.abandon_run(2, reason="retention deleted [5, 9) before the run could be finished")
    after = store.load()
    assert after.last_run is not None
    assert (after.last_run.run_seq, after.last_run.status, after.next_run_seq) == (2, "abandoned", 3)
    assert {k: v.next_offset for k, v in after.partitions.items()} == {tp(0): 5}
    history = store.run_history()
    assert [(r.run_seq, r.status) for r in history] == [(2, "abandoned"), (1, "committed")]
    assert "retention deleted [5, 9)" in (history[0].summary_json or "")
    with pytest.raises(StateError, match="not run 2 planned"):
        store.abandon_run(2, reason="twice")
    run_once(store, lambda seq: plan(seq, [split(0, 5, 7)]))
    assert store.load().last_run.run_seq == 3  # type: ignore[union-attr]


def test_abandon_run_raises_the_frontier_over_what_the_run_landed_in_the_same_commit(store: StateStore) -> None:
    """A run that landed its dead letters before it crashed is abandoned with those offsets: the backfill frontier
    is raised over them (never lowered, for the run's topic incarnation) in the abandon's commit, so the next run
    checks exactly that range against the tables; the backfill sequence and floors are kept."""
    run_once(store, lambda seq: plan(seq, [split(0, 0, 5), split(1, 0, 5)]))
    store.record_backfill({tp(1): 12}, topic_ids={tp(1): "tid-1"})
    state = store.load()
    crashed = plan(2, [split(0, 5, 20), split(1, 5, 20)])
    version = store.begin_run(crashed, expected_version=state.table_version)

    store.abandon_run(2, reason="x", expected_version=version, landed={tp(0): 9, tp(1): 8})

    after = store.load()
    assert (after.backfilled, after.backfill_topic_ids) == ({tp(0): 9, tp(1): 12}, {tp(0): "tid-1", tp(1): "tid-1"})
    assert after.backfill_sequence == state.backfill_sequence == 1
    assert {k: v.next_offset for k, v in after.partitions.items()} == {tp(0): 5, tp(1): 5}
    assert after.backfill_overlaps(plan(3, [split(0, 5, 25), split(1, 5, 25)]).splits) == (
        split(0, 5, 9),
        split(1, 5, 12),
    )


def test_abandon_command_is_audited(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``dynamic-kafka abandon`` gives up the planned run with its reason; it refuses an unplanned run_seq."""
    from dynamic_kafka.cli.main import main

    config = tmp_path / "dynamic_kafka.yaml"
    config.write_text(
        "metadata_service: {type: single_cluster, cluster_id: east, bootstrap_servers: 'east:9092'}\n"
        "pipelines:\n"
        f"  - {{id: {PID}, streams: [orders], sink: {{path: '{tmp_path / 'sink'}'}},\n"
        f"      state_path: '{tmp_path / 'state'}'}}\n"
    )
    store = StateStore(tmp_path / "state", PID)
    store.begin_run(plan(1, [split(0, 0, 5)]), expected_version=None)
    args = ["abandon", "--config", str(config), "--pipeline", PID, "--run-seq"]
    assert main([*args, "2", "--reason", "x"]) != 0
    assert "not run 2 planned" in capsys.readouterr().err
    assert main([*args, "1", "--reason", "cluster east was decommissioned"]) == 0
    assert "abandoned" in capsys.readouterr().out
    head = store.load().last_run
    assert head is not None
    assert (head.status, head.summary_json is not None) == ("abandoned", True)
    assert "cluster east was decommissioned" in (head.summary_json or "")


def test_a_truncation_lowers_the_backfill_frontier_to_where_the_run_resumes(store: StateStore) -> None:
    """Offsets above a truncation point are given to new records: the frontier must not make the next runs skip
    them as "already landed by a backfill"."""
    run_once(store, lambda seq: plan(seq, [split(0, 0, 9)]))
    store.record_backfill({tp(0): 9}, topic_ids={tp(0): "tid-1"})
    cut = Finding(
        kind="truncated", cluster_id="east", topic="orders", partition=0, from_offset=4, to_offset=9, message=""
    )
    run_once(store, lambda seq: plan(seq, [split(0, 4, 4)], findings=(cut,)))
    state = store.load()
    assert state.backfilled == {tp(0): 4}
    assert state.backfill_overlaps([split(0, 4, 7)]) == ()


def test_a_reset_records_a_floor_below_which_backfills_never_match(store: StateStore) -> None:
    """Sink rows carry coordinates, not topic ids: after a topic is recreated, its new records at offsets the old
    topic also had must not be matched against the old rows, by a backfill MERGE or a run's backfill check."""
    run_once(store, lambda seq: plan(seq, [split(0, 0, 6)]))
    store.record_backfill({tp(0): 8}, topic_ids={tp(0): "tid-1"})
    new = split(0, 0, 3).model_copy(update={"topic_id": "tid-2"})
    before_reset = store.load()
    assert before_reset.backfill_floor(new) == 8  # recreated, not yet reset: the old offset and frontier
    reset = Finding(kind="topic_recreated", cluster_id="east", topic="orders", message="recreated")
    run_once(store, lambda seq: plan(seq, [new], findings=(reset,)))
    state = store.load()
    assert (state.backfill_floors, state.backfilled) == ({tp(0): 8}, {})
    assert state.backfill_floor(new) == 8
    assert state.backfill_sequence == 1  # the reset rewrote the backfill rows; the sequence stays

    # a backfill of the new topic keeps the floor, and takes the next number
    assert store.record_backfill({tp(0): 12}, topic_ids={tp(0): "tid-2"}).sequence == 2
    state = store.load()
    assert state.backfill_floors == {tp(0): 8}
    later = split(0, 3, 12).model_copy(update={"topic_id": "tid-2"})
    assert [(s.start_offset, s.stop_offset) for s in state.backfill_overlaps([later])] == [(8, 12)]


def test_a_state_written_before_leader_epochs_loads_and_gains_them_at_its_next_commit(tmp_path: Path) -> None:
    """Issue 11: the partition rows gained a nullable ``leader_epoch`` column. A table of the older layout loads
    (no epoch: no divergence check yet); the next commit adds the column (schema merge) and records the epoch."""
    old_schema = pa.schema([f for f in state_rows.SCHEMA if f.name != "leader_epoch"])
    first = plan(1, [split(0, 0, 4)])
    old_json = json.loads(first.model_dump_json())
    for s in old_json["splits"]:
        del s["leader_epoch"]  # plans written before the field existed
    head = state_rows.run_row("head", first, "committed", committed_at=T0)
    head["plan_json"] = json.dumps(old_json)
    partition = state_rows.partition_row(PID, state_rows.apply_plan(first, {}, T0)[0])
    old_rows = [{k: v for k, v in r.items() if k in old_schema.names} for r in (head, partition)]
    path = tmp_path / "state"
    deltalake.write_deltalake(
        str(path), pa.Table.from_pylist(old_rows, schema=old_schema), partition_by=["kind"], name=PID
    )
    assert "leader_epoch" not in DeltaTable(path).schema().to_arrow().names

    store = StateStore(path, PID)
    state = store.load()
    assert state.partitions[tp(0)].next_offset == 4
    assert state.partitions[tp(0)].leader_epoch is None
    assert state.last_run is not None
    assert state.last_run.plan.splits[0].leader_epoch is None

    run_once(store, lambda seq: plan(seq, [split(0, 4, 9, leader_epoch=3)]))
    assert "leader_epoch" in DeltaTable(path).schema().to_arrow().names
    reloaded = store.load()
    assert (reloaded.partitions[tp(0)].next_offset, reloaded.partitions[tp(0)].leader_epoch) == (9, 3)


# ------------------------------------------------ faster reads at scale (issue 29): same rows, never stale ones


def test_a_table_of_partition_rows_reads_back_the_partitions_written_in_either_layout() -> None:
    west = PartitionState(
        cluster_id="west",
        topic="b",
        partition=1,
        next_offset=7,
        topic_id=None,
        leader_epoch=4,
        stream_ids=("s1", "s2"),
        status="removed",
        removed_at=T0,
        updated_run_seq=3,
    )
    east = PartitionState(cluster_id="east", topic="a", partition=0, next_offset=0)
    rows = [state_rows.partition_row(PID, west), state_rows.partition_row(PID, east)]
    rows[1].update(bootstrap_servers=None, stream_ids=None, updated_run_seq=None)  # nulls an older writer left
    read = state_rows.partitions_from_table(state_rows.to_table(rows))
    # The nulls read as the defaults; the partitions come sorted.
    assert list(read.items()) == [(east.key, east), (west.key, west)]
    older = pa.schema([f for f in state_rows.SCHEMA if f.name != "leader_epoch"])
    without_epochs = pa.Table.from_pylist([{k: r[k] for k in older.names} for r in rows], schema=older)
    assert [p.leader_epoch for p in state_rows.partitions_from_table(without_epochs).values()] == [None, None]


def test_another_writers_commit_is_read_though_the_partition_files_were_read_before(tmp_path: Path) -> None:
    path = tmp_path / "state"
    mine, other = StateStore(path, PID), StateStore(path, PID)
    run_once(mine, lambda seq: uniform_plan(seq, 3))
    assert {p.next_offset for p in mine.load().partitions.values()} == {10}
    run_once(other, lambda seq: uniform_plan(seq, 3))
    assert {p.next_offset for p in mine.load().partitions.values()} == {20}
    run_once(mine, lambda seq: uniform_plan(seq, 3))  # commits over the rows it read again, not the ones it read first
    assert {p.next_offset for p in other.load().partitions.values()} == {30}


def test_a_changed_partition_row_in_a_loaded_state_does_not_reach_the_next_read(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state", PID)
    run_once(store, lambda seq: uniform_plan(seq, 3))
    loaded = store.load().partitions
    loaded.clear()  # a caller's dict is its own
    assert len(store.load().partitions) == 3


def test_a_plan_read_back_is_the_plan_written_and_another_text_is_parsed() -> None:
    first, second = uniform_plan(1, 3), uniform_plan(1, 3, step=11)
    head = state_rows.run_row("head", first, "planned")
    other = state_rows.run_row("head", second, "planned")
    assert state_rows.run_from_row(head).plan == first
    assert state_rows.run_from_row(other).plan == second
    assert state_rows.run_from_row({**head, "plan_json": first.model_dump_json(indent=1)}).plan == first
    written = uniform_plan(1, 3, step=12)
    state_rows.run_row("head", written, "planned")
    assert state_rows.run_from_row(head).plan == first  # the plan of each text, whatever was written since


def test_building_many_leaves_the_cycle_collector_as_it_found_it() -> None:
    assert gc.isenabled()
    with building_many():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), building_many():
        raise RuntimeError("a failed read")
    assert gc.isenabled()
    gc.disable()
    try:
        with building_many():
            pass
        assert not gc.isenabled()  # an application that turned it off keeps it off
    finally:
        gc.enable()


def test_a_backfill_frontier_keeps_the_stream_table_it_was_merged_into_through_every_rewrite(store: StateStore) -> None:
    """Hole 35.16: with a table per stream, a backfill records beside each frontier the stream whose table it
    merged the partition into, so the first run of a topic no run has landed pins it to that table; every later
    rewrite of the backfill rows keeps it (runs, a lease renewal, an abandon, an operation, a realign)."""
    owner = "backfill@host"
    recorded = store.record_backfill(
        {tp(0): 3, tp(0, "other"): 2},
        topic_ids={tp(0): "tid-1"},
        streams={tp(0): "s1", tp(0, "other"): "s2"},
        owner=owner,
        lease_expires_at=T0 + timedelta(hours=2),
    )
    assert recorded.version is not None
    store.renew_backfill_lease(owner=owner, lease_expires_at=T0 + timedelta(hours=3), expected_version=recorded.version)
    store.release_backfill_lease(owner=owner)
    run_once(store, lambda seq: plan(seq, [split(0, 0, 1, topic="late")]))
    state = store.load()
    crashed = plan(2, [split(0, 1, 5, topic="late")])
    store.abandon_run(
        2, reason="x", expected_version=store.begin_run(crashed, expected_version=state.table_version), landed={}
    )
    store.record_backfill({tp(0): 5}, topic_ids={tp(0): "tid-1"})  # a frontier raised without a stream keeps it
    state = store.load()
    summary = RunSummary(pipeline_id=PID, run_seq=3, status="reset", reason="r", requested_by="me")
    store.record_operation(summary, expected_version=state.table_version or 0, frontier={tp(0): 6})
    state = store.load()
    realigned = RunSummary(pipeline_id=PID, run_seq=9, status="realigned", reason="r", requested_by="me")
    store.realign(
        sink_txn=9,
        frontier={tp(1): 4},
        summary=realigned,
        expected_version=state.table_version,
        streams={tp(1): "s1"},
    )

    after = store.load()
    assert after.backfilled == {tp(0): 6, tp(0, "other"): 2, tp(1): 4}
    assert after.backfill_streams == {tp(0): "s1", tp(0, "other"): "s2", tp(1): "s1"}
