"""The verdicts the Dagster checks show come from the library (``status.lag_limit_verdict`` and the others)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from dynamic_kafka.model.plan import Finding, LostRange, Plan, TopicPartition
from dynamic_kafka.model.snapshots import RunRecord
from dynamic_kafka.model.summary import Completeness, RunSummary, StreamTable, SummaryStatus
from dynamic_kafka.operations.status import (
    PipelineStatus,
    StreamTableStatus,
    completeness_verdict,
    data_loss_verdict,
    dead_letter_verdict,
    lag_limit_verdict,
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
    healthy = status(lag=3)
    assert (data_loss_verdict(healthy).passed, lag_limit_verdict(healthy, 10).passed) == (True, True)
    assert lag_limit_verdict(healthy, 10).description == "lag 3 records"


def test_data_loss_fails_as_an_error_and_names_the_ranges() -> None:
    verdict = data_loss_verdict(status(findings=(LOSS,)))
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
    verdict = lag_limit_verdict(status(lag=lag, unknown=unknown), limit)
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


# --- completeness: records read per range against rows landed -----------------------------------------------

EAST_0 = TopicPartition(cluster_id="east", topic="orders", partition=0)
EAST_1 = TopicPartition(cluster_id="east", topic="orders", partition=1)


def counted(completeness: Completeness | None, run_status: SummaryStatus = "committed") -> PipelineStatus:
    last = RunSummary(pipeline_id="p", run_seq=4, status=run_status, completeness=completeness)
    return status().model_copy(update={"last_run": last})


def test_a_run_that_landed_every_record_it_read_passes_with_exact_counts() -> None:
    # 10 offsets planned on partition 0; Kafka returned 7 records (a commit marker, an aborted transaction of two).
    counts = Completeness.compare({EAST_0: 10, EAST_1: 4}, {EAST_0: 7, EAST_1: 4}, {EAST_0: 7, EAST_1: 4}, {})

    assert counts.matches
    assert (counts.planned, counts.read, counts.landed, counts.skipped) == (14, 11, 11, 3)
    assert [(p.partition, p.skipped, p.missing) for p in counts.partitions] == [(0, 3, 0), (1, 0, 0)]
    verdict = completeness_verdict(counted(counts))
    assert (verdict.passed, verdict.severity) == (True, "error")
    assert verdict.description == (
        "run_seq 4: planned 14 offsets in 2 range(s), read 11, landed 11, deduplicated 0, skipped by Kafka 3 "
        "(transaction markers, aborted or compacted records)"
    )


def test_records_read_but_not_landed_fail_as_an_error_naming_the_partition_and_its_counts() -> None:
    # A hand-made count table: partition 1 read 4 records, and only 3 rows of the run are in the tables.
    counts = Completeness.compare({EAST_0: 5, EAST_1: 4}, {EAST_0: 5, EAST_1: 4}, {EAST_0: 5, EAST_1: 3}, {})

    assert [str(p) for p in counts.mismatches] == [
        "east/orders[1]: planned 4, read 4, landed 3, deduplicated 0, skipped by Kafka 0"
    ]
    verdict = completeness_verdict(counted(counts))
    assert (verdict.passed, verdict.severity) == (False, "error")
    assert verdict.problems == (
        "run_seq 4 does not account for its records: east/orders[1]: planned 4, read 4, landed 3, deduplicated 0, "
        "skipped by Kafka 0",
    )


def test_records_landed_before_count_as_deduplicated_only_as_far_as_rows_landed_before_exist() -> None:
    # Partition 0: 6 read, 2 landed by the run, 4 rows a backfill landed in the overlap: accounted for.
    # Partition 1: 6 read, 2 landed, only 1 row landed before: 3 records are missing.
    counts = Completeness.compare(
        {EAST_0: 6, EAST_1: 6},
        {EAST_0: 6, EAST_1: 6},
        {EAST_0: 2, EAST_1: 2},
        {
            EAST_0: 4,
            EAST_1: 1,
        },
    )

    assert [(p.partition, p.deduplicated, p.missing) for p in counts.partitions] == [(0, 4, 0), (1, 1, 3)]
    assert [p.partition for p in counts.mismatches] == [1]


def test_more_rows_landed_than_read_or_more_records_than_offsets_are_mismatches() -> None:
    duplicated = Completeness.compare({EAST_0: 5}, {EAST_0: 5}, {EAST_0: 6}, {})
    impossible = Completeness.compare({EAST_0: 5}, {EAST_0: 6}, {EAST_0: 6}, {})

    assert duplicated.mismatches[0].missing == -1
    assert impossible.mismatches[0].skipped == -1


def test_a_run_without_counts_passes_saying_it_was_not_counted() -> None:
    verdict = completeness_verdict(counted(None, "empty"))
    assert (verdict.passed, verdict.description) == (True, "the last run (run_seq 4, empty) was not counted")


def test_a_realign_history_entry_of_an_earlier_version_is_read_as_a_realigned_summary() -> None:
    legacy = (
        '{"realigned": true, "state_run_seq": 1, "sink_txn": 3, "state_backfill": 0, "sink_backfill": 2, '
        '"at": "2026-11-01T00:00:00+00:00"}'
    )
    summary = RunSummary.stored(legacy, pipeline_id="p")
    assert (summary.pipeline_id, summary.run_seq, summary.status) == ("p", 3, "realigned")
    assert summary.realign is not None
    assert (summary.realign.state_run_seq, summary.realign.sink_backfill) == (1, 2)
    assert RunSummary.stored(summary.model_dump_json(), pipeline_id="p") == summary


def test_a_history_entry_reads_its_summary_one_way_whatever_version_wrote_it() -> None:
    legacy = '{"realigned": true, "state_run_seq": 1, "sink_txn": 3, "state_backfill": 0, "sink_backfill": 2}'
    at = datetime(2026, 11, 1, tzinfo=UTC)
    plan = Plan(pipeline_id="p", run_seq=3, splits=(), planned_at=at)
    old = RunRecord(pipeline_id="p", run_seq=3, status="committed", plan=plan, planned_at=at, summary_json=legacy)
    reset = RunSummary(pipeline_id="p", run_seq=4, status="reset")
    new = old.model_copy(update={"run_seq": 4, "summary_json": reset.model_dump_json()})
    planned = old.model_copy(update={"status": "planned", "summary_json": None})
    assert old.summary is not None
    assert old.summary.status == "realigned"
    assert (old.summary_status, old.is_operation) == ("realigned", True)
    assert (new.summary, new.summary_status, new.is_operation) == (reset, "reset", True)
    assert (planned.summary, planned.summary_status, planned.is_operation) == (None, None, False)


def test_a_stream_tables_checks_see_its_partitions_lag_dead_letters_and_losses_only() -> None:
    eu, us = (TopicPartition(cluster_id="east", topic=t, partition=0) for t in ("orders-eu", "orders-us"))
    us_loss = LOSS.model_copy(update={"topic": "orders-us"})
    last = RunSummary(
        pipeline_id="p",
        run_seq=3,
        status="committed",
        records=5,
        dead_letters=4,
        findings=(us_loss,),
        stream_tables=(
            StreamTable(stream_id="orders-eu", path="d/orders-eu", records=2, dead_letters=0),
            StreamTable(stream_id="orders-us", path="d/orders-us", records=3, dead_letters=4),
        ),
    )
    whole = status(lag=30).model_copy(
        update={
            "last_run": last,
            "tables": (
                StreamTableStatus(stream_id="orders-eu", table="d/orders-eu", exists=True, lag=25, partitions=(eu,)),
                StreamTableStatus(stream_id="orders-us", table="d/orders-us", exists=True, lag=5, partitions=(us,)),
            ),
        }
    )

    eu_view, us_view = whole.of_table("orders-eu"), whole.of_table("orders-us")

    assert (lag_limit_verdict(eu_view, 10).passed, lag_limit_verdict(us_view, 10).passed) == (False, True)
    assert (data_loss_verdict(eu_view).passed, data_loss_verdict(us_view).passed) == (True, False)
    assert (dead_letter_verdict(eu_view, 1).passed, dead_letter_verdict(us_view, 1).passed) == (True, False)
    assert "sent 4 record(s) to the dead-letter table" in dead_letter_verdict(us_view, 1).description
    new = whole.of_table("orders-apac")  # a stream without a table yet: nothing to report on
    assert (new.total_lag, new.last_run and new.last_run.dead_letters, new.tables) == (0, 0, ())
