"""The ``health`` command: the checks between runs, against the brokers, with a non-zero exit when one fails.

A thin call of :meth:`dynamic_kafka.pipeline.Pipeline.health`, what the Dagster health job evaluates. Exit codes:
0 every verdict passed, 3 a verdict failed (the report says which), 1 the report could not be made.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dynamic_kafka.cli._args import add_config_argument, examples
from dynamic_kafka.cli._pipelines import Outcome, add_pipeline_arguments, each_pipeline
from dynamic_kafka.cli._table import table
from dynamic_kafka.cli.exit_codes import ExitCode

if TYPE_CHECKING:
    import argparse
    from datetime import datetime

    from dynamic_kafka.health import HealthReport
    from dynamic_kafka.pipeline import Pipeline

HELP = (
    "evaluate the lag, data-loss and freshness verdicts, idle partitions, stuck open transactions and the "
    f"event-time lag against the brokers (exit {ExitCode.CHECK_FAILED:d} when one fails)"
)
_EXAMPLES = f"""\
examples:
  dynamic-kafka health --pipeline orders
  dynamic-kafka health --all --json        every pipeline; exit {ExitCode.CHECK_FAILED:d} when a verdict of one fails
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Registers ``health``."""
    parser = subparsers.add_parser("health", help=HELP, description=HELP, **examples(_EXAMPLES))
    add_config_argument(parser)
    add_pipeline_arguments(parser, every=True)
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    parser.set_defaults(handler=_health)


def _health(args: argparse.Namespace) -> int:
    return each_pipeline(args, _health_of)


def _health_of(pipeline: Pipeline) -> Outcome:
    report = pipeline.health()
    code = ExitCode.OK if report.passed else ExitCode.CHECK_FAILED
    return Outcome(report.model_dump(mode="json"), lambda: format_health(report), code)


def format_health(report: HealthReport) -> str:
    """A health report for people: one line per verdict, then the partitions that are idle or hold a transaction."""
    lag = "unknown" if report.unreachable_clusters else report.total_lag
    state = "never ran" if report.never_ran else f"total lag {lag}"
    verdict = "healthy" if report.passed else f"{len(report.failed)} check(s) failed"
    lines = [f"pipeline {report.pipeline_id}: {verdict} at {_at(report.checked_at)} ({state})"]
    for v in report.verdicts:
        # A failed check reads FAIL whatever its severity: the exit code counts it as failed.
        mark = "ok  " if v.passed else "FAIL"
        severity = " (warning: late, not lost)" if not v.passed and v.severity == "warning" else ""
        lines.append(f"  {mark} {v.name:<19} {v.description}{severity}")
    if report.unreachable_clusters:
        lines.append(f"  unreachable clusters: {', '.join(report.unreachable_clusters)}")
    notable = [p for p in report.partitions if p.idle or p.pending_in_transaction]
    if notable:
        lines += table(
            ["cluster", "topic", ">part", ">newest record", ">idle s", "transaction"],
            (
                (
                    p.cluster_id,
                    p.topic,
                    p.partition,
                    _at(p.newest_record_at) if p.newest_record_at else "none",
                    f"{p.idle_seconds:.0f}" if p.idle_seconds is not None else "-",
                    f"{p.pending_in_transaction} offsets open since {_at(p.open_transaction_since)}"
                    f"{' (stuck)' if p.stuck_transaction else ''}"
                    if p.pending_in_transaction
                    else "-",
                )
                for p in notable
            ),
        )
    return "\n".join(lines)


def _at(moment: datetime | None) -> str:
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z") if moment is not None else "?"
