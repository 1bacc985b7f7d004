"""Guards that stop a run before anything is planned, on real clusters, Spark and Delta.

- A state restored from a backup (behind its sink) is refused through the CLI, ``realign`` repairs it, and the next
  run lands every record exactly once (before the guard, runs reused the sink's run_seqs: Delta skipped their
  appends and the runs reported success with nothing landed). Likewise a state restored from before a backfill.
- A value ``schema`` that does not parse, or a sink whose schema does not take the pipeline's rows, is refused
  before the plan is written (before, both failed inside the Spark write, with a planned run left behind and a
  retriable error every retry repeated).
"""

from __future__ import annotations

import json
import shutil
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

from devtools.testing.kafka import Record, create_topic, produce, unique_name
from devtools.testing.pipeline import PipelineHarness
from dynamic_kafka.errors import SchemaMismatchError
from dynamic_kafka.sink import committed_txn_version
from dynamic_kafka.sink.tables import backfill_app_id
from tests.support.exactly_once import (
    TwoClusterStream,
    assert_nothing_left,
    committed_offsets,
    tail,
    window_start_now,
)

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from devtools.local_kafka import ClusterEndpoint
    from devtools.testing.pipeline import Row

pytestmark = pytest.mark.integration


def backed_up_after_run_1(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> tuple[TwoClusterStream, list[Row], Callable[[], None]]:
    """The two-cluster stream after run 1 (which landed the returned rows), its state backed up; the callable puts
    the backup back in place of the state."""
    stream = TwoClusterStream(kafka_clusters, tmp_path / "p", spark=lambda: spark)
    state_path = stream.harness.folder / "sink_state"
    first = stream.produce("first", east=6, west=4)
    assert stream.harness.face().run().run_seq == 1
    shutil.copytree(state_path, tmp_path / "backup")

    def restore() -> None:
        shutil.rmtree(state_path)
        shutil.copytree(tmp_path / "backup", state_path)

    return stream, first, restore


def test_a_restored_state_is_refused_then_realigned_and_the_next_run_lands_every_record_once(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> None:
    stream, first, restore = backed_up_after_run_1(kafka_clusters, spark, tmp_path)
    harness = stream.harness
    second = stream.produce("second", east=5, west=3)
    assert harness.face().run().run_seq == 2
    third = stream.produce("third", east=4, west=2)
    restore()

    refused = harness.cli("run", "--json")

    assert refused.returncode == 1, tail(refused.stderr)
    assert refused.stdout == ""
    assert "is behind its sink" in refused.stderr
    assert "holds run 2 of this pipeline but the state's last run is 1" in refused.stderr
    assert "dynamic-kafka realign" in refused.stderr
    assert harness.sink_rows() == sorted(first + second)
    assert harness.runner().store.load().next_run_seq == 2  # nothing planned

    shown = harness.cli("realign")
    assert shown.returncode == 0, tail(shown.stderr)
    assert "nothing changed; run again with --yes" in shown.stdout
    assert harness.runner().store.load().next_run_seq == 2

    done = harness.cli("realign", "--yes", "--json")
    assert done.returncode == 0, tail(done.stderr)
    assert json.loads(done.stdout)["applied"] is True
    assert harness.runner().store.load().next_run_seq == 3
    # The realign is run 2 of the history now, a typed summary every reader of the history understands (it was a
    # JSON of its own shape, and `status` failed to parse it).
    realigned = harness.face().status().last_run
    assert realigned is not None
    assert (realigned.run_seq, realigned.status) == (2, "realigned")
    assert realigned.realign is not None
    assert (realigned.realign.state_run_seq, realigned.realign.sink_txn) == (1, 2)

    summary = harness.face().run()

    assert (summary.run_seq, summary.status) == (3, "committed")
    assert summary.records == len(third)  # what the sink lacked
    assert summary.deduplicated == len(second)  # read again from the restored offsets, skipped
    # Completeness accounts for them: per range, read = landed by run 3 + rows of run 2 already at the coordinates.
    assert summary.completeness is not None
    assert summary.completeness.matches
    assert (summary.completeness.landed, summary.completeness.deduplicated) == (len(third), len(second))
    assert harness.sink_rows() == stream.expected_rows()
    assert committed_offsets(harness) == stream.end_offsets()
    assert_nothing_left(harness)


def test_a_state_restored_from_before_a_backfill_is_refused_then_realigned_and_nothing_lands_twice(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> None:
    # Found by the protocol model: the restored state's last run equals the sink's, but it lost the frontier of a
    # backfill made after the backup, so the next run appended blind what the backfill had merged (duplicates).
    stream, first, restore = backed_up_after_run_1(kafka_clusters, spark, tmp_path)
    harness = stream.harness
    window_start = window_start_now()
    second = stream.produce("second", east=5, west=2)
    merged = harness.face().backfill(window_start, datetime.now(UTC) + timedelta(minutes=1))
    assert merged.records == len(second)
    assert committed_txn_version(harness.sink_path, backfill_app_id("p")) == 1  # the MERGE's own transaction
    restore()

    refused = harness.cli("run", "--json")

    assert refused.returncode == 1, tail(refused.stderr)
    assert "holds backfill 1 of this pipeline but the state knows backfills up to 0" in refused.stderr
    assert harness.sink_rows() == sorted(first + second)
    assert harness.runner().store.load().next_run_seq == 2  # nothing planned

    done = harness.cli("realign", "--yes", "--json")
    assert done.returncode == 0, tail(done.stderr)
    assert json.loads(done.stdout)["sink_backfill"] == 1
    third = stream.produce("third", east=1, west=1)
    summary = harness.face().run()

    assert (summary.run_seq, summary.status) == (2, "committed")
    assert summary.records == len(third)
    assert summary.deduplicated == len(second)  # read again from the restored offsets, skipped
    # Completeness accounts for them: per range, read = landed by run 3 + rows of run 2 already at the coordinates.
    assert summary.completeness is not None
    assert summary.completeness.matches
    assert (summary.completeness.landed, summary.completeness.deduplicated) == (len(third), len(second))
    assert harness.sink_rows() == stream.expected_rows()
    assert committed_offsets(harness) == stream.end_offsets()


class JsonTopic:
    """One single-partition topic on east with JSON values, and the pipeline ``p`` reading it."""

    def __init__(self, east: ClusterEndpoint, folder: Path, spark: Any, value_schema: str) -> None:
        self.servers = east.bootstrap_servers
        self.topic = unique_name("json")
        create_topic(self.servers, self.topic, 1)
        self.harness = PipelineHarness(
            folder,
            clusters={"east": self.servers},
            spark=lambda: spark,
            value={"format": "json", "schema": value_schema},
        )
        self.harness.set_streams({"orders": {"east": [self.topic]}})

    def produce(self, *values: bytes) -> list[Record]:
        return produce(self.servers, self.topic, [Record(value=v) for v in values])


def test_a_value_schema_that_does_not_parse_is_refused_before_anything_is_planned(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> None:
    orders = JsonTopic(kafka_clusters["east"], tmp_path, spark, "id INT, name STRIN G")
    orders.produce(b'{"id": 1, "name": "a"}')

    with pytest.raises(SchemaMismatchError) as caught:
        orders.harness.face().run()

    assert not caught.value.retriable
    assert "value schema" in str(caught.value)
    assert orders.harness.runner().store.load().table_version is None  # no plan written
    assert not (orders.harness.sink_path / "_delta_log").exists()


def test_a_sink_that_would_not_take_the_rows_is_refused_with_the_columns_named(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> None:
    orders = JsonTopic(kafka_clusters["east"], tmp_path, spark, "id INT, name STRING")
    orders.produce(b'{"id": 1, "name": "a"}', b'{"id": 2, "name": "b"}')
    assert orders.harness.face().run().records == 2
    orders.harness.configure(value={"format": "json", "schema": "id STRING, name STRING, added DOUBLE"})
    orders.produce(b'{"id": "3", "name": "c", "added": 1.5}')

    with pytest.raises(SchemaMismatchError) as caught:
        orders.harness.face().run()

    assert not caught.value.retriable
    # The new column is not a mismatch: the sink's schema evolves to take it (only a changed type is refused).
    assert caught.value.columns == ("value.id",)
    assert "value.id: the sink has int, the pipeline writes string" in str(caught.value)
    state = orders.harness.runner().store.load()
    assert state.last_run is not None
    assert (state.last_run.run_seq, state.last_run.status) == (1, "committed")  # no plan written


def test_a_spark_job_still_running_at_the_run_deadline_is_interrupted(spark_mode: Any) -> None:
    """The runner's deadline (``max_run_seconds``) interrupts the Spark operations of its run, so a hung or endless
    job cannot hold the run (and its lock) forever; the runner turns the failure into a retriable RunTimeoutError.
    In process the SparkContext's job tags are cancelled; over Spark Connect the session's operation tags.

    Over Spark Connect (4.1) the interrupted operation fails at once but its Spark job runs on in the server until it
    ends (seen in the server's job list), so that case uses a job of seconds rather than minutes: the shared test
    server would otherwise stay busy for minutes."""
    from dynamic_kafka.config.models import SparkConfig
    from dynamic_kafka.spark.deadline import RunDeadline
    from dynamic_kafka.spark.session import build_spark_session

    spark = spark_mode.session() if spark_mode.session else build_spark_session(SparkConfig(**spark_mode.config))
    deadline = RunDeadline("p", 3, hard_exit=False)
    deadline.attach(spark)
    started = time.monotonic()
    try:
        with pytest.raises(Exception, match=r"(?i)cancel|interrupt"):
            endless_job(spark, rows=2 * 10**10 if spark_mode.name == "connect" else 2 * 10**11)
    finally:
        deadline.cancel()
    assert deadline.expired.is_set()
    assert time.monotonic() - started < 180
    assert deadline.error().retriable
    assert spark.range(3).count() == 3  # the session is still usable


def test_a_spark_job_submitted_after_the_run_deadline_passed_is_cancelled_too(spark: Any) -> None:
    """A busy driver can submit the run's next job just after the deadline fired: that job is cancelled as well,
    instead of running unbounded while holding the run's lock."""
    from dynamic_kafka.spark.deadline import RunDeadline

    deadline = RunDeadline("p", 0.5, hard_exit=False)
    deadline.attach(spark)
    try:
        assert deadline.expired.wait(30)
        with pytest.raises(Exception, match=r"(?i)cancel|interrupt"):
            endless_job(spark)
    finally:
        deadline.cancel()
    assert spark.range(3).count() == 3


def endless_job(spark: Any, rows: int = 2 * 10**11) -> int:
    """Minutes of work on two cores if nothing cancels it (bounded, so a broken cancel fails instead of hanging)."""
    return int(spark.range(0, rows, numPartitions=2).where("id % 7 = 3").count())
