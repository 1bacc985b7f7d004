"""The lag / data-loss verdict the Dagster check shows comes from the library (``status.lag_verdict``)."""

from __future__ import annotations

from typing import Any

import pytest

from dynamic_kafka.model.plan import Finding, LostRange
from dynamic_kafka.model.summary import RunSummary
from dynamic_kafka.status import (
    PipelineStatus,
    data_loss_verdict,
    dead_letter_verdict,
    lag_limit_verdict,
    lag_verdict,
)

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


def test_the_checks_verdicts_split_loss_lag_and_dead_letters_by_meaning() -> None:
    lost = status(lag=20, findings=(LOSS,))

    assert (data_loss_verdict(lost).passed, data_loss_verdict(lost).severity) == (False, "error")
    assert data_loss_verdict(status(lag=20)).passed
    late = lag_limit_verdict(lost, 10)
    assert (late.passed, late.severity, late.lost_ranges) == (False, "warning", ())
    assert lag_limit_verdict(lost, None).passed


@pytest.mark.parametrize(("dead_letters", "limit", "passed"), [(0, 0, True), (3, 0, False), (3, 3, True)])
def test_dead_letters_over_the_limit_warn(dead_letters: int, limit: int, passed: bool) -> None:
    last = RunSummary(pipeline_id="p", run_seq=4, status="committed", dead_letters=dead_letters)
    verdict = dead_letter_verdict(status().model_copy(update={"last_run": last}), limit)

    assert (verdict.passed, verdict.severity) == (passed, "warning")
    assert passed or "sent 3 record(s) to the dead-letter table" in verdict.description
