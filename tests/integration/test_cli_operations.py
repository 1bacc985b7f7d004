"""The operations commands on real brokers, Spark and Delta, run in this process through the CLI's ``main``:

- ``status`` of a pipeline that never ran says so; brokers it cannot reach fail it (exit 1) with the cluster named,
  as JSON with ``--json``, instead of "total lag 0";
- ``backfill`` merges a window into the sink outside Dagster: each record once, however often it is run, and the
  incremental offsets untouched;
- the library's face (:class:`dynamic_kafka.Pipeline`), which these commands and the Dagster layer call, does the
  same from a program.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

from devtools.testing.clusters import distinct_free_ports
from devtools.testing.kafka import Record, create_topic, produce, unique_name
from devtools.testing.pipeline import PipelineHarness
from dynamic_kafka import Pipeline, WatchCursor, load_project_config
from dynamic_kafka.cli.main import main

if TYPE_CHECKING:
    from pathlib import Path

    from devtools.local_kafka import ClusterEndpoint

pytestmark = pytest.mark.integration


def cli(harness: PipelineHarness, *args: str) -> int:
    return main([*args, "--config", str(harness.config_path), "--pipeline", "p"])


def one_topic_pipeline(
    kafka_clusters: dict[str, ClusterEndpoint], folder: Path, spark: Any = None
) -> tuple[PipelineHarness, str]:
    bootstrap = kafka_clusters["east"].bootstrap_servers
    harness = PipelineHarness(
        folder, clusters={"east": bootstrap}, spark=(lambda: spark) if spark is not None else None
    )
    topic = unique_name("orders")
    create_topic(bootstrap, topic)
    harness.set_streams({"orders": {"east": [topic]}})
    return harness, topic


def test_status_of_a_pipeline_that_never_ran_says_so(
    kafka_clusters: dict[str, ClusterEndpoint], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    harness, _ = one_topic_pipeline(kafka_clusters, tmp_path)

    assert cli(harness, "status") == 0
    assert capsys.readouterr().out.startswith("pipeline p has never run: no offsets are committed yet")

    assert cli(harness, "status", "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["never_ran"], report["unreachable_clusters"]) == (True, [])


def test_status_fails_naming_the_brokers_it_cannot_reach(
    kafka_clusters: dict[str, ClusterEndpoint], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    harness, topic = one_topic_pipeline(kafka_clusters, tmp_path)
    harness.configure(kafka_timeout_seconds=3)  # "west" is given up on after 3 s instead of 10 s
    (nobody,) = distinct_free_ports(1)
    harness.set_cluster("west", bootstrap_servers=f"127.0.0.1:{nobody}")
    harness.set_streams({"orders": {"east": [topic], "west": [topic]}})

    assert cli(harness, "status") == 1
    captured = capsys.readouterr()
    assert "has never run" in captured.out
    assert captured.err.startswith("dynamic-kafka: error: cluster 'west': no answer from the brokers")
    assert "Traceback" not in captured.err

    assert cli(harness, "status", "--json") == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out)["unreachable_clusters"] == ["west"]
    error = json.loads(captured.err)["error"]
    assert (error["type"], error["retriable"]) == ("ClusterUnreachableError", True)


def test_backfill_command_merges_a_window_once_and_leaves_the_offsets(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    harness, topic = one_topic_pipeline(kafka_clusters, tmp_path, spark)
    delivered = produce(
        kafka_clusters["east"].bootstrap_servers, topic, [Record(value=f"v{i}".encode()) for i in range(5)]
    )
    now = datetime.now(UTC)
    window = ["--start", (now - timedelta(hours=1)).isoformat(), "--end", (now + timedelta(minutes=5)).isoformat()]

    assert cli(harness, "backfill", *window, "--json") == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["status"], summary["records"], summary["sink_records"]) == ("committed", 5, 5)
    assert cli(harness, "backfill", *window) == 0
    again = capsys.readouterr().out
    assert "backfill [" in again
    assert "committed: 5 records read, 0 rows inserted (every record was in the sink already)" in again

    assert harness.sink_rows() == sorted(("east", topic, 0, r.offset or 0, r.value) for r in delivered)
    assert harness.face().status().never_ran, "a backfill never moves the incremental offsets"


def test_offsets_show_lists_each_partition_against_the_broker(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    harness, topic = one_topic_pipeline(kafka_clusters, tmp_path, spark)
    bootstrap = kafka_clusters["east"].bootstrap_servers
    produce(bootstrap, topic, [Record(value=f"a{i}".encode()) for i in range(3)])
    assert harness.face().run().records == 3
    produce(bootstrap, topic, [Record(value=f"b{i}".encode()) for i in range(2)])

    assert cli(harness, "offsets", "show", "--json") == 0
    (row,) = json.loads(capsys.readouterr().out)["partitions"]
    assert (row["cluster_id"], row["topic"], row["partition"], row["status"]) == ("east", topic, 0, "active")
    assert (row["next_offset"], row["earliest_offset"], row["latest_offset"], row["lag"]) == (3, 0, 5, 2)
    assert (row["updated_run_seq"], bool(row["topic_id"])) == (1, True)

    assert cli(harness, "offsets", "show") == 0
    # Columns are as wide as their content: compare the row's cells, not its spacing.
    (line,) = [line for line in capsys.readouterr().out.splitlines() if topic in line]
    assert line.split() == ["east", topic, row["topic_id"], "0", "3", "0", "5", "2", "active", "1"]


def test_the_pipeline_face_plans_runs_and_reports_like_the_commands(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> None:
    harness, topic = one_topic_pipeline(kafka_clusters, tmp_path)
    produce(kafka_clusters["east"].bootstrap_servers, topic, [Record(value=f"v{i}".encode()) for i in range(4)])
    pipeline = Pipeline(load_project_config(harness.config_path), "p", spark=lambda: spark)

    assert pipeline.id == "p"
    assert pipeline.sink_info() is None, "no sink before the first run"
    first = pipeline.check_metadata(WatchCursor(), failure_threshold=1)
    assert first.run_key is not None, "the first poll asks for a run, recording the fingerprint"
    plan = pipeline.plan()
    assert (plan.run_seq, plan.planned_records) == (1, 4)

    summary = pipeline.run()
    assert (summary.run_seq, summary.status, summary.records) == (1, "committed", 4)
    assert pipeline.plan().planned_records == 0, "plan reads the committed offsets"

    status = pipeline.status()
    assert status.last_run is not None
    assert (status.never_ran, status.total_lag, status.last_run.run_seq, status.last_run.records) == (False, 0, 1, 4)
    (row,) = pipeline.offsets().partitions
    assert (row.topic, row.next_offset, row.latest_offset) == (topic, 4, 4)
    sink, dead = pipeline.sink_info(), pipeline.dead_letter_info()
    assert (sink.rows if sink else None, dead.rows if dead else None) == (4, None)
    assert not pipeline.realign().needed
    assert pipeline.check_metadata(first.cursor, failure_threshold=1).run_key is None, "nothing changed"
