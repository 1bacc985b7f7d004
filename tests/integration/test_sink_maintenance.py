"""Sink maintenance (``dynamic-kafka maintain``) on real clusters, Spark and Delta.

- Several runs leave a small file per run; maintenance compacts them into one, vacuums the replaced files and
  removes what VACUUM skips of killed writes (a staged write's ``_temporary`` task folder, checksum files of gone
  files, empty attempt folders), while every row stays as it was and the next run appends as before.
- It never runs beside a write: the pipeline's run lock held (a run or backfill on this machine), a planned run
  (in flight or crashed) and another process's writer lease each make it refuse, with nothing changed.
- It is bounded by ``max_run_seconds`` like a run: past it, it stops before its next step and gives its lease up.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import write_deltalake

from devtools.testing.pipeline import PipelineHarness
from dynamic_kafka._toolchain.filelock import try_exclusive_lock
from dynamic_kafka.cli.maintain import format_maintenance
from dynamic_kafka.errors import ConfigError, LeaseLostError, RunInProgressError, RunTimeoutError
from dynamic_kafka.faults import acting_at
from dynamic_kafka.operations.maintain import maintain_pipeline
from dynamic_kafka.protocol.guard import run_lock_path
from dynamic_kafka.sink.compaction import table_files
from tests.support.exactly_once import TwoClusterStream, committed_offsets

if TYPE_CHECKING:
    from pathlib import Path

    from devtools.local_kafka import ClusterEndpoint

pytestmark = pytest.mark.integration

_DAY_AGO = time.time() - 24 * 3600


def three_runs(kafka_clusters: dict[str, ClusterEndpoint], spark: Any, folder: Path) -> TwoClusterStream:
    """The two-cluster stream (one partition per topic) after three runs, each landing a few records."""
    stream = TwoClusterStream(kafka_clusters, folder, spark=lambda: spark, partitions=1)
    for tag in ("a", "b", "c"):
        stream.produce(tag, east=3, west=2)
        assert stream.harness.face().run().status == "committed"
    return stream


def killed_write_leftovers(sink: Path) -> list[Path]:
    """What a staged write killed during its Spark job leaves (a day old), and a checksum whose file is gone."""
    attempt = sink / "dk-run-99-p" / "0123456789ab"
    task = attempt / "_temporary" / "0" / "_temporary" / "attempt_1" / "part-00000-x.snappy.parquet"
    task.parent.mkdir(parents=True)
    task.write_bytes(b"half a parquet file")
    checksum = sink / ".part-00000-gone.snappy.parquet.crc"
    checksum.write_bytes(b"crc")
    for path in (task, checksum):
        os.utime(path, (_DAY_AGO, _DAY_AGO))
    return [attempt / "_temporary", checksum]


def test_maintenance_compacts_the_runs_files_and_clears_killed_writes_leaving_every_row(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> None:
    stream = three_runs(kafka_clusters, spark, tmp_path)
    harness = stream.harness
    leftovers = killed_write_leftovers(harness.sink_path)
    before = table_files(harness.face().config.sink_table)
    assert before is not None
    assert before.current.files >= 3  # a file per run and partition at least
    offsets = committed_offsets(harness)

    summary = harness.face().maintain(vacuum_retention_hours=0, unsafe_vacuum_retention=True)

    sink, dead_letters = summary.tables
    assert (sink.role, dead_letters.role, dead_letters.before) == ("sink", "dead_letter", None)
    assert sink.before == before
    assert sink.after is not None
    assert sink.after.current.files == 1
    assert sink.compacted_files == before.current.files
    assert sink.after.rows == before.rows == len(stream.expected_rows())
    assert sink.after.stored.files < before.stored.files
    assert sink.leftovers_removed >= 2
    assert [path.exists() for path in leftovers] == [False, False]
    assert not (harness.sink_path / "dk-run-99-p").exists()  # the emptied attempt and run folders too
    assert harness.sink_rows() == stream.expected_rows()
    assert committed_offsets(harness) == offsets
    text = format_maintenance(summary)
    assert f"current files {before.current.files} (" in text
    assert "-> 1 (" in text
    assert "dead_letter" in text
    assert "no table yet" in text
    state = harness.runner().store.load()
    assert state.backfill_owner is None  # the lease was released

    stream.produce("d", east=1, west=1)
    assert harness.face().run().status == "committed"
    assert harness.sink_rows() == stream.expected_rows()


def test_recent_leftovers_stay_within_the_retention_period(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> None:
    # A write that may still be running (on another host whose lease ran out) must keep its task folder.
    stream = TwoClusterStream(kafka_clusters, tmp_path, spark=lambda: spark, partitions=1)
    stream.produce("a", east=2, west=1)
    stream.harness.face().run()
    temporary, _ = killed_write_leftovers(stream.harness.sink_path)
    recent = temporary / "0" / "_temporary" / "attempt_1" / "part-00000-x.snappy.parquet"
    os.utime(recent, None)

    floor = stream.harness.face().config.vacuum_retention_floor_hours  # the least taken without the override
    summary = stream.harness.face().maintain(vacuum_retention_hours=floor)

    assert recent.exists()
    assert summary.tables[0].leftovers_removed == 1  # the day-old checksum only


def test_maintenance_refuses_while_the_run_lock_is_held_a_run_is_planned_or_another_holds_the_lease(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> None:
    stream = TwoClusterStream(kafka_clusters, tmp_path, spark=lambda: spark, partitions=1)
    stream.produce("a", east=2, west=1)
    harness = stream.harness
    harness.face().run()
    pipeline = harness.face().config
    before = table_files(pipeline.sink_table)

    with try_exclusive_lock(run_lock_path(pipeline.resolved_state_path, pipeline.id)) as taken:
        assert taken
        with pytest.raises(RunInProgressError) as locked:
            harness.face().maintain(vacuum_retention_hours=0, unsafe_vacuum_retention=True)
    assert locked.value.retriable
    assert "another run is in progress for pipeline 'p'" in str(locked.value)

    store = harness.runner().store
    store.record_backfill({}, owner="another-host 1 x", lease_expires_at=datetime.now(UTC) + timedelta(minutes=5))
    with pytest.raises(RunInProgressError, match="held by another-host"):
        harness.face().maintain(vacuum_retention_hours=0, unsafe_vacuum_retention=True)
    store.release_backfill_lease(owner="another-host 1 x")

    stream.produce("b", east=1, west=1)
    plan = harness.face().plan()
    state = store.load()
    store.begin_run(plan, expected_version=state.table_version, owner="gone", lease_expires_at=datetime.now(UTC))
    with pytest.raises(RunInProgressError, match=f"planned run_seq {plan.run_seq} first"):
        harness.face().maintain(vacuum_retention_hours=0, unsafe_vacuum_retention=True)

    assert table_files(pipeline.sink_table) == before


def test_a_new_sink_is_partitioned_by_the_configured_columns_and_compacted_per_partition(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> None:
    from deltalake import DeltaTable

    stream = TwoClusterStream(kafka_clusters, tmp_path, spark=lambda: spark, partitions=1)
    harness = stream.harness
    harness.configure(sink={"path": "sink", "partition_by": ["cluster"]})
    for tag in ("a", "b"):
        stream.produce(tag, east=2, west=1)
        run = harness.face().run()
        assert run.status == "committed"  # the second is appended by delta-spark, not staged
        # Counted in the run's files, whose `cluster` is a partition value in the log, not a column of the files.
        assert run.completeness is not None
        assert (run.completeness.landed, run.completeness.matches) == (3, True)

    assert DeltaTable(str(harness.sink_path)).metadata().partition_columns == ["cluster"]
    assert sorted(p.name for p in harness.sink_path.glob("cluster=*")) == ["cluster=east", "cluster=west"]
    assert harness.sink_rows() == stream.expected_rows()

    summary = harness.face().maintain(vacuum_retention_hours=0, unsafe_vacuum_retention=True)

    after = summary.tables[0].after
    assert after is not None
    assert after.current.files == 2  # one per partition
    assert harness.sink_rows() == stream.expected_rows()


def test_a_maintenance_past_max_run_seconds_stops_before_its_next_step_and_gives_its_lease_up(tmp_path: Path) -> None:
    # JVM-free: maintenance is delta-rs only, so the sink is written by delta-rs here. Its steps cannot be
    # interrupted; the deadline stops it before the next one (it had none: a slow table held the pipeline).
    harness = PipelineHarness(tmp_path, clusters={"east": "127.0.0.1:9"}, max_run_seconds=1)
    for value in (b"a", b"b"):
        write_deltalake(str(harness.sink_path), pa.table({"offset": [len(value)], "value": [value]}), mode="append")
    store = harness.runner().store
    store.record_backfill({}, owner="creator", lease_expires_at=datetime.now(UTC))  # the pipeline's state exists
    before = table_files(harness.face().config.sink_table)
    steps: list[float] = []

    def slow_step() -> None:
        steps.append(time.monotonic())
        # Real time: max_run_seconds is a timer thread (it interrupts Spark jobs from outside the work), not a
        # reading of the clock a test could move; 1 s is its smallest setting.
        time.sleep(1.2)

    with acting_at("before_maintenance_step", slow_step), pytest.raises(RunTimeoutError) as caught:
        maintain_pipeline(harness.runner().context, retention_hours=0, unsafe_vacuum_retention=True)

    assert caught.value.retriable
    assert "the maintenance of pipeline 'p' exceeded max_run_seconds (1s)" in str(caught.value)
    assert len(steps) == 1  # stopped before its first step: nothing compacted
    assert table_files(harness.face().config.sink_table) == before
    assert store.load().backfill_owner is None  # its lease was given up
    done = maintain_pipeline(
        harness.runner().context, retention_hours=0, unsafe_vacuum_retention=True
    )  # the next one has the time it needs
    assert done.tables[0].after is not None
    assert done.tables[0].after.current.files == 1


def test_a_vacuum_retention_below_the_floor_is_refused_so_an_in_flight_writers_file_stays(tmp_path: Path) -> None:
    # JVM-free, as above. A writer the lease does not hold off (a Connect server finishing a killed client's
    # write, a paused zombie, another pipeline sharing the sink folder) has written a data file, not committed yet.
    harness = PipelineHarness(tmp_path, clusters={"east": "127.0.0.1:9"}, max_run_seconds=3600)
    write_deltalake(str(harness.sink_path), pa.table({"offset": [1], "value": [b"a"]}), mode="append")
    harness.runner().store.record_backfill({}, owner="creator", lease_expires_at=datetime.now(UTC))
    in_flight = harness.sink_path / "part-00000-5d1e2c7a-0b1f-4f55-9a9e-3c2b1a0f9e8d-c000.snappy.parquet"
    pq.write_table(pa.table({"offset": [2], "value": [b"late"]}), in_flight)
    before = table_files(harness.face().config.sink_table)

    with pytest.raises(ConfigError) as refused:
        harness.face().maintain(vacuum_retention_hours=0)

    assert not refused.value.retriable
    message = str(refused.value)
    assert "vacuum retention of 0 hours" in message
    assert "--vacuum-retention" in message
    assert "vacuum_retention_hours" in message
    assert "2 hours" in message  # the floor: max_run_seconds (1 hour) plus an hour
    assert "unsafe_vacuum_retention" in message
    assert in_flight.exists()
    assert table_files(harness.face().config.sink_table) == before

    at_floor = harness.face().maintain(vacuum_retention_hours=2)
    assert in_flight.exists()  # younger than the floor
    assert at_floor.tables[0].after is not None
    assert at_floor.tables[0].after.current.files == 1

    cli = harness.cli("maintain", "--vacuum-retention", "1")
    assert cli.returncode == 1
    assert "below the floor of 2 hours" in cli.stderr
    assert in_flight.exists()

    harness.face().maintain(vacuum_retention_hours=0, unsafe_vacuum_retention=True)
    assert not in_flight.exists()  # the explicit override deletes it, as documented


def test_a_maintenance_whose_lease_was_taken_stops_before_its_next_step(tmp_path: Path) -> None:
    # JVM-free, as above. The lease's guard at its call site: another holder took the writer lease (this process
    # paused past it, say) right before a step; the step must not run beside that holder's writes.
    harness = PipelineHarness(tmp_path, clusters={"east": "127.0.0.1:9"})
    for value in (b"a", b"b"):
        write_deltalake(str(harness.sink_path), pa.table({"offset": [len(value)], "value": [value]}), mode="append")
    store = harness.runner().store
    store.record_backfill({}, owner="creator", lease_expires_at=datetime.now(UTC))
    before = table_files(harness.face().config.sink_table)
    other = "another-host 1 x"

    def taken_over() -> None:
        held = store.load().backfill_owner
        if held is not None and held != other:
            store.release_backfill_lease(owner=held)
            store.record_backfill({}, owner=other, lease_expires_at=datetime.now(UTC) + timedelta(minutes=5))

    with acting_at("before_maintenance_step", taken_over), pytest.raises(LeaseLostError) as lost:
        maintain_pipeline(harness.runner().context, retention_hours=0, unsafe_vacuum_retention=True)

    assert lost.value.retriable
    assert table_files(harness.face().config.sink_table) == before  # nothing compacted or vacuumed
    assert store.load().backfill_owner == other
