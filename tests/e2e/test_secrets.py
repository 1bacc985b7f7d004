"""A SASL password reaches Kafka and Spark, and nothing Dagster stores or shows.

The instance keeps its storage on disk (a DAGSTER_HOME with SQLite run, event log and schedule storage), so the
test can search every byte Dagster wrote, not only what its API returns.
"""

from __future__ import annotations

import logging
import os
import uuid
from typing import TYPE_CHECKING, Any

import pytest
from dagster import AssetKey, DagsterInstance

from dynamic_kafka.config.loader import load_project_config
from dynamic_kafka.sink.tables import open_delta_rs
from tests.support.e2e import Project, Record, create_topic, produce, sasl_project, sink_rows, unique_topic

if TYPE_CHECKING:
    from pathlib import Path


# Exported by the local_s3 fixture (tests/conftest.py).
S3_KEY_ENV = "DYNAMIC_KAFKA_TEST_S3_KEY_ID"
S3_SECRET_ENV = "DYNAMIC_KAFKA_TEST_S3_SECRET"
pytestmark = pytest.mark.e2e

PASSWORD_ENV = "E2E_SECURED_KAFKA_PASSWORD"


def test_the_password_is_in_no_event_metadata_failure_or_log(
    tmp_path: Path,
    sasl_cluster: Any,
    sasl_password: str,
    spark: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    client = sasl_cluster.client_config(sasl_password)
    topic = unique_topic("secured")
    create_topic(client, topic, partitions=1)
    produced = produce("secured", client, topic, [Record(0, f"payment-{i}") for i in range(3)])
    project = sasl_project(tmp_path, sasl_cluster, f"${{env:{PASSWORD_ENV}}}")
    project.write_metadata({"payments": {"secured": [topic]}})
    project.add_pipeline("payments", ["payments"])
    job = project.definitions().resolve_job_def("payments_incremental")
    monkeypatch.setenv(PASSWORD_ENV, sasl_password)
    dagster_home = tmp_path / "dagster_home"
    dagster_home.mkdir()
    instance = DagsterInstance.local_temp(str(dagster_home))

    landed = job.execute_in_process(instance=instance)

    assert landed.success
    assert sorted(sink_rows(project.sink_path("payments"))) == produced

    wrong = "wrong-" + sasl_password[::-1]
    monkeypatch.setenv(PASSWORD_ENV, wrong)
    produce("secured", client, topic, [Record(0, "payment-3")])
    refused = job.execute_in_process(instance=instance, raise_on_error=False)

    assert not refused.success
    (failure,) = refused.get_step_failure_events()
    assert failure.step_failure_data.user_failure_data is not None
    assert failure.step_failure_data.user_failure_data.metadata["error"].value == "KafkaAuthenticationError"
    stored = "\n".join(repr(entry) for run in (landed, refused) for entry in instance.all_logs(run.run_id))
    files = {str(f): f.read_bytes() for f in dagster_home.rglob("*") if f.is_file()}
    assert any(f.endswith(".db") for f in files), sorted(files)  # the storage really is on disk
    assert any(b"payments" in data for data in files.values())  # and holds the run's events
    for secret in (sasl_password, wrong):
        assert secret not in stored
        assert secret not in caplog.text
        for name, data in files.items():
            assert secret.encode() not in data, f"the password is in Dagster's storage file {name}"
    instance.dispose()


def test_s3_keys_are_in_no_event_metadata_or_log_and_the_asset_shows_the_table_uri(
    tmp_path: Path,
    kafka_clusters: Any,
    spark: Any,
    s3_storage: dict[str, Any],
    instance: DagsterInstance,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    bootstrap = kafka_clusters["east"].bootstrap_servers
    topic = unique_topic("s3-orders")
    create_topic(bootstrap, topic, partitions=1)
    produced = produce("east", bootstrap, topic, [Record(0, f"order-{i}") for i in range(3)])
    project = Project(root=tmp_path, clusters={"east": bootstrap})
    project.write_metadata({"orders": {"east": [topic]}})
    sink = f"s3://lake/e2e-{uuid.uuid4().hex[:8]}/orders"
    project.add_pipeline("orders", ["orders"], sink={"path": sink}, storage=s3_storage)
    definitions = project.definitions()
    key = AssetKey(["dynamic_kafka", "orders"])
    asset = definitions.resolve_assets_def(key)  # the sink and its dead-letter table: one multi-asset
    assert asset.metadata_by_key[key]["dagster/uri"].value == sink

    landed = definitions.resolve_job_def("orders_incremental").execute_in_process(instance=instance)

    assert landed.success
    table = open_delta_rs(load_project_config(project.config_path).pipeline("orders").sink_table, doing="reading")
    assert table is not None
    assert table.to_pyarrow_table().num_rows == len(produced)
    stored = "\n".join(repr(entry) for entry in instance.all_logs(landed.run_id))
    for secret in (os.environ[S3_SECRET_ENV], os.environ[S3_KEY_ENV]):
        assert secret not in stored
        assert secret not in caplog.text
