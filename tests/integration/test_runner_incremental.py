"""Incremental runs end to end on real clusters, Spark and Delta: exactly once across two clusters."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
from deltalake import DeltaTable

from devtools.testing.kafka import Record, create_topic, produce, unique_name
from devtools.testing.pipeline import PipelineHarness

if TYPE_CHECKING:
    from pathlib import Path

    from devtools.local_kafka import ClusterEndpoint
    from devtools.local_spark_connect import ServerInfo

pytestmark = pytest.mark.integration


def values(prefix: str, numbers: range) -> list[Record]:
    return [Record(value=f"{prefix}-{i}".encode(), key=f"k{i}".encode()) for i in numbers]


def test_one_stream_on_two_clusters_lands_exactly_once(
    kafka_clusters: dict[str, ClusterEndpoint], spark_mode: Any, tmp_path: Path
) -> None:
    east, west = kafka_clusters["east"].bootstrap_servers, kafka_clusters["west"].bootstrap_servers
    t_east, t_west = unique_name("orders"), unique_name("orders-v2")
    create_topic(east, t_east, 3)
    create_topic(west, t_west, 3)
    harness = PipelineHarness(
        tmp_path, clusters={"east": east, "west": west}, spark=spark_mode.session, spark_config=spark_mode.config
    )
    harness.set_streams({"orders": {"east": [t_east], "west": [t_west]}})
    sent = produce(east, t_east, values("e", range(30))) + produce(west, t_west, values("w", range(20)))

    first = harness.face().run()

    assert first.records == 50
    assert first.spark_started
    expected = sorted(
        (
            "east" if r.value.startswith(b"e") else "west",
            t_east if r.value.startswith(b"e") else t_west,
            r.partition,
            r.offset,
            r.value,
        )
        for r in sent
        if r.value is not None and r.partition is not None and r.offset is not None
    )
    assert harness.sink_rows() == expected
    assert {t.cluster_id: t.records for t in first.topics} == {"east": 30, "west": 20}
    # A small read is one task, so one new file, not one per partition range (6 here): small files slow every
    # later read of the sink and every snapshot Delta rebuilds for the next idempotent append.
    assert len(DeltaTable(str(harness.sink_path)).file_uris()) == 1

    second = harness.face().run()
    assert second.status == "empty"
    assert not second.spark_started
    assert second.records == 0
    assert harness.sink_rows() == expected

    more = produce(east, t_east, values("e", range(30, 35))) + produce(west, t_west, values("w", range(20, 27)))
    third = harness.face().run()
    assert third.records == 12
    assert third.run_seq == second.run_seq + 1
    assert harness.sink_values() == sorted([r.value for r in sent + more if r.value is not None])


def test_a_write_above_the_interpreted_limit_lands_with_code_generation(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The suite's writes are small, so they run interpreted (spark.session.codegen_settings); a larger run's path,
    # with Spark's generated code, must land the same rows and leave the session's settings as they were.
    from dynamic_kafka.spark import session as spark_session

    monkeypatch.setattr(spark_session, "INTERPRETED_MAX_RECORDS", 0)
    east = kafka_clusters["east"].bootstrap_servers
    topic = unique_name("codegen")
    create_topic(east, topic, 2)
    harness = PipelineHarness(tmp_path, clusters={"east": east}, spark=lambda: spark)
    harness.set_streams({"orders": {"east": [topic]}})
    sent = produce(east, topic, values("e", range(25)))
    before = spark.conf.get("spark.sql.codegen.wholeStage")

    summary = harness.face().run()

    assert summary.records == 25
    assert harness.sink_values() == sorted(r.value for r in sent if r.value is not None)
    assert spark.conf.get("spark.sql.codegen.wholeStage") == before


@pytest.mark.parametrize("shared", [True, False])
def test_a_pipelines_runs_in_fresh_processes_share_one_connect_session(
    kafka_clusters: dict[str, ClusterEndpoint],
    spark_connect_server: ServerInfo,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    shared: bool,
) -> None:
    # What a run finds in its pipeline's server session is what the last run left, so the classes Spark compiled
    # for that run serve it. Seen from outside: a client attached to the session the pipeline's runs are named
    # to share changes a setting every run makes on attaching, and a run, a fresh process, makes it again there.
    from dynamic_kafka.config.models import SparkConfig
    from dynamic_kafka.spark.remote import SESSION_REDACTION, build_remote_session

    monkeypatch.setenv("SPARK_CONNECT_MODE_ENABLED", "1")
    east = kafka_clusters["east"].bootstrap_servers
    topic = unique_name("shared-session")
    create_topic(east, topic, 2)
    spark_config = {"remote": spark_connect_server.remote, "session_per_pipeline": shared}
    harness = PipelineHarness(tmp_path, clusters={"east": east}, spark_config=spark_config)
    harness.set_streams({"orders": {"east": [topic]}})
    name = harness.runner().context.shared_session_name
    observer = build_remote_session(SparkConfig(remote=spark_connect_server.remote), shared_as=name)
    setting = "spark.sql.redaction.options.regex"
    sent = []
    for rounds in range(2):
        observer.conf.set(setting, "(?i)nothing")
        sent += produce(east, topic, values("e", range(rounds * 10, rounds * 10 + 10)))

        done = harness.cli("run", "--json")

        assert done.returncode == 0, done.stderr[-3000:]
        assert json.loads(done.stdout)["records"] == 10
        assert observer.conf.get(setting) == (SESSION_REDACTION[setting] if shared else "(?i)nothing")
    assert harness.sink_values() == sorted(r.value for r in sent if r.value is not None)
