"""The maintenance job in Dagster, on real Delta tables and Dagster's storage: its run config, the observation of
the sink with its files before and after, and the optional schedule. Its refusals beside a write are the library's
(tests/integration/test_sink_maintenance.py).

The sink here is written by delta-rs (three appends, three files) rather than by runs: maintenance starts no Spark
and reads nothing from Kafka, so the job needs neither.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pyarrow as pa
import pytest
from dagster import AssetKey, DagsterEventType, DefaultScheduleStatus
from deltalake import DeltaTable, write_deltalake

from dynamic_kafka.state import StateStore

if TYPE_CHECKING:
    from dagster import DagsterInstance

    from tests.support.e2e import Project

pytestmark = pytest.mark.e2e


def three_appends(project: Project) -> None:
    """The sink of pipeline ``orders`` with three small files, and its state (a lease that expired long ago)."""
    project.write_metadata({"orders": {"east": ["orders"]}})
    project.add_pipeline("orders", ["orders"], maintenance={"schedule": "0 3 * * 0", "vacuum_retention_hours": 24})
    for n in range(3):
        write_deltalake(str(project.sink_path("orders")), pa.table({"offset": [n, n + 10]}), mode="append")
    store = StateStore(str(project.root / "data" / "orders_state"), "orders")
    store.record_backfill({}, owner="gone 1 x", lease_expires_at=datetime.now(UTC) - timedelta(hours=1))


def test_the_maintenance_job_compacts_the_sink_with_its_run_config_and_reports_the_files(
    project: Project, instance: DagsterInstance
) -> None:
    three_appends(project)
    repo = project.definitions().get_repository_def()
    job = repo.get_job("orders_maintenance")
    assert job.tags["dynamic_kafka/pipeline"] == "orders"
    (node,) = job.graph.node_dict.values()
    assert node.definition.pools == {"dynamic_kafka/orders"}
    config_fields = node.definition.config_schema.as_field().config_type.fields
    assert "vacuum_retention_hours" in config_fields
    schedule = repo.get_schedule_def("orders_maintenance_schedule")
    assert (schedule.cron_schedule, schedule.default_status) == ("0 3 * * 0", DefaultScheduleStatus.STOPPED)

    result = job.execute_in_process(
        run_config={
            "ops": {"orders_maintain": {"config": {"vacuum_retention_hours": 0, "unsafe_vacuum_retention": True}}}
        },
        instance=instance,
        resources=project.resources(),
    )

    assert result.success
    (observed,) = [
        e.event_specific_data.asset_observation  # type: ignore[union-attr]
        for e in result.all_events
        if e.event_type == DagsterEventType.ASSET_OBSERVATION
    ]
    assert observed.asset_key == AssetKey(["dynamic_kafka", "orders"])
    metadata = {k: v.value for k, v in observed.metadata.items()}
    assert (metadata["files_before"], metadata["files_after"], metadata["rows"]) == (3, 1, 6)
    assert metadata["stored_files_after"] == 1  # the replaced files vacuumed at once (retention 0)
    sink = DeltaTable(str(project.sink_path("orders")))
    assert sorted(sink.to_pyarrow_table().column("offset").to_pylist()) == [0, 1, 2, 10, 11, 12]
