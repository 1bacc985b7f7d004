"""The incremental job, executed in process against real clusters, Spark and Delta."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest
from dagster import (
    AssetCheckSeverity,
    DagsterEventType,
    DagsterInstance,
    ExecuteInProcessResult,
    RunRequest,
    SkipReason,
    build_run_status_sensor_context,
)

from tests.support.e2e import Landed, Project, Record, create_topic, produce, sink_rows, unique_topic

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.e2e


def materialization(result: ExecuteInProcessResult, table: str = "") -> dict[str, Any]:
    """The metadata of the run's sink materialization (or of the table whose key ends in ``table``)."""
    events = result.get_asset_materialization_events()
    (event,) = [
        e
        for e in events
        if e.materialization.asset_key.path[-1].endswith(table or "")
        and (table or not e.materialization.asset_key.path[-1].endswith("_dead_letter"))
    ]
    return {k: v.value for k, v in event.materialization.metadata.items()}


def check(result: ExecuteInProcessResult, name: str = "lag") -> Any:
    (found,) = [c for c in result.get_asset_check_evaluations() if c.check_name == name]
    return found


def topics_table(metadata: dict[str, Any]) -> dict[tuple[str, str], tuple[int, int]]:
    return {
        (r.data["cluster_id"], r.data["topic"]): (r.data["records"], r.data["bytes"])
        for r in metadata["topics"].records
    }


def value_bytes(landed: list[Landed]) -> int:
    return sum(len(r.value.encode()) for r in landed)


def test_incremental_job_lands_every_record_once_and_reports_it(
    project: Project, kafka_clusters: Any, spark: Any, instance: DagsterInstance
) -> None:
    east, west = project.clusters["east"], project.clusters["west"]
    east_topic, west_topic = unique_topic("orders-east"), unique_topic("orders-west")
    create_topic(east, east_topic, partitions=2)
    create_topic(west, west_topic, partitions=1)
    project.write_metadata({"orders": {"east": [east_topic], "west": [west_topic]}})
    project.add_pipeline("orders", ["orders"], max_lag_records=100)
    before = datetime.now(UTC) - timedelta(seconds=1)
    east_1 = produce("east", east, east_topic, [Record(i % 2, f"east-{i}") for i in range(5)])
    west_1 = produce("west", west, west_topic, [Record(0, f"west-{i}") for i in range(3)])
    job = project.definitions().resolve_job_def("orders_incremental")

    first = job.execute_in_process(instance=instance)

    assert first.success
    assert sorted(sink_rows(project.sink_path("orders"))) == sorted(east_1 + west_1)
    meta = materialization(first)
    assert meta["run_seq"] == 1
    assert meta["status"] == "committed"
    assert meta["records"] == 8
    assert meta["bytes"] == value_bytes(east_1 + west_1)
    assert topics_table(meta) == {
        ("east", east_topic): (5, value_bytes(east_1)),
        ("west", west_topic): (3, value_bytes(west_1)),
    }
    assert meta["cluster_count"] == 2
    assert meta["clusters"] == "east, west"
    assert meta["lag_after"] == 0
    assert meta["capped"] is False
    assert meta["spark_started"] is True
    assert isinstance(meta["sink_version"], int)
    assert before.timestamp() <= meta["min_event_time"] <= meta["max_event_time"] <= datetime.now(UTC).timestamp()
    assert meta["event_time_lag_seconds"] >= 0
    assert meta["warnings"] == []
    # What the UI shows: Dagster's standard table keys, the Delta version as data version, per-cluster numbers
    # (plotted over runs) and per-partition offsets.
    assert meta["dagster/row_count"] == 8
    assert meta["dagster/uri"] == project.sink_path("orders").as_uri()
    columns = {c.name: c.type for c in meta["dagster/column_schema"].columns}
    assert {k: columns[k] for k in ("cluster", "topic", "partition", "offset")} == {
        "cluster": "string",
        "topic": "string",
        "partition": "int",
        "offset": "bigint",
    }
    assert (meta["records/east"], meta["records/west"], meta["lag/east"], meta["lag/west"]) == (5, 3, 0, 0)
    assert meta["delta_version"] == meta["sink_version"]
    assert {"plan_seconds", "spark_seconds", "commit_seconds"} <= set(meta)
    offsets = {(r.data["cluster_id"], r.data["partition"]): r.data["next_offset"] for r in meta["offsets"].records}
    assert offsets == {("east", 0): 3, ("east", 1): 2, ("west", 0): 3}
    (sink_event,) = [
        e for e in first.get_asset_materialization_events() if e.materialization.asset_key.path[-1] == "orders"
    ]
    assert sink_event.materialization.tags["dagster/data_version"] == str(meta["sink_version"])
    assert materialization(first, "_dead_letter")["dead_letters"] == 0
    assert {c.check_name: c.passed for c in first.get_asset_check_evaluations()} == {
        "lag": True,
        "data_loss": True,
        "dead_letters": True,
        "completeness": True,
    }
    assert check(first).metadata["total_lag"].value == 0
    # Every record of the run's 3 ranges read and landed, none skipped by Kafka.
    complete = check(first, "completeness")
    assert complete.severity == AssetCheckSeverity.ERROR
    counts = {k: complete.metadata[k].value for k in ("planned", "read", "landed", "deduplicated", "skipped_by_kafka")}
    assert counts == {"planned": 8, "read": 8, "landed": 8, "deduplicated": 0, "skipped_by_kafka": 0}
    assert complete.metadata["mismatched_partitions"].value == "none"
    assert {
        (r.data["cluster_id"], r.data["partition"], r.data["read"]) for r in complete.metadata["partitions"].records
    } == {
        ("east", 0, 3),
        ("east", 1, 2),
        ("west", 0, 3),
    }

    east_2 = produce("east", east, east_topic, [Record(1, "east-5"), Record(0, "east-6")])
    second = job.execute_in_process(instance=instance)

    assert second.success
    assert sorted(sink_rows(project.sink_path("orders"))) == sorted(east_1 + west_1 + east_2)
    meta = materialization(second)
    assert (meta["run_seq"], meta["records"]) == (2, 2)
    assert topics_table(meta) == {("east", east_topic): (2, value_bytes(east_2))}
    assert meta["sink_version"] > materialization(first)["sink_version"]

    third = job.execute_in_process(instance=instance)

    assert third.success
    meta = materialization(third)
    assert (meta["run_seq"], meta["status"], meta["records"], meta["spark_started"]) == (3, "empty", 0, False)
    assert "sink_version" not in meta
    assert meta["dagster/row_count"] == 10
    assert len(sink_rows(project.sink_path("orders"))) == 10


def run_success_context(instance: DagsterInstance, run_id: str, sensor_name: str) -> Any:
    (record,) = instance.get_records_for_run(run_id=run_id, of_type=DagsterEventType.RUN_SUCCESS).records
    run = instance.get_run_by_id(run_id)
    assert run is not None
    assert record.event_log_entry.dagster_event is not None
    return build_run_status_sensor_context(
        sensor_name=sensor_name,
        dagster_event=record.event_log_entry.dagster_event,
        dagster_instance=instance,
        dagster_run=run,
    )


def test_capped_run_fails_the_lag_check_and_the_catch_up_sensor_runs_again(
    project: Project, kafka_clusters: Any, spark: Any, instance: DagsterInstance
) -> None:
    east = project.clusters["east"]
    topic = unique_topic("capped")
    create_topic(east, topic, partitions=1)
    project.write_metadata({"events": {"east": [topic]}})
    project.add_pipeline("capped-events", ["events"], max_records_per_run=3, max_lag_records=1)
    produced = produce("east", east, topic, [Record(0, f"event-{i}") for i in range(5)])
    defs = project.definitions()
    job = defs.resolve_job_def("capped_events_incremental")
    catch_up = defs.resolve_sensor_def("capped_events_catch_up_sensor")

    first = job.execute_in_process(instance=instance)

    meta = materialization(first)
    assert (meta["records"], meta["capped"], meta["lag_after"]) == (3, True, 2)
    assert sorted(sink_rows(project.sink_path("capped-events"))) == produced[:3]
    lag = check(first)
    assert not lag.passed
    assert lag.severity.value == "WARN"
    assert lag.metadata["total_lag"].value == 2
    assert "exceeds max_lag_records 1" in (lag.description or "")
    assert check(first, "data_loss").passed

    request = catch_up(run_success_context(instance, first.run_id, catch_up.name))

    assert isinstance(request, RunRequest)
    assert request.run_key == f"catch-up:{first.run_id}"
    second = job.execute_in_process(instance=instance, tags=request.tags)

    meta = materialization(second)
    assert (meta["records"], meta["capped"], meta["lag_after"]) == (2, False, 0)
    assert sorted(sink_rows(project.sink_path("capped-events"))) == produced
    assert check(second).passed
    assert isinstance(catch_up(run_success_context(instance, second.run_id, catch_up.name)), SkipReason)


def test_lag_check_does_not_pass_while_a_cluster_is_unreachable(
    tmp_path: Path, kafka_clusters: Any, spark: Any, instance: DagsterInstance
) -> None:
    # "gone" is in the metadata, but nothing listens there: its lag is unknown, which must not read as zero.
    project = Project(root=tmp_path, clusters={"east": kafka_clusters["east"].bootstrap_servers, "gone": "127.0.0.1:1"})
    east = project.clusters["east"]
    topic = unique_topic("partly-gone")
    create_topic(east, topic, partitions=1)
    project.write_metadata({"events": {"east": [topic], "gone": [topic]}})
    # A short deadline for the calls to "gone": the check's verdict, not the wait, is under test.
    project.add_pipeline(
        "events", ["events"], max_lag_records=100, skip_unreachable_clusters=True, kafka_timeout_seconds=2
    )
    produced = produce("east", east, topic, [Record(0, f"event-{i}") for i in range(3)])

    result = project.definitions().resolve_job_def("events_incremental").execute_in_process(instance=instance)

    assert result.success
    assert sorted(sink_rows(project.sink_path("events"))) == produced
    lag = check(result)
    assert not lag.passed
    assert lag.metadata["total_lag"].value == 0
    assert lag.metadata["lag_unknown_clusters"].value == "gone"
    assert "lag unknown on cluster(s) gone" in (lag.description or "")


def test_a_table_per_stream_is_one_dynamic_partition_per_stream_added_by_the_run_that_lands_it(
    project: Project, kafka_clusters: Any, spark: Any, instance: DagsterInstance
) -> None:
    from dynamic_kafka.dagster.names import stream_partitions_name
    from dynamic_kafka.dagster.translator import DynamicKafkaTranslator
    from dynamic_kafka.sink.tables import open_delta_rs

    east = project.clusters["east"]
    eu, us = unique_topic("orders-eu"), unique_topic("orders-us")
    create_topic(east, eu, partitions=1)
    create_topic(east, us, partitions=1)
    project.write_metadata({"orders-eu": {"east": [eu]}})
    project.add_pipeline("regional", ["orders-eu"], sink={"path": "data/{stream}"}, max_lag_records=1)
    project.pipelines[-1].update(streams=None, stream_pattern="orders-.*")  # every stream the metadata names
    project.write_config()
    defs = project.definitions()
    key = DynamicKafkaTranslator().stream_tables_asset_key("regional")
    (node,) = [n for n in defs.resolve_asset_graph().asset_nodes if n.key == key]
    assert node.partitions_def is not None
    assert node.partitions_def.name == stream_partitions_name("regional")  # type: ignore[attr-defined]
    job = defs.resolve_job_def("regional_incremental")
    produce("east", east, eu, [Record(0, f"eu-{i}") for i in range(3)])

    first = job.execute_in_process(instance=instance)

    assert first.success
    assert instance.get_dynamic_partitions(stream_partitions_name("regional")) == ["orders-eu"]
    # The second stream appears: the run that lands it adds its partition.
    project.write_metadata({"orders-eu": {"east": [eu]}, "orders-us": {"east": [us]}})
    produce("east", east, us, [Record(0, f"us-{i}") for i in range(2)])
    second = job.execute_in_process(instance=instance)

    assert second.success
    assert sorted(instance.get_dynamic_partitions(stream_partitions_name("regional"))) == ["orders-eu", "orders-us"]
    events = second.get_asset_materialization_events()
    per_stream = {
        e.materialization.partition: {k: v.value for k, v in e.materialization.metadata.items()}
        for e in events
        if e.materialization.asset_key == key
    }
    assert list(per_stream) == ["orders-us"]  # orders-eu had nothing new: no commit, no materialization
    assert per_stream["orders-us"]["records"] == 2
    assert per_stream["orders-us"]["run_seq"] == 2
    for stream, count in (("orders-eu", 3), ("orders-us", 2)):
        table = open_delta_rs(str(project.root / "data" / stream), doing="reading a stream table")
        assert table is not None
        assert table.to_pyarrow_table(columns=["offset"]).num_rows == count

    # Each stream's table has its own checks, one evaluation per partition: orders-eu is 2 records behind.
    produce("east", east, eu, [Record(0, f"eu-{i}") for i in range(3, 5)])
    checks = defs.resolve_job_def("regional_table_checks")
    verdicts = {}
    for stream in ("orders-eu", "orders-us"):
        evaluated = checks.execute_in_process(instance=instance, tags={"dagster/partition": stream})
        verdicts[stream] = {c.check_name: c for c in evaluated.get_asset_check_evaluations()}
        assert {(c.asset_key, c.partition) for c in verdicts[stream].values()} == {(key, stream)}
    assert (verdicts["orders-eu"]["lag"].passed, verdicts["orders-us"]["lag"].passed) == (False, True)
    assert verdicts["orders-eu"]["lag"].metadata["total_lag"].value == 2
    assert all(verdicts[s][name].passed for s in verdicts for name in ("data_loss", "dead_letters"))
