"""Backfills guarded like runs, on real clusters, Spark and Delta: never beside a run (the run lock on one machine,
the state's backfill lease across hosts), bounded by ``max_run_seconds``, refused before anything is recorded when
the schema is wrong; and runs stop before the write once they lost their lease.

The interleavings are forced at the product's own crash points (``faults.crash_point``, replaced by a hook that
acts or waits there); everything else is the real thing.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest
from deltalake import DeltaTable

from devtools.testing.kafka import Record, create_topic, delete_topics, produce, recreate_topic, unique_name
from devtools.testing.pipeline import PipelineHarness
from dynamic_kafka._toolchain.filelock import try_exclusive_lock
from dynamic_kafka.errors import (
    LeaseLostError,
    RunInProgressError,
    RunTimeoutError,
    SchemaMismatchError,
    TopicRecreatedError,
)
from dynamic_kafka.operations import backfill as backfill_module
from dynamic_kafka.protocol import run as runner_module
from dynamic_kafka.protocol.guard import RUN_LOCK_DIR_ENV, run_lock_path
from dynamic_kafka.spark.deadline import RunDeadline
from dynamic_kafka.state.lease import RunOwner

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from devtools.local_kafka import ClusterEndpoint
    from dynamic_kafka.state import StateStore

pytestmark = pytest.mark.integration


class Orders:
    """One single-partition topic on east and the pipeline ``p`` reading it; records are dated within the window
    [an hour ago, now + 5 min)."""

    def __init__(self, east: ClusterEndpoint, folder: Path, spark: Any, **pipeline: Any) -> None:
        self.servers = east.bootstrap_servers
        self.topic = unique_name("guarded")
        create_topic(self.servers, self.topic, 1)
        self.harness = PipelineHarness(folder, clusters={"east": self.servers}, spark=lambda: spark, **pipeline)
        self.harness.set_streams({"orders": {"east": [self.topic]}})
        self.start = datetime.now(UTC) - timedelta(hours=1)

    def produce(self, *values: bytes) -> list[Record]:
        return produce(self.servers, self.topic, [Record(value=v) for v in values])

    def backfill(self) -> Any:
        return self.harness.face().backfill(self.start, datetime.now(UTC) + timedelta(minutes=5))

    def state_version(self) -> int | None:
        return self.harness.runner().store.load().table_version

    def dead_letters(self) -> list[int]:
        path = self.harness.face().config.sink.resolved_dead_letter_path
        return sorted(DeltaTable(str(path)).to_pyarrow_table()["offset"].to_pylist())


@pytest.fixture
def at_crash_point(monkeypatch: pytest.MonkeyPatch) -> Callable[[str, Callable[[], None]], None]:
    """Runs an action where the product reaches a named crash point (in the runner and the backfill)."""
    actions: dict[str, Callable[[], None]] = {}

    def point(name: str) -> None:
        if name in actions:
            actions[name]()

    monkeypatch.setattr(runner_module, "crash_point", point)
    monkeypatch.setattr(backfill_module, "crash_point", point)
    return actions.__setitem__


@pytest.fixture
def another_host(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[[], None]:
    """Call to make this process's next runs take their lock in a folder of their own, as on another host."""
    return lambda: monkeypatch.setenv(RUN_LOCK_DIR_ENV, str(tmp_path / "other-host-locks"))


def test_a_backfill_started_while_a_run_holds_the_pipeline_is_refused_and_writes_nothing(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> None:
    orders = Orders(kafka_clusters["east"], tmp_path, spark)
    orders.produce(b"a", b"b")
    pipeline = orders.harness.face().config
    before = orders.state_version()

    with try_exclusive_lock(run_lock_path(pipeline.resolved_state_path, pipeline.id)) as taken:  # as a run holds it
        assert taken
        with pytest.raises(RunInProgressError) as caught:
            orders.backfill()

    assert "another run is in progress for pipeline 'p' (it planned run_seq 1 first)" in str(caught.value)
    assert orders.state_version() == before  # no frontier, no lease
    assert orders.harness.sink_rows() == []


def test_a_run_started_while_a_backfill_merges_is_refused_on_this_host_and_on_another(
    kafka_clusters: dict[str, ClusterEndpoint],
    spark: Any,
    tmp_path: Path,
    at_crash_point: Callable[[str, Callable[[], None]], None],
    another_host: Callable[[], None],
) -> None:
    orders = Orders(kafka_clusters["east"], tmp_path, spark)
    orders.produce(b"a", b"b")
    refusals: list[BaseException] = []

    def runs_meanwhile() -> None:
        for host in ("this", "another"):
            if host == "another":
                another_host()  # the run lock no longer tells them apart: only the backfill lease can
            with pytest.raises(RunInProgressError) as caught:
                orders.harness.runner().run()
            refusals.append(caught.value)

    at_crash_point("after_frontier", runs_meanwhile)  # the backfill recorded its frontier, about to read and merge

    summary = orders.backfill()

    assert (summary.status, summary.records) == ("committed", 2)
    mine = RunOwner.current().describe()
    assert [f"a backfill is in progress for pipeline 'p'; it is held by {mine}" in str(e) for e in refusals] == [
        True,
        True,
    ]
    state = orders.harness.runner().store.load()
    assert (state.last_run, state.backfill_owner) == (None, None)  # no run planned; the lease was given up
    assert [v for *_, v in orders.harness.sink_rows()] == [b"a", b"b"]
    run = orders.harness.runner().run()  # now runs; dedupes what the backfill landed
    assert (run.run_seq, run.records, run.deduplicated) == (1, 0, 2)
    assert [v for *_, v in orders.harness.sink_rows()] == [b"a", b"b"]


def test_a_backfill_past_max_run_seconds_is_cancelled_and_gives_its_lease_up(
    kafka_clusters: dict[str, ClusterEndpoint],
    spark: Any,
    tmp_path: Path,
    at_crash_point: Callable[[str, Callable[[], None]], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    orders = Orders(kafka_clusters["east"], tmp_path, spark, max_run_seconds=2)
    orders.produce(b"a", b"b")
    # The deadline cancels once, while the backfill waits before its read (no job of its own to cancel yet), and
    # never again: whether a later cancellation happens to hit one of its jobs must not decide the outcome.
    monkeypatch.setattr(RunDeadline, "_RECANCEL_SECONDS", 3600.0)
    passed = threading.Event()
    at_crash_point("after_frontier", lambda: passed.wait(3))  # slow: the deadline passes before the read

    with pytest.raises(RunTimeoutError) as caught:
        orders.backfill()

    assert caught.value.retriable
    assert "the backfill of pipeline 'p' exceeded max_run_seconds (2s) and was cancelled" in str(caught.value)
    assert orders.harness.sink_rows() == []  # its Spark jobs were cancelled: nothing merged
    assert orders.harness.runner().store.load().backfill_owner is None
    assert spark.range(3).count() == 3  # the shared session is still usable


def test_a_run_whose_deadline_passed_before_its_spark_job_began_is_cancelled_and_commits_nothing(
    kafka_clusters: dict[str, ClusterEndpoint],
    spark: Any,
    tmp_path: Path,
    at_crash_point: Callable[[str, Callable[[], None]], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    orders = Orders(kafka_clusters["east"], tmp_path, spark, max_run_seconds=2)
    orders.produce(b"a", b"b")
    monkeypatch.setattr(RunDeadline, "_RECANCEL_SECONDS", 3600.0)  # one cancellation, before the job is tagged
    passed = threading.Event()
    at_crash_point("after_plan", lambda: passed.wait(3))

    with pytest.raises(RunTimeoutError) as caught:
        orders.harness.runner().run()

    assert caught.value.retriable
    assert orders.harness.sink_rows() == []
    last = orders.harness.runner().store.load().last_run
    assert last is not None
    assert (last.run_seq, last.status) == (1, "planned")  # the next run recovers it


def test_a_backfill_with_a_value_schema_that_does_not_parse_is_refused_before_anything_is_recorded(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> None:
    orders = Orders(kafka_clusters["east"], tmp_path, spark, value={"format": "json", "schema": "id INT, name STRIN G"})
    orders.produce(b'{"id": 1, "name": "a"}')

    with pytest.raises(SchemaMismatchError) as caught:
        orders.backfill()

    assert not caught.value.retriable
    assert "value schema" in str(caught.value)
    assert orders.state_version() is None  # no frontier recorded
    assert orders.harness.sink_rows() == []


def test_a_backfill_into_a_sink_that_would_not_take_its_rows_is_refused_before_anything_is_recorded(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> None:
    orders = Orders(kafka_clusters["east"], tmp_path, spark, value={"format": "json", "schema": "id INT, name STRING"})
    orders.produce(b'{"id": 1, "name": "a"}')
    assert orders.harness.face().run().records == 1
    orders.harness.configure(value={"format": "json", "schema": "id STRING, name STRING"})
    before = orders.harness.runner().store.load()

    with pytest.raises(SchemaMismatchError) as caught:
        orders.backfill()

    assert caught.value.columns == ("value.id",)
    after = orders.harness.runner().store.load()
    assert (after.table_version, after.backfilled) == (before.table_version, {})


def test_a_backfill_run_again_over_the_same_window_lands_no_dead_letter_twice(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> None:
    orders = Orders(
        kafka_clusters["east"],
        tmp_path,
        spark,
        value={"format": "json", "schema": "id INT"},
        on_decode_error="dead_letter",
    )
    bad = orders.produce(b'{"id": 1}', b"not json", b'{"id": 2}', b"{broken")

    first = orders.backfill()
    again = orders.backfill()

    assert (first.dead_letters, again.dead_letters) == (2, 0)
    assert orders.dead_letters() == [bad[1].offset, bad[3].offset]
    assert len(orders.harness.sink_rows()) == 2


def test_a_backfill_whose_topic_is_recreated_before_its_merge_merges_nothing_and_fails_retriably(
    kafka_clusters: dict[str, ClusterEndpoint],
    spark: Any,
    tmp_path: Path,
    at_crash_point: Callable[[str, Callable[[], None]], None],
) -> None:
    """A run checks its topics' ids before its commit; the backfill, sharing the run's steps, now does too: the
    recreated topic's records at the planned offsets are never merged under the old incarnation's coordinates."""
    orders = Orders(kafka_clusters["east"], tmp_path, spark)
    orders.produce(b"a", b"b", b"c")  # offsets 0-2: the backfill plans [0, 3) of this incarnation

    def recreate() -> None:
        delete_topics(orders.servers, [orders.topic])
        recreate_topic(orders.servers, orders.topic, 1)
        orders.produce(b"x1", b"x2", b"x3", b"x4")  # offsets 0-3 of the new incarnation

    at_crash_point("after_frontier", recreate)

    with pytest.raises(TopicRecreatedError) as caught:
        orders.backfill()

    assert (caught.value.cluster_id, caught.value.topic, caught.value.retriable) == ("east", orders.topic, True)
    assert "while a backfill of pipeline 'p' read it" in str(caught.value)
    assert orders.harness.sink_rows() == []  # nothing of the new incarnation merged at the old one's offsets
    assert orders.harness.runner().store.load().backfill_owner is None  # the lease was given up


def two_records(kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path) -> tuple[Orders, StateStore]:
    """The pipeline over two fresh records, and its state store."""
    orders = Orders(kafka_clusters["east"], tmp_path, spark)
    orders.produce(b"a", b"b")
    return orders, orders.harness.runner().store


def test_a_run_that_lost_its_lease_before_the_write_writes_nothing_and_fails_retriably(
    kafka_clusters: dict[str, ClusterEndpoint],
    spark: Any,
    tmp_path: Path,
    at_crash_point: Callable[[str, Callable[[], None]], None],
) -> None:
    orders, store = two_records(kafka_clusters, spark, tmp_path)
    thief = RunOwner.current()

    def taken_over() -> None:  # another process (whose host saw the lease expire) takes the planned run over
        state = store.load()
        assert state.last_run is not None
        assert state.table_version is not None
        store.lease(
            state.last_run.plan,
            owner=thief.text(),
            lease_expires_at=datetime.now(UTC) + timedelta(minutes=5),
            expected_version=state.table_version,
        )

    at_crash_point("after_plan", taken_over)

    with pytest.raises(LeaseLostError) as caught:
        orders.harness.runner().run()

    assert caught.value.retriable
    assert "run 1 of pipeline 'p' lost its lease" in str(caught.value)
    assert orders.harness.sink_rows() == []  # stopped before the write
    head = store.load().last_run
    assert head is not None
    assert (head.status, head.owner) == ("planned", thief.text())


def test_a_backfill_whose_lease_was_taken_before_its_merge_merges_nothing(
    kafka_clusters: dict[str, ClusterEndpoint],
    spark: Any,
    tmp_path: Path,
    at_crash_point: Callable[[str, Callable[[], None]], None],
) -> None:
    # The lease's guard at its call site (`_before_merge`): another holder took the writer lease between the
    # backfill's frontier and its MERGE (this process paused past its lease, say).
    orders, store = two_records(kafka_clusters, spark, tmp_path)
    thief = RunOwner.current("backfill")

    def taken_over() -> None:
        held = store.load().backfill_owner
        assert held is not None
        store.release_backfill_lease(owner=held)
        store.record_backfill({}, owner=thief.text(), lease_expires_at=datetime.now(UTC) + timedelta(minutes=5))

    at_crash_point("after_frontier", taken_over)

    with pytest.raises(LeaseLostError) as caught:
        orders.backfill()

    assert caught.value.retriable
    assert orders.harness.sink_rows() == []  # stopped before the MERGE
    assert store.load().backfill_owner == thief.text()
