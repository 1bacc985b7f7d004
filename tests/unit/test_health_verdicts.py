"""The health report's verdicts as pure functions of what the brokers and the state said (no broker here): when
each fails, with which severity, and what its description names.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from dynamic_kafka.config.models import HealthConfig
from dynamic_kafka.operations.health import (
    PartitionHealth,
    Since,
    event_time_lag_verdict,
    freshness_verdict,
    idle_verdict,
    reachable_lag_verdict,
    stuck_transaction_verdict,
)
from dynamic_kafka.operations.status import PipelineStatus, lag_limit_verdict
from tests.support.builders import a_pipeline as pipeline

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


def status(*, never_ran: bool = False, total_lag: int = 0) -> PipelineStatus:
    return PipelineStatus(
        pipeline_id="p",
        never_ran=never_ran,
        partitions=(),
        total_lag=total_lag,
        unreachable_clusters=(),
        last_run=None,
        last_run_status=None,
        warnings=(),
    )


def partition(number: int, **fields: object) -> PartitionHealth:
    offsets = {"earliest_offset": 0, "high_watermark": 10, "last_stable_offset": 10}
    return PartitionHealth.model_validate(
        {"cluster_id": "east", "topic": "orders", "partition": number, **offsets, **fields}
    )


def test_freshness_passes_without_a_limit_and_fails_past_it() -> None:
    assert freshness_verdict(pipeline(), status(), NOW - timedelta(days=3), NOW).passed
    late = freshness_verdict(pipeline(freshness_minutes=30), status(), NOW - timedelta(minutes=45), NOW)
    assert (late.passed, late.severity) == (False, "warning")
    assert late.description == "the last run committed 45.0 minutes ago, over freshness_minutes 30"
    assert freshness_verdict(pipeline(freshness_minutes=30), status(), NOW - timedelta(minutes=5), NOW).passed


CHANGED = "its config file was last changed"


def test_a_pipeline_that_never_ran_fails_freshness_once_its_grace_period_has_passed() -> None:
    day_ago = Since(at=NOW - timedelta(hours=25), what=CHANGED)
    never = freshness_verdict(pipeline(), status(never_ran=True), None, NOW, since=day_ago)
    assert (never.passed, never.severity) == (False, "warning")
    assert never.description == (
        "no run committed in the 1500 minutes since its config file was last changed (2026-11-27T11:00:00Z); the "
        "first run was due within 1440 minutes (health.first_run_grace_minutes)"
    )
    recent = Since(at=NOW - timedelta(minutes=10), what=CHANGED)
    due = freshness_verdict(pipeline(freshness_minutes=30), status(never_ran=True), None, NOW, since=recent)
    assert (due.passed, due.description) == (
        True,
        "no run committed yet, 10 minutes since its config file was last changed (2026-11-28T11:50:00Z); the first "
        "run is due within 30 minutes (freshness_minutes)",
    )
    planned = Since(at=NOW - timedelta(minutes=45), what="its first run was planned")
    late = freshness_verdict(pipeline(freshness_minutes=30), status(), None, NOW, since=planned)
    assert not late.passed
    assert late.description.startswith("no run committed in the 45 minutes since its first run was planned")
    own = pipeline(freshness_minutes=30, health={"first_run_grace_minutes": 120})
    assert freshness_verdict(own, status(never_ran=True), None, NOW, since=planned).passed


def test_a_pipeline_without_a_known_start_is_not_failed_for_never_running() -> None:
    unknown = freshness_verdict(pipeline(freshness_minutes=30), status(never_ran=True), None, NOW, since=None)
    assert (unknown.passed, unknown.description) == (
        True,
        "no run committed yet; when the pipeline was set up is unknown (no state table, no config file), so its "
        "first run is not late",
    )


def test_idle_partitions_are_listed_and_fail_only_when_asked() -> None:
    rows = [partition(0, idle=True), partition(1, idle=False)]
    listed = idle_verdict(HealthConfig(idle_after_seconds=60), rows)
    assert listed.passed
    assert listed.description == "1 partition(s) without a record for over 60s: east/orders[0]"
    assert not idle_verdict(HealthConfig(idle_after_seconds=60, fail_on_idle=True), rows).passed


def test_a_stuck_transaction_is_named_with_its_offsets() -> None:
    opened = NOW - timedelta(hours=1)
    rows = [
        partition(0, last_stable_offset=4, open_transaction_since=opened, stuck_transaction=True),
        partition(1, last_stable_offset=8, open_transaction_since=NOW),
    ]
    verdict = stuck_transaction_verdict(HealthConfig(stuck_transaction_seconds=900), rows)
    assert (verdict.passed, verdict.severity) == (False, "warning")
    assert "east/orders[0] open since 2026-11-28T11:00:00Z (last stable offset 4, high watermark 10)" in (
        verdict.description
    )
    assert "[1]" not in verdict.description
    assert rows[1].pending_in_transaction == 2
    assert stuck_transaction_verdict(HealthConfig(), [rows[1]]).passed


def test_event_time_lag_fails_only_over_its_limit() -> None:
    assert event_time_lag_verdict(HealthConfig(), None).passed
    assert not event_time_lag_verdict(HealthConfig(max_event_time_lag_seconds=60), None).passed
    over = event_time_lag_verdict(HealthConfig(max_event_time_lag_seconds=60), 90.0)
    assert over.description == "the newest landed event time is 90s old, over max_event_time_lag_seconds 60"
    assert event_time_lag_verdict(HealthConfig(max_event_time_lag_seconds=60), 30.0).passed


def test_an_unreachable_cluster_fails_the_lag_verdict_even_without_a_limit() -> None:
    lag = lag_limit_verdict(status(total_lag=3), None)
    assert reachable_lag_verdict(lag, []).passed
    failed = reachable_lag_verdict(lag, ["west"])
    assert (failed.passed, failed.name) == (False, "lag")
    assert (
        failed.description
        == "lag unknown: no answer from cluster(s) west (known lag on the clusters that answered: 3 records)"
    )
