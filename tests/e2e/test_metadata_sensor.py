"""The metadata sensor, ticked against a real metadata file (the file service contacts no broker)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from dagster import DagsterInstance, SensorResult, build_sensor_context

from dynamic_kafka.config.loader import load_project_config
from dynamic_kafka.errors import MetadataServiceError
from dynamic_kafka.metadata.watch import WatchCursor
from dynamic_kafka.pipeline import Pipeline

if TYPE_CHECKING:
    from tests.support.e2e import Project

pytestmark = pytest.mark.e2e

EAST_ONLY = {"orders": {"east": ["orders"]}}
EAST_AND_WEST = {"orders": {"east": ["orders"], "west": ["orders-v2"]}}


def fingerprint(project: Project) -> str:
    return Pipeline(load_project_config(project.config_path), "orders").resolve().fingerprint


def test_metadata_sensor_requests_one_run_per_change_and_tolerates_failures(
    project: Project, instance: DagsterInstance
) -> None:
    project.write_metadata(EAST_ONLY)
    project.add_pipeline(
        "orders", ["orders"], orchestration={"sensor": {"interval_seconds": 7, "failure_threshold": 2}}
    )
    sensor = project.definitions().resolve_sensor_def("orders_metadata_sensor")
    assert sensor.minimum_interval_seconds == 7
    cursor: str | None = None

    def tick() -> SensorResult[Any]:
        nonlocal cursor
        result = sensor(build_sensor_context(instance=instance, cursor=cursor, resources=project.resources()))
        assert isinstance(result, SensorResult)
        cursor = result.cursor
        return result

    def skipped(result: SensorResult[Any]) -> str:
        assert not result.run_requests
        assert result.skip_reason is not None
        return result.skip_reason.skip_message or ""

    # The first tick has no metadata to fall back on: its failure fails the tick (Flink's first discovery), with
    # no cursor kept, whatever the threshold.
    project.metadata_path.write_text("clusters: [not, closed\n", encoding="utf-8")
    with pytest.raises(MetadataServiceError, match="failed on the first poll"):
        tick()
    assert cursor is None
    project.write_metadata(EAST_ONLY)

    first_fp = fingerprint(project)
    baseline = tick()
    assert [r.run_key for r in baseline.run_requests or []] == [f"{first_fp}#1"]
    assert WatchCursor.model_validate_json(cursor or "") == WatchCursor(fingerprint=first_fp, changes=1)

    assert skipped(tick()) == "metadata unchanged"

    project.write_metadata(EAST_AND_WEST)
    second_fp = fingerprint(project)
    assert second_fp != first_fp
    changed = tick()
    (request,) = changed.run_requests or []
    assert request.run_key == f"{second_fp}#2"
    assert skipped(tick()) == "metadata unchanged"  # the repeated tick requests nothing more

    project.metadata_path.write_text("clusters: [not, closed\n", encoding="utf-8")
    assert "metadata service failed (1 of 2 tolerated)" in skipped(tick())
    project.metadata_path.unlink()
    assert "metadata service failed (2 of 2 tolerated)" in skipped(tick())
    with pytest.raises(MetadataServiceError, match="failed 3 times in a row"):
        tick()
    assert WatchCursor.model_validate_json(cursor or "").consecutive_failures == 2  # a failed tick keeps its cursor

    project.write_metadata(EAST_AND_WEST)
    assert skipped(tick()) == "metadata unchanged"
    assert WatchCursor.model_validate_json(cursor or "") == WatchCursor(fingerprint=second_fp, changes=2)

    project.write_metadata(EAST_ONLY)  # back to the first layout: a change of its own
    (back,) = tick().run_requests or []
    assert back.run_key == f"{first_fp}#3"


def test_metadata_sensor_survives_an_unreadable_cursor(project: Project, instance: DagsterInstance) -> None:
    project.write_metadata(EAST_ONLY)
    project.add_pipeline("orders", ["orders"])
    sensor = project.definitions().resolve_sensor_def("orders_metadata_sensor")

    result = sensor(build_sensor_context(instance=instance, cursor="not json", resources=project.resources()))

    assert isinstance(result, SensorResult)
    assert [r.run_key for r in result.run_requests or []] == [f"{fingerprint(project)}#1"]
