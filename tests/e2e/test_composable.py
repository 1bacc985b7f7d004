"""The integration mixed into a team's own Dagster code: several configs in one code location, their asset keys,
groups, owners, tags and kinds from a translator, a user's retry policy, and declarative automation instead of a
schedule. Loading only: no broker, no Spark."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from dagster import AssetKey, AutomationCondition, Backoff, Definitions, Failure, RetryPolicy

from dynamic_kafka.dagster import DynamicKafkaTranslator, build_definitions
from dynamic_kafka.dagster.errors import to_dagster
from dynamic_kafka.errors import DataLossError, RunInProgressError
from dynamic_kafka.model.plan import LostRange
from tests.support.e2e import Project

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.e2e

UNREACHABLE = {"east": "127.0.0.1:1"}


def config(root: Path, pipeline_id: str, **settings: object) -> Path:
    root.mkdir()
    project = Project(root=root, clusters=UNREACHABLE)
    project.write_metadata({pipeline_id: {"east": [pipeline_id]}})
    project.add_pipeline(pipeline_id, [pipeline_id], **settings)
    return project.config_path


def test_two_configs_merge_into_one_code_location_each_with_its_keys_group_owners_tags_and_kinds(
    tmp_path: Path,
) -> None:
    billing = DynamicKafkaTranslator(
        key_prefix=("billing", "raw"),
        stream_key_prefix=("billing_kafka",),
        group_name="billing",
        owners=("team:billing",),
        tags={"tier": "raw"},
        kinds=("kafka", "delta"),
    )
    orders = build_definitions(config(tmp_path / "orders", "orders"))
    invoices = build_definitions(config(tmp_path / "invoices", "invoices"), translator=billing)

    merged = Definitions.merge(orders, invoices)

    graph = merged.resolve_asset_graph()
    sink = graph.get(AssetKey(["billing", "raw", "invoices"]))
    assert (sink.group_name, sink.owners, sink.tags.get("tier")) == ("billing", ["team:billing"], "raw")
    assert {k for k in sink.tags if k.startswith("dagster/kind/")} == {"dagster/kind/kafka", "dagster/kind/delta"}
    assert sink.parent_keys == {AssetKey(["billing_kafka", "invoices"])}
    assert graph.has(AssetKey(["billing", "raw", "invoices_dead_letter"]))
    assert graph.get(AssetKey(["dynamic_kafka", "orders"])).group_name == "dynamic_kafka"
    assert graph.get(AssetKey(["kafka", "orders"])).is_external
    assert merged.resolve_job_def("invoices_incremental").asset_layer.selected_asset_keys >= {sink.key}
    assert merged.resolve_job_def("orders_incremental") is not None
    incremental = merged.resolve_assets_def(AssetKey(["billing", "raw", "invoices"]))
    assert incremental.op.pool == "billing/raw/invoices"  # the sink's key: pipelines of two configs never share one


def test_a_user_retry_policy_is_the_steps_and_governs_retriable_errors_only(tmp_path: Path) -> None:
    policy = RetryPolicy(max_retries=5, delay=2, backoff=Backoff.EXPONENTIAL)
    path = config(tmp_path / "p", "orders", backfill={"start": "2026-01-01T00:00:00Z", "granularity": "daily"})

    defs = build_definitions(path, retry_policy=policy)

    assert defs.resolve_assets_def(AssetKey(["dynamic_kafka", "orders"])).op.retry_policy == policy
    assert defs.resolve_assets_def(AssetKey(["dynamic_kafka", "orders_backfill"])).op.retry_policy == policy
    retriable = to_dagster(RunInProgressError("orders", 7), "orders", policy)
    assert isinstance(retriable, Failure)
    assert retriable.allow_retries is True  # the policy decides how often and when
    lost = LostRange(cluster_id="east", topic="orders", partition=0, from_offset=1, to_offset=2)
    final = to_dagster(DataLossError([lost]), "orders", policy)
    assert isinstance(final, Failure)
    assert final.allow_retries is False  # retrying cannot help: the policy never retries it


def test_an_automation_condition_materializes_the_sink_instead_of_its_schedule(tmp_path: Path) -> None:
    path = config(tmp_path / "p", "orders", schedule="*/5 * * * *")
    condition = AutomationCondition.on_cron("*/5 * * * *")

    automated = build_definitions(path, automation_condition=condition)
    scheduled = build_definitions(path)

    sink = automated.resolve_asset_graph().get(AssetKey(["dynamic_kafka", "orders"]))
    assert sink.automation_condition == condition
    assert "orders_schedule" not in {s.name for s in automated.schedules or ()}
    assert "orders_schedule" in {s.name for s in scheduled.schedules or ()}
    assert {s.name for s in automated.sensors or ()} == {"orders_metadata_sensor", "orders_catch_up_sensor"}
