"""A run trusts only the commit it finds in the sink's log: other writers, lost answers, conflicts, settings.

- another process's delta-spark commit replacing the run's log entry (the check-then-rename race of delta-spark's
  local and S3 log stores, forced on the real log: :mod:`tests.support.foreign_writer`) fails the run retriably, with
  nothing committed to the state; the next run writes the run again and every record lands once, in the sink and
  in the dead-letter table, on both write paths (staged appends, delta-spark appends), in process and over Connect;
- a write that raised after its commit landed (an ambiguous commit) is confirmed by its commit id: the run goes
  on and reports the records it landed;
- a staged commit that loses to another writer names the winner from the log;
- the Spark session settings a run changes are put back afterwards.
"""

from __future__ import annotations

import json
import shutil
import uuid
from typing import TYPE_CHECKING, Any

import pytest

from devtools.testing.kafka import Record, create_topic, produce, unique_name
from devtools.testing.pipeline import PipelineHarness
from dynamic_kafka.errors import CommitLostError, DynamicKafkaError
from dynamic_kafka.sink import committed_txn_version, staged_append, tables
from dynamic_kafka.storage import TableRef
from tests.support.clock import past_the_planned_runs_lease
from tests.support.exactly_once import TwoClusterStream, assert_nothing_left, committed_offsets
from tests.support.foreign_writer import fail_after_appends, race_appends

if TYPE_CHECKING:
    from pathlib import Path

    from devtools.local_kafka import ClusterEndpoint

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


def test_a_run_whose_sink_commit_another_process_replaced_fails_retriably_and_the_next_run_lands_it_once(
    kafka_clusters: dict[str, ClusterEndpoint], spark_mode: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = TwoClusterStream(kafka_clusters, tmp_path, spark=spark_mode.session, spark_config=spark_mode.config)
    harness = stream.harness
    stream.produce("first", east=6, west=4)
    assert harness.face().run().run_seq == 1
    ends_before = stream.end_offsets()
    lost_rows = stream.produce("lost", east=5, west=3)
    foreign = race_appends(monkeypatch, harness.sink_path)

    with pytest.raises(DynamicKafkaError) as raised:
        harness.face().run()

    monkeypatch.undo()
    assert raised.value.retriable
    message = str(raised.value)
    assert "run 2 of pipeline 'p'" in message
    assert "no version of its log holds the run" in message
    assert f"{foreign[0]} by delta-rs" in message  # the writer the log names
    state = harness.runner().store.load()
    assert state.last_run is not None
    assert (state.last_run.run_seq, state.last_run.status) == (2, "planned")
    assert committed_offsets(harness) == ends_before
    assert committed_txn_version(harness.sink_path, "p") == 1
    assert not set(lost_rows) & set(harness.sink_rows())
    past_the_planned_runs_lease(monkeypatch, harness.runner().store)

    recovering = harness.face().run()

    assert (recovering.recovered_run_seq, recovering.run_seq) == (2, 3)
    assert harness.sink_rows() == stream.expected_rows()
    assert committed_offsets(harness) == stream.end_offsets()
    assert_nothing_left(harness)


def test_replaced_commits_of_the_dead_letter_table_and_of_a_delta_spark_append_are_written_again_once(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """JSON values with bad records: run 2 loses its (staged) dead-letter commit, and fails before writing the
    sink; run 3 loses its sink commit, made by delta-spark (the sink has a table feature delta-rs does not
    stage). Each recovery lands what was lost, and nothing twice."""
    servers = kafka_clusters["east"].bootstrap_servers
    topic = unique_name("replaced")
    create_topic(servers, topic, 1)
    harness = PipelineHarness(
        tmp_path,
        clusters={"east": servers},
        spark=lambda: spark,
        value={"format": "json", "schema": "n INT"},
        on_decode_error="dead_letter",
    )
    harness.set_streams({"orders": {"east": [topic]}})
    dead_letter_path = tmp_path / "sink_dead_letter"
    good: set[int] = set()
    bad: set[int] = set()

    def send(tag: str, good_count: int, bad_count: int) -> None:
        records = [Record(value=json.dumps({"n": i}).encode()) for i in range(good_count)]
        records += [Record(value=f"not json {tag} {i}".encode()) for i in range(bad_count)]
        offsets = [r.offset or 0 for r in produce(servers, topic, records)]
        good.update(offsets[:good_count])
        bad.update(offsets[good_count:])

    def landed(table: Path) -> list[int]:
        opened = tables.open_delta_rs(table, doing="reading")
        assert opened is not None
        return sorted(opened.to_pyarrow_table(columns=["offset"]).column("offset").to_pylist())

    send("first", 3, 2)
    assert harness.face().run().dead_letters == 2
    send("second", 2, 2)
    race_appends(monkeypatch, dead_letter_path)

    with pytest.raises(DynamicKafkaError, match="no version of its log holds the run") as raised:
        harness.face().run()

    monkeypatch.undo()
    assert raised.value.retriable
    assert committed_txn_version(harness.sink_path, "p") == 1  # the sink was not written after the lost commit
    assert committed_txn_version(dead_letter_path, "p") == 1
    past_the_planned_runs_lease(monkeypatch, harness.runner().store)
    assert harness.face().run().recovered_run_seq == 2
    assert (landed(harness.sink_path), landed(dead_letter_path)) == (sorted(good), sorted(bad))

    # Change data feed is a table feature: delta-rs does not stage into such a table, delta-spark appends.
    spark.sql(f"ALTER TABLE delta.`{harness.sink_path}` SET TBLPROPERTIES (delta.enableChangeDataFeed = true)")
    send("third", 3, 1)
    race_appends(monkeypatch, harness.sink_path)

    with pytest.raises(DynamicKafkaError, match="no version of its log holds the run"):
        harness.face().run()

    monkeypatch.undo()
    assert committed_txn_version(harness.sink_path, "p") == 2
    past_the_planned_runs_lease(monkeypatch, harness.runner().store)
    assert harness.face().run().recovered_run_seq == 4
    assert (landed(harness.sink_path), landed(dead_letter_path)) == (sorted(good), sorted(bad))
    assert_nothing_left(harness)


def test_a_write_that_raised_after_its_commit_landed_is_confirmed_and_reports_its_records_and_settings_are_restored(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = TwoClusterStream(kafka_clusters, tmp_path, spark=lambda: spark)
    harness = stream.harness
    stream.produce("first", east=4, west=2)
    assert harness.face().run().run_seq == 1
    ambiguous_rows = stream.produce("ambiguous", east=5, west=3)
    committed = fail_after_appends(monkeypatch, harness.sink_path, lambda: RuntimeError("connection reset"))
    # The caller's own session settings, which a run's writes change for themselves only.
    settings = {
        "spark.sql.parquet.outputTimestampType": "INT96",
        "spark.databricks.delta.snapshotPartitions": "7",
    }
    for name, value in settings.items():
        spark.conf.set(name, value)
    try:
        summary = harness.face().run()
        assert {name: spark.conf.get(name) for name in settings} == settings
    finally:
        spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
        spark.conf.set("spark.databricks.delta.snapshotPartitions", "4")

    monkeypatch.undo()
    assert committed, "the write did not commit"
    assert (summary.run_seq, summary.status, summary.records) == (2, "committed", len(ambiguous_rows))
    assert summary.sink_version == committed[0]
    assert harness.sink_rows() == stream.expected_rows()
    assert committed_offsets(harness) == stream.end_offsets()
    assert_nothing_left(harness)


def test_a_staged_commit_that_lost_names_the_writer_that_won(spark: Any, tmp_path: Path) -> None:
    table = TableRef.of(tmp_path / "sink")
    rows = spark.createDataFrame([(1, "a")], "id LONG, name STRING")
    rows.write.format("delta").option("txnAppId", "p").option("txnVersion", 1).save(table.spark_uri)
    stale = tables.open_delta_rs(table, doing="the snapshot a slow writer checked")
    assert stale is not None
    tables.append_idempotent(rows, table, "p", 3, commit_id="winner")  # delta-spark: not blind

    with pytest.raises(CommitLostError) as lost:
        tables.staged_append(rows, table, stale, "p", 2, "loser")

    assert "version 1 (WRITE by Apache-Spark/" in str(lost.value)
    assert "Delta-Lake/" in str(lost.value)
    assert "transaction p 3" in str(lost.value)
    assert committed_txn_version(table, "p") == 3


def test_a_stray_file_in_a_staging_folder_never_lands_and_the_next_run_removes_the_leftovers(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file in a staged write's folder that its Spark job did not commit (as a retried task attempt's output
    under the v2 file committer, or another writer, leaves) is never committed: the run fails retriably, and the
    next run writes the run into a new folder and removes the earlier attempt's, hidden files included."""
    stream = TwoClusterStream(kafka_clusters, tmp_path, spark=lambda: spark)
    harness = stream.harness
    stream.produce("first", east=4, west=2)
    assert harness.runner().run().run_seq == 1
    stream.produce("second", east=5, west=3)
    strays: list[Path] = []

    def stray_output(name: str) -> None:
        if name != "after_staging" or strays:
            return
        written = max(harness.sink_path.glob("dk-run-*/**/part-*.parquet"), key=lambda p: p.stat().st_mtime)
        stray = written.with_name(f"part-00000-{uuid.uuid4()}-c000.snappy.parquet")
        shutil.copyfile(written, stray)
        strays.append(stray)

    monkeypatch.setattr(staged_append, "crash_point", stray_output)
    with pytest.raises(DynamicKafkaError) as raised:
        harness.runner().run()

    monkeypatch.undo()
    assert raised.value.retriable
    assert strays[0].name in str(raised.value)
    assert committed_txn_version(harness.sink_path, "p") == 1
    past_the_planned_runs_lease(monkeypatch, harness.runner().store)
    assert harness.runner().run().recovered_run_seq == 2
    assert harness.sink_rows() == stream.expected_rows()
    assert not strays[0].parent.exists()
    hidden = [p for p in harness.sink_path.glob("dk-run-*/**/*") if p.name.startswith((".", "_"))]
    assert hidden == []
    assert_nothing_left(harness)


class _KilledError(Exception):
    """The run's process "dies" at a crash point."""


def test_a_recovery_that_finds_its_run_in_the_sink_reports_the_records_the_run_landed(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = TwoClusterStream(kafka_clusters, tmp_path, spark=lambda: spark)
    harness = stream.harness
    stream.produce("first", east=4, west=2)
    assert harness.runner().run().run_seq == 1
    landed_rows = stream.produce("landed", east=5, west=3)

    def killed(name: str) -> None:
        if name == "after_sink":
            raise _KilledError(name)

    with monkeypatch.context() as patched:
        patched.setattr("dynamic_kafka.protocol.run.crash_point", killed)
        with pytest.raises(_KilledError):
            harness.runner().run()  # run 2 is in the sink, its offsets are not committed
    past_the_planned_runs_lease(monkeypatch, harness.runner().store)

    summary = harness.runner().run()

    assert (summary.recovered_run_seq, summary.run_seq, summary.status) == (2, 3, "empty")
    (recovered,) = [r for r in harness.runner().store.run_history() if r.run_seq == 2]
    assert recovered.summary_json is not None
    reported = json.loads(recovered.summary_json)
    assert (reported["status"], reported["records"], reported["dead_letters"]) == ("committed", len(landed_rows), 0)
    assert reported["sink_version"] == tables.txn_commit_version(harness.sink_path, "p", 2)
    assert harness.sink_rows() == stream.expected_rows()
    assert committed_offsets(harness) == stream.end_offsets()
