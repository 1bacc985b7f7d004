"""Abandoned runs: their dead letters land once, and no late writer of them lands anything afterwards.

A run is abandoned by an operator (``abandon``) or by policy (its range was deleted by retention under
``on_data_loss: skip``). It may have landed its dead letters before it crashed, and a writer of it may still be
alive: a Spark Connect server finishing a killed client's append, or an owner whose lease expired. The next run
re-reads the abandoned run's offsets; every record must still land once, in the sink or in the dead-letter table.

The crashes are made in this process, at the run's own crash points (:mod:`dynamic_kafka.faults`), by raising
there instead of killing the process; what is durable is the same as after ``kill -9`` (the killed runs of
``test_crash_safety.py`` cover the kill itself), and the crashed run's lease is then made to have expired, as a
dead owner's would. The late writers are the real write paths: delta-spark's idempotent append through the Spark
session and the staged append's delta-rs commit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from deltalake import DeltaTable

from devtools.testing.kafka import Record, create_topic, produce, unique_name
from devtools.testing.pipeline import PipelineHarness
from dynamic_kafka.decoding.prepared import value_column_decoding
from dynamic_kafka.errors import CommitLostError
from dynamic_kafka.sink import committed_txn_version
from dynamic_kafka.sink.commits import new_commit_id
from dynamic_kafka.sink.staged_append import staged_append
from dynamic_kafka.sink.tables import append_idempotent, sink_rows
from dynamic_kafka.spark.reader import read_splits
from tests.support.exactly_once import DeadLetterStream, assert_nothing_left, expire_lease, table_coordinates

if TYPE_CHECKING:
    from pathlib import Path

    from devtools.local_kafka import ClusterEndpoint
    from dynamic_kafka.model.plan import Plan

pytestmark = pytest.mark.integration


class _Killed(BaseException):
    """The run "dies" here: nothing after the crash point runs, nothing is cleaned up in the state or the sink."""


@pytest.mark.parametrize("abandoned_by", ["operator", "retention"])
def test_the_dead_letters_of_an_abandoned_run_are_not_landed_again(
    abandoned_by: str,
    kafka_clusters: dict[str, ClusterEndpoint],
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Run 2 commits its dead letters and crashes before the sink append. It is abandoned by the operator (having
    switched to ``on_decode_error: fail``), or by policy because retention deleted the first offset of its range
    (``on_data_loss: skip``). The next run re-reads run 2's offsets: its good records land once in the sink, its
    dead letters stay once in the dead-letter table (and, under ``fail``, do not fail the run)."""
    stream = DeadLetterStream(kafka_clusters["east"].bootstrap_servers, tmp_path, spark, 1)
    harness, dead_letter_path = stream.harness, stream.dead_letter_path
    good, bad = stream.send("first", 3, 2)
    assert harness.face().run().dead_letters == 2
    crashed_good, crashed_bad = stream.send("crashed", 4, 3)
    _crash_at(harness, monkeypatch, "dynamic_kafka.sink.incremental", "after_dead_letter")
    assert committed_txn_version(dead_letter_path, "p") == 2
    assert committed_txn_version(harness.sink_path, "p") == 1
    assert table_coordinates(dead_letter_path) == sorted(bad | crashed_bad)

    if abandoned_by == "operator":
        # The recovery refuses to finish run 2 under another policy: the operator gives it up instead. Its dead
        # letters stay where they are; none of them may fail the next run or land in the sink too.
        harness.configure(on_decode_error="fail")
        harness.face().abandon(2, "on_decode_error was changed on purpose")
        summary = harness.face().run()
        assert summary.recovered_run_seq is None
    else:
        first_of_run_2 = min(crashed_good)
        admin = AdminClient({"bootstrap.servers": stream.servers})
        (deleted,) = admin.delete_records([TopicPartition(stream.topic, 0, first_of_run_2[1] + 1)]).values()
        deleted.result(timeout=30)
        harness.configure(on_data_loss="skip")
        summary = harness.face().run()  # recovers run 2: its range is gone in part, so it is abandoned
        crashed_good -= {first_of_run_2}

    assert (summary.run_seq, summary.status) == (3, "committed")
    assert (summary.records, summary.dead_letters) == (len(crashed_good), 0)
    assert table_coordinates(harness.sink_path) == sorted(good | crashed_good)
    assert table_coordinates(dead_letter_path) == sorted(bad | crashed_bad)
    history = {r.run_seq: r.status for r in harness.runner().store.run_history()}
    assert history == {1: "committed", 2: "abandoned", 3: "committed"}
    assert_nothing_left(harness)
    assert table_coordinates(dead_letter_path) == sorted(bad | crashed_bad)


@pytest.mark.parametrize("first_run", [False, True], ids=["later-run", "first-run"])
def test_no_late_writer_of_an_abandoned_run_lands_anything(
    first_run: bool,
    kafka_clusters: dict[str, ClusterEndpoint],
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After the crashed run is abandoned, its writers come late, through the real write paths: a delta-spark
    append of exactly its rows (a Spark Connect server finishing the killed client's write), a staged append that
    read the sink after the abandon, and one that read it before (an owner whose lease expired). None lands a
    record; the next run lands every record once, under the next run_seq. For a first run the sink did not exist:
    the abandon's fence creates it, and the next run's append adds the columns it lacks."""
    harness, topic, servers = _bytes_pipeline(kafka_clusters, spark, tmp_path)
    rows = []
    if not first_run:
        rows += _rows(topic, produce(servers, topic, [Record(value=f"a{i}".encode()) for i in range(6)]))
        assert harness.face().run().run_seq == 1
    abandoned = 1 if first_run else 2
    rows += _rows(topic, produce(servers, topic, [Record(value=f"b{i}".encode()) for i in range(8)]))
    _crash_at(harness, monkeypatch, "dynamic_kafka.protocol.run", "after_plan")
    plan = _planned(harness)
    stale = None if first_run else DeltaTable(str(harness.sink_path))  # a staged writer's read of the sink

    harness.face().abandon(abandoned, "its cluster is gone for good")

    landed_before = table_coordinates(harness.sink_path)  # a fenced first run's sink has no value column yet
    late = _late_rows(harness, spark, plan)
    sink = harness.face().config.sink_table
    append_idempotent(late, sink, "p", abandoned, commit_id=new_commit_id())  # delta-spark's idempotent write
    append_idempotent(
        late, sink, "p", abandoned, commit_id=new_commit_id(), blind=True
    )  # staged when the table's schema allows it
    if stale is not None:
        with pytest.raises(CommitLostError):
            staged_append(late, sink, stale, "p", abandoned, new_commit_id())
    assert table_coordinates(harness.sink_path) == landed_before
    assert committed_txn_version(harness.sink_path, "p") == abandoned  # the fence: the run's txn, no rows

    summary = harness.face().run()

    assert (summary.run_seq, summary.status, summary.records) == (abandoned + 1, "committed", 8)
    assert harness.sink_rows() == sorted(rows)
    append_idempotent(late, sink, "p", abandoned, commit_id=new_commit_id())  # still nothing, after the next run too
    assert harness.sink_rows() == sorted(rows)
    assert_nothing_left(harness)


def test_an_abandon_interrupted_after_its_fence_is_finished_by_the_next_run(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The abandon dies between fencing the run in the sink and recording the abandon in the state: the run is
    still planned, its transaction in the sink is a fence. The next run reads the fence as the abandon (never as
    landed data, whose offsets it would commit), finishes it, and lands the run's records under the next run_seq."""
    harness, topic, servers = _bytes_pipeline(kafka_clusters, spark, tmp_path)
    rows = _rows(topic, produce(servers, topic, [Record(value=f"a{i}".encode()) for i in range(4)]))
    assert harness.face().run().run_seq == 1
    rows += _rows(topic, produce(servers, topic, [Record(value=f"b{i}".encode()) for i in range(5)]))
    _crash_at(harness, monkeypatch, "dynamic_kafka.protocol.run", "after_plan")

    _crash_at(harness, monkeypatch, "dynamic_kafka.protocol.abandon", "after_fence", abandon=2)

    assert committed_txn_version(harness.sink_path, "p") == 2
    summary = harness.face().run()

    assert summary.recovered_run_seq is None
    assert (summary.run_seq, summary.status, summary.records) == (3, "committed", 5)
    assert harness.sink_rows() == sorted(rows)
    history = [(r.run_seq, r.status) for r in harness.runner().store.run_history()]
    assert history == [(3, "committed"), (2, "abandoned"), (1, "committed")]
    assert_nothing_left(harness)


def _bytes_pipeline(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, folder: Path
) -> tuple[PipelineHarness, str, str]:
    servers = kafka_clusters["east"].bootstrap_servers
    topic = unique_name("abandon-fence")
    create_topic(servers, topic, 2)
    harness = PipelineHarness(folder, clusters={"east": servers}, spark=lambda: spark)
    harness.set_streams({"orders": {"east": [topic]}})
    return harness, topic, servers


def _crash_at(
    harness: PipelineHarness, monkeypatch: pytest.MonkeyPatch, module: str, point: str, *, abandon: int | None = None
) -> None:
    """Runs the pipeline (or, with ``abandon``, abandons that run) until ``point`` of ``module``, where it "dies";
    then makes the dead process's lease expire."""

    def crash_point(name: str) -> None:
        if name == point:
            raise _Killed(point)

    with monkeypatch.context() as patched:
        patched.setattr(f"{module}.crash_point", crash_point)
        face = harness.face()
        reason = "its cluster is gone for good"
        act = harness.runner().run if abandon is None else lambda: face.abandon(abandon, reason)
        with pytest.raises(_Killed):
            act()
    expire_lease(harness)


def _planned(harness: PipelineHarness) -> Plan:
    head = harness.runner().store.load().last_run
    assert head is not None
    return head.plan


def _late_rows(harness: PipelineHarness, spark: Any, plan: Plan) -> Any:
    """Exactly the sink rows the abandoned run would have appended, read again from Kafka."""
    runner = harness.runner()
    frame = read_splits(
        spark, plan.read_splits, runner.context.connections(plan), isolation_level="read_committed", min_partitions=1
    )
    return sink_rows(value_column_decoding(runner.pipeline).decode(frame), plan.run_seq)


def _rows(topic: str, delivered: list[Record]) -> list[tuple[str, str, int, int, bytes | None]]:
    return [("east", topic, r.partition or 0, r.offset or 0, r.value) for r in delivered]


def test_abandoning_a_run_killed_after_staging_removes_its_staged_files(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A staged write killed after its files were written (not committed) leaves them in the sink's folder, where
    no version references them; VACUUM would not reach the hidden ones. Abandoning the run fences it, so none of its
    files can be committed any more, and removes them."""
    harness, topic, servers = _bytes_pipeline(kafka_clusters, spark, tmp_path)
    rows = _rows(topic, produce(servers, topic, [Record(value=f"a{i}".encode()) for i in range(4)]))
    assert harness.face().run().run_seq == 1
    rows += _rows(topic, produce(servers, topic, [Record(value=f"b{i}".encode()) for i in range(5)]))
    _crash_at(harness, monkeypatch, "dynamic_kafka.sink.staged_append", "after_staging")
    staged = harness.sink_path / "dk-run-2-p"
    assert list(staged.glob("*/part-*.parquet")), "the killed write staged no file"

    harness.face().abandon(2, "its cluster is gone for good")

    assert not staged.exists()
    assert committed_txn_version(harness.sink_path, "p") == 2  # the fence
    summary = harness.face().run()
    assert (summary.run_seq, summary.status, summary.records) == (3, "committed", 5)
    assert harness.sink_rows() == sorted(rows)
