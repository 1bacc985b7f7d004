"""The ``health`` command: the checks between runs, against the brokers, with a non-zero exit when one fails.

A thin call of :meth:`dynamic_kafka.pipeline.Pipeline.health`, what the Dagster health job evaluates. Exit codes:
0 every verdict passed, 2 a verdict failed (the report says which), 1 the report could not be made.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dynamic_kafka.cli._args import add_config_argument

if TYPE_CHECKING:
    import argparse
    from datetime import datetime

    from dynamic_kafka.health import HealthReport

HELP = (
    "evaluate the lag, data-loss and freshness verdicts, idle partitions, stuck open transactions and the "
    "event-time lag against the brokers (exit 2 when one fails)"
)
FAILED_EXIT = 2


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Registers ``health``."""
    parser = subparsers.add_parser("health", help=HELP, description=HELP)
    add_config_argument(parser)
    parser.add_argument("--pipeline", required=True, help="pipeline id from the config")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    parser.set_defaults(handler=_health)


def _health(args: argparse.Namespace) -> int:
    from dynamic_kafka.pipeline import Pipeline

    report = Pipeline.from_config(args.config, args.pipeline).health()
    print(report.model_dump_json(indent=2) if args.json else format_health(report))
    return 0 if report.passed else FAILED_EXIT


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
        lines.append(f"  {'cluster':<12} {'topic':<24} {'part':>4} {'newest record':>21} {'idle s':>9}  transaction")
        for p in notable:
            newest = _at(p.newest_record_at) if p.newest_record_at else "none"
            idle = f"{p.idle_seconds:.0f}" if p.idle_seconds is not None else "-"
            held = (
                f"{p.pending_in_transaction} offsets open since {_at(p.open_transaction_since)}"
                f"{' (stuck)' if p.stuck_transaction else ''}"
                if p.pending_in_transaction
                else "-"
            )
            lines.append(f"  {p.cluster_id:<12} {p.topic:<24} {p.partition:>4} {newest:>21} {idle:>9}  {held}")
    return "\n".join(lines)


def _at(moment: datetime | None) -> str:
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z") if moment is not None else "?"
