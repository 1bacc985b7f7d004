"""The real deployment shape: PostgreSQL storage, a code server, the webserver and the daemon as separate processes,
runs launched by the daemon (a sensor's request or the run queue) and executed by the default run launcher in their
own processes, everything driven through GraphQL. The runs use the session's Spark Connect server, as a deployment
does, so a run process starts no JVM.

One deployment serves the whole file (and the session): every pipeline below is in the project config before it
starts, and each test owns its pipeline, its streams and its topics.
"""

from __future__ import annotations

import os
import signal
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from devtools.testing.browser import HeadlessChromium
from devtools.testing.dagster_ui import asset_url, open_lineage, open_partitions, show_metadata_plots
from dynamic_kafka.dagster.names import incremental_job_name, metadata_sensor_name
from dynamic_kafka.dagster.translator import DynamicKafkaTranslator
from dynamic_kafka.state import StateStore
from tests.support.deployment import Deployment, run_deployment
from tests.support.e2e import Landed, Project, Record, create_topic, produce, sink_rows, unique_topic

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from devtools.local_postgres import LocalPostgres
    from devtools.local_spark_connect import ServerInfo

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]

MIGRATION = "deployed-migration"  # stream "migrating": east -> east + west -> west, driven by the metadata sensor
CRASH = "deployed-crash"  # stream "crashing": a run worker killed mid-run, the next run recovers
BACKFILL = "deployed-backfill"  # stream "history": three hourly windows backfilled in one run
H = timedelta(hours=1)
# The backfill's first window: five hours ago, so all three windows are complete partitions.
HOUR = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - 5 * H


class Layout:
    """The metadata file shared by every pipeline of the deployment; each test changes its own stream only."""

    def __init__(self, project: Project) -> None:
        self.project = project
        self.streams: dict[str, dict[str, list[str]]] = {}

    def set(self, stream: str, clusters: dict[str, list[str]]) -> None:
        self.streams[stream] = clusters
        self.project.write_metadata(self.streams)


@pytest.fixture(scope="module")
def deployment_project(
    tmp_path_factory: pytest.TempPathFactory, kafka_clusters: Any, spark_connect_server: ServerInfo
) -> Project:
    clusters = {name: c.bootstrap_servers for name, c in kafka_clusters.items()}
    # As teams deploy it (and `make ui` does): the runs the daemon launches use the warm Spark Connect server, so
    # none of them starts a JVM.
    project = Project(
        root=tmp_path_factory.mktemp("deployment-project"),
        clusters=clusters,
        spark={"remote": spark_connect_server.remote},
    )
    project.write_metadata({})
    # The sensor daemon evaluates sensors every 5 s at best; an interval of 1 s means "every daemon loop".
    project.add_pipeline(
        MIGRATION, ["migrating"], starting_offsets="earliest", orchestration={"sensor": {"interval_seconds": 1}}
    )
    project.add_pipeline(CRASH, ["crashing"], starting_offsets="earliest")
    project.add_pipeline(
        BACKFILL, ["history"], backfill={"start": (HOUR - 24 * H).isoformat(), "granularity": "hourly"}
    )
    return project


@pytest.fixture(scope="module")
def layout(deployment_project: Project) -> Layout:
    return Layout(deployment_project)


@pytest.fixture(scope="module")
def deployment(
    deployment_project: Project, postgres: LocalPostgres, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    with run_deployment(deployment_project.config_path, tmp_path_factory.mktemp("dagster-home"), postgres) as d:
        yield d
        print(f"deployment timings: {d.timings}")  # shown with -s


def tags_of(run: dict[str, Any]) -> dict[str, str]:
    return {t["key"]: t["value"] for t in run["tags"]}


def test_the_metadata_sensor_follows_a_migration_and_the_daemons_runs_land_every_record_once(
    deployment: Deployment, deployment_project: Project, layout: Layout
) -> None:
    project = deployment_project
    east, west = project.clusters["east"], project.clusters["west"]
    east_topic, west_topic = unique_topic("migrating-east"), unique_topic("migrating-west")
    create_topic(east, east_topic, partitions=2)
    create_topic(west, west_topic, partitions=1)
    job = incremental_job_name(MIGRATION)
    started = time.monotonic()

    # 1. east only. The sensor's first tick requests the run that records the baseline fingerprint.
    layout.set("migrating", {"east": [east_topic]})
    produced = produce("east", east, east_topic, [Record(i % 2, f"east-{i}") for i in range(5)])
    assert deployment.start_sensor(metadata_sensor_name(MIGRATION)) == "RUNNING"
    deployment.wait_for_runs(job, 1)
    assert sorted(sink_rows(project.sink_path(MIGRATION))) == sorted(produced)

    # 2. east + west: the stream now lives on both clusters while producers move.
    produced += produce("east", east, east_topic, [Record(i % 2, f"east-late-{i}") for i in range(3)])
    produced += produce("west", west, west_topic, [Record(0, f"west-{i}") for i in range(4)])
    layout.set("migrating", {"east": [east_topic], "west": [west_topic]})
    deployment.wait_for_runs(job, 2)
    assert sorted(sink_rows(project.sink_path(MIGRATION))) == sorted(produced)

    # 3. west only: east is retired (everything on it was read by run 2).
    layout.set("migrating", {"west": [west_topic]})
    produced += produce("west", west, west_topic, [Record(0, f"west-late-{i}") for i in range(3)])
    runs = deployment.wait_for_runs(job, 3)
    deployment.stop_sensor(metadata_sensor_name(MIGRATION))
    deployment.timings["migration_s"] = time.monotonic() - started

    assert [r["status"] for r in runs] == ["SUCCESS"] * 3
    assert {tags_of(r)["dynamic_kafka/trigger"] for r in runs} == {"metadata_change"}
    assert all(tags_of(r)["dagster/sensor_name"] == metadata_sensor_name(MIGRATION) for r in runs)
    rows = sink_rows(project.sink_path(MIGRATION))
    assert len(rows) == len(set(rows))  # exactly once
    assert sorted(rows) == sorted(produced)
    sinks = [
        m["metadata"]
        for r in runs
        for m in deployment.materializations(r["runId"])
        if m["asset"] == ["dynamic_kafka", MIGRATION]
    ]
    assert [m["clusters"] for m in sinks] == ["east", "east, west", "west"]
    # Consumer-group commits are on by default: every run gave its offsets to the group "dynamic-kafka.<id>" on
    # each cluster it read, so Kafka's own tools show the pipeline's lag.
    group = f"dynamic-kafka.{MIGRATION}"
    assert sinks[1]["consumer_group"] == group
    assert (sinks[1]["consumer_group/east"], sinks[1]["consumer_group/west"]) == ("committed", "committed")
    assert committed_lag(east, group, east_topic, 2) == 0
    assert committed_lag(west, group, west_topic, 1) == 0


def committed_lag(bootstrap: str, group: str, topic: str, partitions: int) -> int:
    """The group's lag on a topic as `kafka-consumer-groups --describe` computes it: latest minus committed."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])
    answer = admin.list_consumer_group_offsets([request])[group].result(timeout=30)
    committed = {tp.partition: tp.offset for tp in answer.topic_partitions}
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{group}-probe"})
    try:
        latest = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)}
    finally:
        consumer.close()
    assert all(committed[p] >= 0 for p in range(partitions)), committed  # -1001: nothing committed
    return sum(latest[p] - committed[p] for p in range(partitions))


def test_a_run_worker_killed_mid_run_is_failed_and_the_next_daemon_launched_run_recovers_exactly(
    deployment: Deployment, deployment_project: Project, layout: Layout
) -> None:
    project = deployment_project
    east = project.clusters["east"]
    topic = unique_topic("crashing")
    create_topic(east, topic, partitions=2)
    layout.set("crashing", {"east": [topic]})
    produced = produce("east", east, topic, [Record(i % 2, f"crash-{i}") for i in range(6)])
    store = StateStore(project.root / "data" / f"{CRASH}_state", CRASH)
    job = incremental_job_name(CRASH)
    started = time.monotonic()

    # The run is launched through GraphQL; the run queue's daemon starts it in a process of its own.
    crashed = deployment.launch_run(job)
    pid = deployment.worker_pid(crashed)
    assert pid not in {p.pid for p in deployment.processes.values()}
    # Killed once the plan is in the state, before its offsets are committed: the window is the Spark job.
    deadline = time.monotonic() + 300
    while (last := store.load().last_run) is None or last.status != "planned":
        assert time.monotonic() < deadline, "the run never wrote its plan"
        assert deployment.run(crashed)["status"] not in ("SUCCESS", "FAILURE"), deployment.run_messages(crashed)
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    # The code server sees its child gone and fails the run, which frees the pipeline's slot in the run queue.
    deployment.wait_for_run(crashed, "FAILURE")
    assert store.load().last_run.status == "planned"  # type: ignore[union-attr]
    messages = " ".join(e.get("message") or "" for e in deployment.run_messages(crashed))
    assert f"Run execution process for {crashed} was terminated by signal 9 (SIGKILL)" in messages

    recovered = deployment.launch_run(job)
    deployment.wait_for_run(recovered)
    deployment.timings["crash_and_recovery_s"] = time.monotonic() - started

    rows: list[Landed] = sink_rows(project.sink_path(CRASH))
    assert len(rows) == len(set(rows))
    assert sorted(rows) == sorted(produced)
    sink, dead_letter = deployment.materializations(recovered)
    assert (sink["asset"], dead_letter["asset"]) == (
        ["dynamic_kafka", CRASH],
        ["dynamic_kafka", f"{CRASH}_dead_letter"],
    )
    assert sink["metadata"]["recovered_run_seq"] == 1
    warnings = [e["message"] for e in deployment.run_messages(recovered) if e.get("level") == "WARNING"]
    assert any("left planned by an earlier crash" in w for w in warnings), warnings
    assert store.load().last_run.status == "committed"  # type: ignore[union-attr]


def test_a_three_partition_backfill_is_one_run_and_the_partition_view_shows_the_windows_filled(
    deployment: Deployment, deployment_project: Project, layout: Layout
) -> None:
    project = deployment_project
    east = project.clusters["east"]
    topic = unique_topic("history")
    create_topic(east, topic, partitions=2)
    layout.set("history", {"east": [topic]})

    def at(moment: datetime, partition: int, value: str) -> Record:
        return Record(partition, value, timestamp_ms=int(moment.timestamp() * 1000))

    minute = timedelta(minutes=1)
    inside = [at(HOUR + i * H + 7 * minute, i % 2, f"h{i}") for i in range(3)]
    outside = [at(HOUR - minute, 0, "before"), at(HOUR + 3 * H, 1, "after")]
    produced = produce("east", east, topic, inside + outside)
    keys = [(HOUR + i * H).strftime("%Y-%m-%d-%H:%M") for i in range(3)]
    asset = DynamicKafkaTranslator().backfill_asset_key(BACKFILL).path
    started = time.monotonic()

    backfill_id = deployment.launch_asset_backfill(asset, keys)
    deadline = time.monotonic() + 600
    while not (runs := deployment.runs_tagged("dagster/backfill", backfill_id)):
        assert time.monotonic() < deadline, "the backfill daemon submitted no run"
        time.sleep(1)
    (run,) = runs  # one run for three partitions (BackfillPolicy.single_run)
    deployment.wait_for_run(run["runId"])
    deployment.timings["backfill_s"] = time.monotonic() - started

    tags = tags_of(run)
    assert (tags["dagster/asset_partition_range_start"], tags["dagster/asset_partition_range_end"]) == (
        keys[0],
        keys[2],
    )
    assert [r["runId"] for r in deployment.runs_tagged("dagster/backfill", backfill_id)] == [run["runId"]]
    assert sorted(sink_rows(project.sink_path(BACKFILL))) == sorted(r for r in produced if r.value.startswith("h"))
    assert deployment.materialized_ranges(asset) == [(keys[0], keys[2])]
    materializations = deployment.materializations(run["runId"])
    assert sorted(m["partition"] for m in materializations) == keys
    assert materializations[0]["metadata"]["windows"] == 1  # one contiguous window: one plan, one Spark job
    assert materializations[0]["metadata"]["records"] == 3


def test_the_ui_renders_the_sinks_metadata_its_plots_and_the_backfilled_partitions(
    deployment: Deployment, tmp_path: Path
) -> None:
    """The webserver's pages as a browser renders them, on the runs the migration and backfill tests above made
    (run this test with them: it reads their runs)."""
    base = f"http://127.0.0.1:{deployment.port}"
    keys = [(HOUR + i * H).strftime("%Y-%m-%d-%H:%M") for i in range(3)]
    translator = DynamicKafkaTranslator()
    sink = translator.asset_key(MIGRATION).path
    started = time.monotonic()
    # The pages and waits of the docs' screenshots (devtools.testing.dagster_ui): a UI change that breaks them
    # fails here.
    with HeadlessChromium(tmp_path / "chromium") as browser:
        # The sink's page: its name, its stream upstream, and the last run's metadata table.
        shown = browser.open(
            asset_url(base, sink),
            wait_for=[MIGRATION, "kafka / migrating", "Metadata", "records/west", "consumer_group/west"],
        )
        assert "records/north" not in shown  # the page shows the labels it has, not any label asked for

        # Its metadata over the three runs, plotted: one chart per numeric label, the earlier runs' labels too (the
        # charts draw on canvases, so the check counts canvases with painted pixels).
        plotted = ["records/east", "records/west", "dagster/row_count", "lag/west"]
        shown = show_metadata_plots(browser, plotted, charts=4)
        assert "consumer_group/west" not in shown  # a text label has no plot

        # The backfill asset's partitions: the three backfilled hours materialized, the others missing.
        open_partitions(browser, base, translator.backfill_asset_key(BACKFILL).path, ["Materialized (3)", *keys])

        # A stream and the assets it feeds, each node with its status (the docs' lineage picture): a materialized
        # sink, and a partitioned backfill asset.
        open_lineage(browser, base, translator.stream_asset_key("migrating").path, [MIGRATION], ["Materialized"])
        backfill = translator.backfill_asset_key(BACKFILL).path
        open_lineage(browser, base, translator.stream_asset_key("history").path, [backfill[-1]], ["filled"])
    deployment.timings["ui_s"] = time.monotonic() - started
