"""The lag / data-loss verdict the Dagster check shows comes from the library (``status.lag_verdict``)."""

from __future__ import annotations

from typing import Any

import pytest

from dynamic_kafka.plan.model import Finding, LostRange
from dynamic_kafka.plan.summary import RunSummary
from dynamic_kafka.status import PipelineStatus, lag_verdict

LOSS = Finding(
    kind="data_loss",
    cluster_id="east",
    topic="orders",
    partition=0,
    from_offset=5,
    to_offset=7,
    message="east/orders[0]: offsets [5, 7) were deleted before they were read; skipped",
)


def status(*, lag: int = 0, unknown: tuple[str, ...] = (), findings: tuple[Finding, ...] = ()) -> PipelineStatus:
    last = RunSummary(pipeline_id="p", run_seq=3, status="committed", findings=findings)
    fields: dict[str, Any] = {
        "pipeline_id": "p",
        "partitions": (),
        "total_lag": lag,
        "unreachable_clusters": (),
        "lag_unknown_clusters": unknown,
        "last_run": last,
        "last_run_status": "committed",
        "warnings": (),
    }
    return PipelineStatus(**fields)


def test_healthy_pipeline_passes() -> None:
    verdict = lag_verdict(status(lag=3), 10)
    assert (verdict.passed, verdict.description) == (True, "lag 3 records, no data loss")


def test_data_loss_fails_as_an_error_and_names_the_ranges() -> None:
    verdict = lag_verdict(status(findings=(LOSS,)), None)
    assert not verdict.passed
    assert verdict.severity == "error"
    assert verdict.lost_ranges == (
        LostRange(cluster_id="east", topic="orders", partition=0, from_offset=5, to_offset=7),
    )
    assert "run_seq 3" in verdict.description


@pytest.mark.parametrize(
    ("lag", "unknown", "limit", "passed"),
    [(11, (), 10, False), (11, (), None, True), (0, ("west",), 10, False), (0, ("west",), None, True)],
)
def test_lag_over_limit_or_unknown_under_a_limit_warns(
    lag: int, unknown: tuple[str, ...], limit: int | None, passed: bool
) -> None:
    verdict = lag_verdict(status(lag=lag, unknown=unknown), limit)
    assert verdict.passed is passed
    assert verdict.severity == "warning"
