"""The health job and schedule in Dagster, on real brokers and Dagster's storage: every check of the sink evaluated
between runs (no materialization, no Spark), a transaction left open reported by its partition, and the schedule
that launches the job. The verdicts themselves are the library's (tests/integration/test_health.py).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import Producer
from dagster import AssetCheckSeverity, DefaultScheduleStatus, RunRequest, build_schedule_context

from tests.support.e2e import Record, create_topic, produce, unique_topic

if TYPE_CHECKING:
    from dagster import DagsterInstance

    from tests.support.e2e import Project

pytestmark = pytest.mark.e2e


def test_the_health_job_evaluates_the_checks_between_runs_and_reports_a_stuck_transaction(
    project: Project, kafka_clusters: Any, instance: DagsterInstance
) -> None:
    east = project.clusters["east"]
    topic = unique_topic("held")
    create_topic(east, topic, partitions=1)
    produce("east", east, topic, [Record(0, "committed")])
    project.write_metadata({"events": {"east": [topic]}})
    project.add_pipeline("events", ["events"], health={"stuck_transaction_seconds": 1, "schedule": "*/5 * * * *"})
    producer = Producer({"bootstrap.servers": east, "transactional.id": unique_topic("left-open")})
    producer.init_transactions(30)
    producer.begin_transaction()
    try:
        producer.produce(topic, value=b"open", partition=0)
        assert producer.flush(30) == 0
        time.sleep(1.5)
        repo = project.definitions().get_repository_def()
        job = repo.get_job("events_health")

        result = job.execute_in_process(instance=instance, resources=project.resources())
    finally:
        producer.abort_transaction(30)

    assert result.success
    assert not result.get_asset_materialization_events(), "a health check lands nothing"
    verdicts = {c.check_name: c for c in result.get_asset_check_evaluations()}
    assert {name: c.passed for name, c in verdicts.items()} == {
        "lag": True,
        "data_loss": True,
        "dead_letters": True,
        "completeness": True,  # of the last run: none yet
        "idle_partitions": True,
        "stuck_transactions": False,
        "event_time_lag": True,
    }
    stuck = verdicts["stuck_transactions"]
    assert stuck.severity == AssetCheckSeverity.WARN
    assert f"east/{topic}[0] open since" in (stuck.description or "")
    (row,) = stuck.metadata["open_transactions"].value.records  # type: ignore[attr-defined]
    assert (row.data["topic"], row.data["last_stable_offset"], row.data["high_watermark"]) == (topic, 1, 2)
    assert job.tags.get("dynamic_kafka/pipeline") is None, "never queued behind the pipeline's runs"

    schedule = repo.get_schedule_def("events_health_schedule")
    assert (schedule.cron_schedule, schedule.job_name) == ("*/5 * * * *", "events_health")
    assert schedule.default_status == DefaultScheduleStatus.STOPPED
    (request,) = schedule.evaluate_tick(build_schedule_context(instance=instance)).run_requests or []
    assert isinstance(request, RunRequest)

    incremental = repo.get_job("events_incremental")
    checked_by_runs = {key.name for key in incremental.asset_layer.asset_graph.asset_check_keys}
    assert checked_by_runs == {"lag", "data_loss", "dead_letters", "completeness"}, (
        "the health checks are for between runs"
    )
