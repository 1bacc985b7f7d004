"""Definitions shape, loading without side effects, and the one error mapping."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest
import yaml
from dagster import (
    AssetKey,
    BackfillPolicy,
    DagsterInstance,
    DefaultScheduleStatus,
    DefaultSensorStatus,
    Failure,
    RetryRequested,
    TimeWindowPartitionsDefinition,
)

from dynamic_kafka.dagster.build import build_definitions
from dynamic_kafka.dagster.errors import MAX_RETRIES, to_dagster
from dynamic_kafka.errors import (
    ConfigError,
    DataLossError,
    DynamicKafkaError,
    RunInProgressError,
    SchemaIncompatibleError,
    SchemaMismatchError,
    StateBehindSinkError,
    UndecodableRecordError,
    UnknownSchemaError,
)
from dynamic_kafka.model.plan import LostRange
from tests.support.e2e import REPO_ROOT, Project

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.e2e


def test_every_pipeline_gets_its_asset_jobs_schedule_and_sensors(project: Project) -> None:
    project.write_metadata({"orders": {"east": ["orders"]}, "payments": {"west": ["payments"]}})
    project.add_pipeline(
        "orders",
        ["orders"],
        schedule="*/15 * * * *",
        backfill={"start": "2026-01-01T00:00:00Z", "granularity": "hourly"},
    )
    project.add_pipeline(
        "pay-ments", ["payments"], orchestration={"backfill": {"start": "2026-01-01T00:00:00Z", "granularity": "daily"}}
    )
    project.add_pipeline("plain", ["orders"])

    repo = project.definitions().get_repository_def()

    graph = repo.asset_graph
    tables = {AssetKey(["dynamic_kafka", p]) for p in ("orders", "pay-ments", "plain")}
    dead_letters = {AssetKey(["dynamic_kafka", f"{p}_dead_letter"]) for p in ("orders", "pay-ments", "plain")}
    backfills = {AssetKey(["dynamic_kafka", f"{p}_backfill"]) for p in ("orders", "pay-ments")}
    streams = {AssetKey(["kafka", "orders"]), AssetKey(["kafka", "payments"])}
    assert set(graph.get_all_asset_keys()) == tables | dead_letters | backfills | streams
    assert graph.get(AssetKey(["dynamic_kafka", "pay-ments"])).parent_keys == {AssetKey(["kafka", "payments"])}
    assert graph.get(AssetKey(["dynamic_kafka", "orders_backfill"])).parent_keys == {AssetKey(["kafka", "orders"])}
    assert all(not graph.get(k).is_materializable for k in streams)  # external: Dagster shows, never runs them
    assert {(k.asset_key.path[-1], k.name) for k in graph.asset_check_keys} == {
        (p, check)
        for p in ("orders", "pay-ments", "plain")
        for check in (
            "lag",
            "data_loss",
            "dead_letters",
            "completeness",
            "idle_partitions",
            "stuck_transactions",
            "event_time_lag",
        )
    }
    jobs = {j.name for j in repo.get_all_jobs() if not j.name.startswith("__")}
    assert jobs == {
        "orders_incremental",
        "orders_backfill",
        "pay_ments_incremental",
        "pay_ments_backfill",
        "plain_incremental",
    } | {
        f"{p}_{op}"
        for p in ("orders", "pay_ments", "plain")
        for op in ("offsets_show", "offsets_reset", "dead_letter_replay", "maintenance", "health")
    }
    assert {s.name: s.cron_schedule for s in repo.schedule_defs} == {
        "orders_schedule": "*/15 * * * *",
        **{f"{p}_health_schedule": "*/15 * * * *" for p in ("orders", "pay_ments", "plain")},
    }
    assert {s.name for s in repo.sensor_defs} == {
        f"{p}_{kind}_sensor" for p in ("orders", "pay_ments", "plain") for kind in ("metadata", "catch_up")
    }
    hourly = repo.get_job("orders_backfill").partitions_def
    daily = repo.get_job("pay_ments_backfill").partitions_def
    assert isinstance(hourly, TimeWindowPartitionsDefinition)
    assert isinstance(daily, TimeWindowPartitionsDefinition)
    assert hourly.get_first_partition_key() == "2026-01-01-00:00"
    assert daily.get_first_partition_key() == "2026-01-01"
    incremental = repo.get_job("orders_incremental")
    assert incremental.tags["dynamic_kafka/pipeline"] == "orders"
    assert set().union(*(n.definition.pools for n in incremental.graph.node_dict.values())) == {"dynamic_kafka/orders"}
    (backfill_node,) = repo.get_job("orders_backfill").graph.node_dict.values()
    assert backfill_node.definition.pools == {"dynamic_kafka/orders"}
    assert graph.get(AssetKey(["dynamic_kafka", "orders_backfill"])).backfill_policy == BackfillPolicy.single_run()


def test_a_table_per_stream_gets_per_partition_checks_of_its_tables_a_job_for_them_and_its_backfill_windows(
    project: Project,
) -> None:
    project.write_metadata({"orders-eu": {"east": ["orders-eu"]}})
    project.add_pipeline(
        "regional", ["orders-eu"], sink={"path": "data/{stream}"}, backfill={"start": "2026-01-01T00:00:00Z"}
    )

    repo = project.definitions().get_repository_def()

    graph = repo.asset_graph
    tables = AssetKey(["dynamic_kafka", "regional_tables"])
    assert {AssetKey(["dynamic_kafka", "regional_backfill"]), tables} <= set(graph.get_all_asset_keys())
    table_checks = {k for k in graph.asset_check_keys if k.asset_key == tables}
    assert {k.name for k in table_checks} == {"lag", "data_loss", "dead_letters"}
    partitions = graph.get(tables).partitions_def
    assert {graph.get_check_spec(k).partitions_def for k in table_checks} == {partitions}
    assert {"regional_table_checks", "regional_backfill"} <= {j.name for j in repo.get_all_jobs()}
    assert repo.get_job("regional_table_checks").asset_layer.asset_graph.asset_check_keys == table_checks


def test_the_demo_instance_runs_one_run_per_pipeline_and_at_most_8_per_server_at_a_time(tmp_path: Path) -> None:
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text((REPO_ROOT / "examples/demo/dagster.yaml").read_text())
    defs = build_definitions(REPO_ROOT / "examples/demo/dynamic_kafka.yaml")

    with DagsterInstance.from_config(str(home)) as instance:
        settings = instance.get_concurrency_config().pool_config
        assert settings.pool_granularity is not None
        assert settings.pool_granularity.value == "run"  # the run queue holds a run until its pool has a slot
        assert settings.default_pool_limit == 1
        per_pipeline, per_server = instance.get_concurrency_config().run_queue_config.tag_concurrency_limits
        assert per_pipeline == {
            "key": "dynamic_kafka/pipeline",
            "value": {"applyLimitPerUniqueValue": True},
            "limit": 1,
        }
        assert per_server == {"key": "dynamic_kafka/pipeline", "limit": 8}  # every pipeline's runs: one server
        for name in ("orders_incremental", "orders_backfill"):
            job = defs.resolve_job_def(name)
            assert job.run_tags["dynamic_kafka/pipeline"] == "orders"  # what the run queue's tag limit counts
            run = instance.create_run_for_job(job_def=job)
            assert run.run_op_concurrency is not None
            assert run.run_op_concurrency.all_pools == {"dynamic_kafka/orders"}
        assert instance.event_log_storage.get_concurrency_info("dynamic_kafka/orders").limit == 1


def test_the_concurrency_settings_the_docs_show_are_the_demo_instance_s() -> None:
    page = (REPO_ROOT / "docs" / "spark-clusters.md").read_text()
    section = page.split("## Many pipelines on one server", 1)[1]
    shown = yaml.safe_load(section.split("```yaml", 1)[1].split("```", 1)[0])
    demo = yaml.safe_load((REPO_ROOT / "examples/demo/dagster.yaml").read_text())

    assert shown == {"concurrency": demo["concurrency"]}


def test_loading_definitions_reads_only_the_config_file(project: Project) -> None:
    # The metadata file does not exist and its clusters would be unreachable: loading must not care, and must not
    # import pyspark (let alone start a JVM).
    project.add_pipeline("orders", ["orders"], orchestration={"schedule": "0 * * * *"})
    env = {**os.environ, "DYNAMIC_KAFKA_CONFIG": str(project.config_path)}
    code = (
        "import sys; from pipelines.definitions import defs; "
        "defs.get_repository_def(); "
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in {'pyspark', 'delta', 'py4j'}); "
        "assert not loaded, loaded; print('ok')"
    )

    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO_ROOT, capture_output=True, text=True)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_a_bad_schedule_fails_loading_with_the_pipeline_and_file_named(project: Project) -> None:
    project.add_pipeline("orders", ["orders"], orchestration={"schedule": "every hour"})

    not_cron = r"pipeline 'orders': orchestration\.schedule 'every hour' is not a valid cron"
    with pytest.raises(ConfigError, match=not_cron) as caught:
        project.definitions()

    assert caught.value.source == str(project.config_path)


def test_retriable_errors_become_bounded_retries_and_others_failures_with_metadata() -> None:
    retry = to_dagster(RunInProgressError("orders", 7), "orders")
    assert isinstance(retry, RetryRequested)
    assert retry.max_retries == MAX_RETRIES

    lost = LostRange(cluster_id="east", topic="orders", partition=0, from_offset=10, to_offset=25)
    failure = to_dagster(DataLossError([lost]), "orders")
    assert isinstance(failure, Failure)
    assert "data loss" in (failure.description or "")
    assert failure.metadata["error"].value == "DataLossError"
    assert failure.metadata["retriable"].value is False
    assert failure.metadata["lost_ranges"].value == [
        {"cluster_id": "east", "topic": "orders", "partition": 0, "from_offset": 10, "to_offset": 25}
    ]
    assert "on_data_loss: skip" in failure.metadata["hint"].value


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (
            UndecodableRecordError(cluster_id="east", topic="orders", partition=2, offset=41, reason="not JSON"),
            {"cluster_id": "east", "topic": "orders", "partition": "2", "offset": "41", "reason": "not JSON"},
        ),
        (SchemaMismatchError("p: no", columns=["value.id", "key"]), {"columns": "value.id, key"}),
        (
            SchemaIncompatibleError("orders", "v1 and v2 disagree"),
            {"stream_id": "orders", "detail": "v1 and v2 disagree"},
        ),
        (
            UnknownSchemaError(7, url="http://registry:8081"),
            {"schema_id": "7", "url": "http://registry:8081", "status": "404"},
        ),
        (
            StateBehindSinkError("orders", table="/k", sink_txn=9, state_run_seq=4, state_path="/s"),
            {"pipeline_id": "orders", "sink_txn": "9", "state_run_seq": "4"},
        ),
    ],
)
def test_every_attribute_of_a_library_error_reaches_the_failure_metadata(
    error: DynamicKafkaError, expected: dict[str, str]
) -> None:
    failure = to_dagster(error, "orders")
    assert isinstance(failure, Failure)
    assert {name: failure.metadata[name].value for name in expected if name in failure.metadata} == expected
    assert set(error.attributes()) <= set(failure.metadata)


def test_a_non_retriable_error_fails_the_run_with_failure_metadata(project: Project, instance: DagsterInstance) -> None:
    project.write_metadata({"orders": {"east": ["orders"]}})
    project.add_pipeline("orders", ["no-such-stream"])
    job = project.definitions().resolve_job_def("orders_incremental")

    result = job.execute_in_process(instance=instance, raise_on_error=False)

    assert not result.success
    (failed,) = result.get_step_failure_events()
    data = failed.step_failure_data
    assert data.user_failure_data is not None
    assert "unknown stream id(s) no-such-stream" in (data.user_failure_data.description or "")
    assert data.user_failure_data.metadata["error"].value == "UnknownStreamError"
    assert data.user_failure_data.metadata["source"].value == str(project.config_path)


def test_library_warnings_land_in_the_run_event_log_with_the_demo_instance(tmp_path: Path) -> None:
    # The library logs through Python's logging only; the demo's dagster.yaml makes Dagster capture its loggers.
    import logging

    from dagster import job, op

    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text((REPO_ROOT / "examples/demo/dagster.yaml").read_text())

    @op
    def warns() -> None:
        logging.getLogger("dynamic_kafka.protocol.run").warning("consumer group 'g': offsets not committed on 'east'")

    @job
    def library_warning() -> None:
        warns()

    with DagsterInstance.from_config(str(home)) as instance:
        assert instance.managed_python_loggers == ["dynamic_kafka"]
        result = library_warning.execute_in_process(instance=instance)
        messages = [e.user_message for e in instance.all_logs(result.run_id)]

    assert result.success
    assert any("offsets not committed on 'east'" in m for m in messages), messages


def test_the_schedule_and_metadata_sensor_start_as_the_config_says(project: Project) -> None:
    project.add_pipeline("orders", ["orders"], orchestration={"schedule": "*/15 * * * *"})
    project.add_pipeline(
        "live", ["orders"], orchestration={"schedule": "0 * * * *", "automation_default_status": "running"}
    )

    repo = project.definitions().get_repository_def()

    schedules = {s.name: s.default_status for s in repo.schedule_defs}
    sensors = {s.name: s.default_status for s in repo.sensor_defs}
    assert schedules == {
        "orders_schedule": DefaultScheduleStatus.STOPPED,
        "live_schedule": DefaultScheduleStatus.RUNNING,
        "orders_health_schedule": DefaultScheduleStatus.STOPPED,
        "live_health_schedule": DefaultScheduleStatus.RUNNING,
    }
    assert (sensors["orders_metadata_sensor"], sensors["live_metadata_sensor"]) == (
        DefaultSensorStatus.STOPPED,
        DefaultSensorStatus.RUNNING,
    )
    assert sensors["orders_catch_up_sensor"] == sensors["live_catch_up_sensor"] == DefaultSensorStatus.RUNNING
