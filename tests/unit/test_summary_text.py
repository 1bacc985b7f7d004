"""What the CLI prints after a run and for ``health`` tells what happened: records landed against dead-lettered,
a failed check marked as failing, and "unknown" where the lag is unknown.
"""

from __future__ import annotations

from datetime import UTC, datetime

from dynamic_kafka.cli.pipeline import format_summary
from dynamic_kafka.model.summary import RunSummary
from dynamic_kafka.operations.health import HealthReport, reachable_lag_verdict
from dynamic_kafka.operations.status import HealthVerdict

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


def test_a_run_whose_records_all_went_to_dead_letters_says_so() -> None:
    summary = RunSummary(pipeline_id="p", run_seq=3, status="committed", records=2, dead_letters=2, sink_records=0)

    first = format_summary(summary).splitlines()[0]

    assert first.startswith("pipeline p: run 3 committed: 2 records read: 0 landed in the sink, 2 dead-lettered, ")


def test_a_run_that_landed_everything_says_landed() -> None:
    summary = RunSummary(pipeline_id="p", run_seq=1, status="committed", records=9, dead_letters=0, sink_records=9)

    assert "committed: 9 records read: 9 landed in the sink, 0 dead-lettered, " in format_summary(summary)


def test_health_marks_a_failed_warning_as_failing_and_an_unknown_lag_as_unknown() -> None:
    lag = HealthVerdict(name="lag", passed=True, severity="warning", description="lag 0 records")
    report = HealthReport(
        pipeline_id="p",
        checked_at=NOW,
        never_ran=False,
        verdicts=(reachable_lag_verdict(lag, ["west"]),),
        partitions=(),
        total_lag=0,
        unreachable_clusters=("west",),
    )

    lines = report.text().splitlines()

    assert lines[0] == "pipeline p: 1 check(s) failed at 2026-12-06T12:00:00Z (total lag unknown)"
    assert lines[1].startswith("  FAIL lag ")
    assert "lag 0 records" not in lines[1]
    assert "lag unknown: no answer from cluster(s) west" in lines[1]
