"""The Airflow layer's own logic, without a scheduler or a broker: errors to Airflow outcomes, the DAGs a config
builds, the reference forms, and the metadata-change trigger over a file metadata service.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from airflow.sdk.exceptions import AirflowException, AirflowFailException
from airflow.timetables.interval import CronDataIntervalTimetable

from dynamic_kafka import ConfigError, DynamicKafkaError, WatchCursor, load_project_config
from dynamic_kafka.airflow import SPARK_POOL, MetadataChangeTrigger, build_dags
from dynamic_kafka.airflow.errors import airflow_errors
from dynamic_kafka.airflow.secrets import airflow_references, resolve_reference
from dynamic_kafka.storage import delta_rs_storage_options, spark_s3a_conf

if TYPE_CHECKING:
    from pathlib import Path


class RetriableError(DynamicKafkaError):
    retriable = True


def test_a_retriable_error_is_left_to_the_task_retries_and_any_other_fails_without_them() -> None:
    with pytest.raises(AirflowException) as retried, airflow_errors("orders"):
        raise RetriableError("cluster 'east' unreachable", hint="Check the brokers.")
    assert not isinstance(retried.value, AirflowFailException)
    assert str(retried.value) == "pipeline 'orders': RetriableError: cluster 'east' unreachable Check the brokers."

    with (
        pytest.raises(AirflowFailException, match="pipeline 'orders': ConfigError: bad key") as failed,
        airflow_errors("orders"),
    ):
        raise ConfigError("bad key")
    assert isinstance(failed.value.__cause__, ConfigError)


def test_an_os_error_fails_the_task_as_a_host_error_naming_the_path_and_a_reset_connection_is_retried() -> None:
    with (
        pytest.raises(AirflowFailException, match=r"HostError: .*'/proc/dynamic-kafka'") as failed,
        airflow_errors("orders"),
    ):
        raise FileNotFoundError(2, "No such file or directory", "/proc/dynamic-kafka")
    assert isinstance(failed.value.__cause__, FileNotFoundError)

    with pytest.raises(AirflowException) as retried, airflow_errors("orders"):
        raise ConnectionResetError(104, "Connection reset by peer")
    assert not isinstance(retried.value, AirflowFailException)


def write_project(
    root: Path, *, interval: int = 30, orchestration: dict[str, Any] | None = None, **settings: Any
) -> Path:
    (root / "metadata.yaml").write_text(
        yaml.safe_dump(
            {"clusters": {"east": {"bootstrap_servers": "127.0.0.1:1"}}, "streams": {"orders": {"east": ["orders"]}}}
        )
    )
    pipeline = {
        "id": "orders",
        "streams": ["orders"],
        "sink": {"path": "data/orders"},
        "orchestration": {"sensor": {"interval_seconds": interval}, **(orchestration or {})},
        **settings,
    }
    config = {"metadata_service": {"type": "file", "path": "metadata.yaml"}, "pipelines": [pipeline]}
    (root / "dynamic_kafka.yaml").write_text(yaml.safe_dump(config))
    return root / "dynamic_kafka.yaml"


def test_the_factory_builds_the_dags_of_a_pipeline_with_one_run_at_a_time(tmp_path: Path) -> None:
    path = write_project(
        tmp_path,
        orchestration={
            "schedule": "*/10 * * * *",
            "backfill": {"start": "2026-01-01T00:00:00Z", "granularity": "daily"},
        },
        health={"schedule": "0 * * * *"},
    )

    dags = build_dags(path)

    assert sorted(dags) == ["orders", "orders_backfill", "orders_health", "orders_offsets", "orders_watch"]
    assert all(d.max_active_runs == 1 and not d.catchup for d in dags.values())
    run = dags["orders"]
    assert [t.task_id for t in run.topological_sort()] == ["run", "checks"]
    assert run.schedule == "*/10 * * * *"
    assert run.get_task("run").pool == SPARK_POOL
    assert {(a.name, a.uri) for a in run.get_task("run").outlets} == {
        ("dynamic_kafka/orders/sink", (tmp_path / "data" / "orders").as_uri()),
        ("dynamic_kafka/orders/dead_letters", (tmp_path / "data" / "orders_dead_letter").as_uri()),
    }
    backfill = dags["orders_backfill"]
    assert isinstance(backfill.timetable, CronDataIntervalTimetable)
    assert backfill.timetable.summary == "0 0 * * *"
    assert backfill.start_date == datetime(2026, 1, 1, tzinfo=UTC)
    assert backfill.get_task("backfill").pool == SPARK_POOL
    assert dags["orders_health"].schedule == "0 * * * *"
    assert dags["orders_watch"].is_paused_upon_creation
    # The config's path is absolute in every task, whatever the DAG file passed.
    assert run.get_task("run").config_path == str(path.resolve())


@pytest.mark.parametrize("name", ["conn/", "vault/x", "conn/kafka/secret_key"])
def test_a_reference_of_no_known_form_is_a_config_error_that_shows_the_forms(name: str) -> None:
    with pytest.raises(ConfigError, match=r"\$\{airflow:"):
        resolve_reference(name)


def test_the_trigger_fires_at_once_without_a_cursor_then_on_a_metadata_change(tmp_path: Path) -> None:
    path = write_project(tmp_path, interval=1)
    trigger = MetadataChangeTrigger(config_path=str(path), pipeline_id="orders")
    classpath, kwargs = trigger.serialize()
    assert classpath == "dynamic_kafka.airflow.triggers.MetadataChangeTrigger"

    (first,) = asyncio.run(events(MetadataChangeTrigger(**kwargs)))
    cursor = WatchCursor.model_validate_json(first["cursor"])
    assert cursor.changes == 1
    assert first["run_key"] == f"{cursor.fingerprint}#1"

    async def change_then_watch() -> list[dict[str, Any]]:
        watching = asyncio.ensure_future(events(MetadataChangeTrigger(**{**kwargs, "cursor": first["cursor"]})))
        await asyncio.sleep(1.5)
        assert not watching.done()  # the metadata is unchanged: no event
        (tmp_path / "metadata.yaml").write_text(
            yaml.safe_dump(
                {
                    "clusters": {"east": {"bootstrap_servers": "127.0.0.1:1"}},
                    "streams": {"orders": {"east": ["orders", "orders-v2"]}},
                }
            )
        )
        return await asyncio.wait_for(watching, timeout=30)

    (second,) = asyncio.run(change_then_watch())
    assert WatchCursor.model_validate_json(second["cursor"]).changes == 2
    assert second["run_key"] != first["run_key"]


async def events(trigger: MetadataChangeTrigger) -> list[dict[str, Any]]:
    return [event.payload async for event in trigger.run()]


def test_storage_credentials_come_from_an_airflow_connection_and_variable_only_inside_a_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Airflow's own secrets backend: connections and variables from AIRFLOW_CONN_* / AIRFLOW_VAR_*.
    monkeypatch.setenv("AIRFLOW_CONN_LAKE", '{"conn_type": "aws", "login": "AKIA-lake-id", "password": "lake-key-1"}')
    monkeypatch.setenv("AIRFLOW_VAR_LAKE_TOKEN", "lake-session-token")
    storage = {
        "endpoint": "http://127.0.0.1:9000",
        "access_key_id": "${airflow:conn/lake/login}",
        "secret_access_key": "${airflow:conn/lake}",
        "session_token": "${airflow:var/lake_token}",
    }
    path = write_project(tmp_path, storage=storage)
    (pipeline,) = load_project_config(path).pipelines
    assert pipeline.storage is not None
    # Loading keeps the references: the model, its dump and its errors never hold the values.
    assert pipeline.storage.secret_access_key is not None
    assert pipeline.storage.secret_access_key.get_secret_value() == "${airflow:conn/lake}"

    with airflow_references():
        options = delta_rs_storage_options(pipeline.storage)
        spark = spark_s3a_conf(pipeline.storage)
    assert (options["AWS_ACCESS_KEY_ID"], options["AWS_SECRET_ACCESS_KEY"], options["AWS_SESSION_TOKEN"]) == (
        "AKIA-lake-id",
        "lake-key-1",
        "lake-session-token",
    )
    assert {"AKIA-lake-id", "lake-key-1", "lake-session-token"} <= set(spark.values())
    # Outside a task of the integration nothing resolves them.
    assert delta_rs_storage_options(pipeline.storage)["AWS_SECRET_ACCESS_KEY"] == "${airflow:conn/lake}"
