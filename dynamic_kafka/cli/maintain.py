"""The ``maintain`` command: compact and vacuum a pipeline's sink and dead-letter table, never beside a write.

A thin call of :func:`dynamic_kafka.operations.maintain.maintain_pipeline`, the function the Dagster maintenance job
calls.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from dynamic_kafka.cli._args import add_config_argument
from dynamic_kafka.cli._pipelines import add_pipeline_arguments, one_pipeline

if TYPE_CHECKING:
    from dynamic_kafka.operations.maintain import MaintenanceSummary
    from dynamic_kafka.sink.compaction import TableFiles

HELP = (
    "compact the small files of the sink and dead-letter table and vacuum them, under the pipeline's run lock and "
    "lease (never beside a run or backfill)"
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Registers ``maintain``."""
    parser = subparsers.add_parser("maintain", help=HELP, description=HELP)
    add_config_argument(parser)
    add_pipeline_arguments(parser)
    parser.add_argument(
        "--vacuum-retention",
        type=hours,
        default=None,
        metavar="HOURS",
        help="keep files older versions need for this many hours (default: the pipeline's "
        "maintenance.vacuum_retention_hours, else the tables' own, 7 days); older versions can no longer be read",
    )
    parser.add_argument(
        "--unsafe-vacuum-retention",
        action="store_true",
        help="take a --vacuum-retention below the pipeline's floor (max_run_seconds in hours plus one): VACUUM then "
        "deletes the files of writes that have not committed yet; only when no writer of the tables runs anywhere",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    parser.set_defaults(handler=_maintain)


def hours(text: str) -> int:
    """A retention in whole hours from the command line, 0 or more.

    Example:
        >>> hours("24")
        24
    """
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of hours; write e.g. 168") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not 0 or more hours; write e.g. 168")
    return value


def _maintain(args: argparse.Namespace) -> int:

    summary = one_pipeline(args).maintain(
        vacuum_retention_hours=args.vacuum_retention, unsafe_vacuum_retention=args.unsafe_vacuum_retention
    )
    print(summary.model_dump_json(indent=2) if args.json else format_maintenance(summary))
    return 0


def format_maintenance(summary: MaintenanceSummary) -> str:
    """A maintenance's summary for people."""
    retention = "the tables' own" if summary.retention_hours is None else f"{summary.retention_hours} hours"
    lines = [f"pipeline {summary.pipeline_id}: maintained in {summary.seconds:.1f}s (vacuum retention {retention})"]
    for t in summary.tables:
        if t.before is None or t.after is None:
            lines.append(f"  {t.role} {t.table}: no table yet; nothing to do")
            continue
        lines.append(
            f"  {t.role} {t.table}: version {t.before.version} -> {t.after.version}, {t.after.rows} rows "
            f"(before: {t.before.rows})"
        )
        lines.append(f"    current files {_files(t.before, 'current')} -> {_files(t.after, 'current')}")
        lines.append(f"    stored files  {_files(t.before, 'stored')} -> {_files(t.after, 'stored')}")
        removed = f"{t.vacuumed_files} vacuumed, {t.leftovers_removed} leftovers of killed writes removed"
        lines.append(f"    {t.compacted_files} files compacted, {removed}")
    return "\n".join(lines)


def _files(files: TableFiles, which: str) -> str:
    counts = files.current if which == "current" else files.stored
    return f"{counts.files} ({counts.bytes:,} bytes)"
