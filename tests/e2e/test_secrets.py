"""A SASL password reaches Kafka and Spark, and nothing Dagster stores or shows.

The instance keeps its storage on disk (a DAGSTER_HOME with SQLite run, event log and schedule storage), so the
test can search every byte Dagster wrote, not only what its API returns.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import pytest
from dagster import DagsterInstance
from e2e_support import Project, Record, create_topic, produce, sink_rows, unique_topic

if TYPE_CHECKING:
    from pathlib import Path


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
    project = Project(
        root=tmp_path,
        clusters={"secured": sasl_cluster.bootstrap_servers},
        properties={
            "secured": {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.username": sasl_cluster.sasl_user,
                "sasl.password": f"${{env:{PASSWORD_ENV}}}",
            }
        },
    )
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
