"""Health between runs on real brokers (``Pipeline.health`` and ``dynamic-kafka health``), no run and no Spark:

- a partition whose newest record is older than ``health.idle_after_seconds`` is reported idle, one with a fresh
  record is not, and ``fail_on_idle`` turns idleness into a failed check;
- a transactional producer left open (begin, produce, no commit) holds the partition's last stable offset below
  its high watermark: reported with its cluster, topic and partition, and stuck once it has been open longer than
  ``health.stuck_transaction_seconds``;
- the command on a pipeline that never ran says so and passes, fails (exit 3) once its first run is later than
  ``freshness_minutes`` after its config file changed, and fails naming a cluster it cannot reach.
"""

from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING

import pytest
from confluent_kafka import Producer

from devtools.testing.clusters import distinct_free_ports
from devtools.testing.kafka import Record, create_topic, produce, unique_name
from devtools.testing.pipeline import PipelineHarness
from dynamic_kafka import Pipeline, clock, load_project_config
from dynamic_kafka.cli.main import main
from tests.support.clock import FakeClock

if TYPE_CHECKING:
    from pathlib import Path

    from devtools.local_kafka import ClusterEndpoint

pytestmark = pytest.mark.integration


def harness_of(
    kafka_clusters: dict[str, ClusterEndpoint], folder: Path, partitions: int = 1
) -> tuple[PipelineHarness, str]:
    bootstrap = kafka_clusters["east"].bootstrap_servers
    harness = PipelineHarness(folder, clusters={"east": bootstrap})
    topic = unique_name("orders")
    create_topic(bootstrap, topic, partitions=partitions)
    harness.set_streams({"orders": {"east": [topic]}})
    return harness, topic


def health_of(harness: PipelineHarness) -> Pipeline:
    return Pipeline(load_project_config(harness.config_path), "p")


def test_a_partition_is_idle_once_its_newest_record_is_older_than_the_threshold(
    kafka_clusters: dict[str, ClusterEndpoint], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness, topic = harness_of(kafka_clusters, tmp_path, partitions=2)
    bootstrap = kafka_clusters["east"].bootstrap_servers
    old = int(time.time() * 1000) - 2 * 3600 * 1000
    produce(bootstrap, topic, [Record(value=b"old", partition=0, timestamp_ms=old)])
    produce(bootstrap, topic, [Record(value=b"new", partition=1)])
    harness.configure(health={"idle_after_seconds": 3600})

    report = health_of(harness).health()
    by_partition = {p.partition: p for p in report.partitions}
    assert (by_partition[0].idle, by_partition[1].idle) == (True, False)
    assert by_partition[0].newest_record_at is not None
    assert int(by_partition[0].newest_record_at.timestamp() * 1000) == old
    assert by_partition[0].idle_seconds is not None
    assert by_partition[0].idle_seconds > 7000
    idle = report.verdict("idle_partitions")
    assert idle.passed, "idleness is reported, not failed, unless fail_on_idle"
    assert f"east/{topic}[0]" in idle.description
    assert "[1]" not in idle.description

    # The fresh partition turns idle once its threshold has passed.
    harness.configure(health={"idle_after_seconds": 2, "fail_on_idle": True})
    later = FakeClock()
    later.advance(2.5)
    monkeypatch.setattr(clock, "utc_now", later)
    report = health_of(harness).health()
    assert all(p.idle for p in report.partitions)
    assert not report.verdict("idle_partitions").passed
    assert not report.passed


def test_an_open_transaction_is_reported_and_stuck_after_its_threshold(
    kafka_clusters: dict[str, ClusterEndpoint],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    harness, topic = harness_of(kafka_clusters, tmp_path)
    bootstrap = kafka_clusters["east"].bootstrap_servers
    produce(bootstrap, topic, [Record(value=f"c{i}".encode()) for i in range(2)])
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique_name("left-open")})
    producer.init_transactions(30)
    producer.begin_transaction()
    try:
        for i in range(3):
            producer.produce(topic, value=f"t{i}".encode(), partition=0)
        assert producer.flush(30) == 0
        opened_at = time.time()

        harness.configure(health={"stuck_transaction_seconds": 600})
        (row,) = health_of(harness).health().partitions
        assert (row.last_stable_offset, row.high_watermark, row.pending_in_transaction) == (2, 5, 3)
        assert row.open_transaction_since is not None
        assert abs(row.open_transaction_since.timestamp() - opened_at) < 5
        assert not row.stuck_transaction, "open for less than its threshold"

        harness.configure(health={"stuck_transaction_seconds": 1})
        later = FakeClock()
        later.advance(1.5)
        monkeypatch.setattr(clock, "utc_now", later)
        report = health_of(harness).health()
        assert report.partitions[0].stuck_transaction
        stuck = report.verdict("stuck_transactions")
        assert not stuck.passed
        assert f"east/{topic}[0] open since" in stuck.description
        assert "last stable offset 2, high watermark 5" in stuck.description

        assert main(["health", "--config", str(harness.config_path), "--pipeline", "p"]) == 3
        out = capsys.readouterr().out
        assert "FAIL stuck_transactions" in out
        assert "3 offsets open since" in out
        assert "(stuck)" in out
    finally:
        producer.abort_transaction(30)


def test_health_of_a_pipeline_that_never_ran(
    kafka_clusters: dict[str, ClusterEndpoint], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    harness, topic = harness_of(kafka_clusters, tmp_path)
    produce(kafka_clusters["east"].bootstrap_servers, topic, [Record(value=b"v")])
    command = ["health", "--config", str(harness.config_path), "--pipeline", "p"]

    assert main(command) == 0
    out = capsys.readouterr().out
    assert out.startswith("pipeline p: healthy at ")
    assert "(never ran)" in out
    assert "ok   freshness           no run committed yet" in out

    # Set up 45 minutes ago, by its config file, with a first run due within 30 minutes: late.
    harness.configure(freshness_minutes=30)
    set_up = time.time() - 45 * 60
    os.utime(harness.config_path, (set_up, set_up))
    assert main([*command, "--json"]) == 3
    report = json.loads(capsys.readouterr().out)
    assert report["never_ran"] is True
    failed = {v["name"]: v["description"] for v in report["verdicts"] if not v["passed"]}
    assert list(failed) == ["freshness"]
    assert failed["freshness"].startswith("no run committed in the 45 minutes since its config file was last changed")
    assert [(p["topic"], p["high_watermark"]) for p in report["partitions"]] == [(topic, 1)]

    (nobody,) = distinct_free_ports(1)
    harness.configure(freshness_minutes=None, health={"timeout_seconds": 2})
    harness.set_cluster("west", bootstrap_servers=f"127.0.0.1:{nobody}")
    harness.set_streams({"orders": {"east": [topic], "west": [topic]}})
    assert main(command) == 3
    out = capsys.readouterr().out
    assert "FAIL lag                 lag unknown: no answer from cluster(s) west" in out
    assert "unreachable clusters: west" in out
