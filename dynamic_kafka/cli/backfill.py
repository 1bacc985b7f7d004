"""The ``backfill`` command: re-read a window of record timestamps and merge it into the sink, outside Dagster.

A thin call of :meth:`dynamic_kafka.pipeline.Pipeline.backfill`, the method the Dagster backfill asset calls: the
same plan, read and MERGE (no duplicates, incremental offsets untouched), under the same guards.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from dynamic_kafka.cli._args import add_config_argument, examples
from dynamic_kafka.cli._pipelines import add_pipeline_arguments, one_pipeline

if TYPE_CHECKING:
    from dynamic_kafka.model.summary import RunSummary

HELP = "merge the records whose timestamps fall in [--start, --end) into the sink (no duplicates, offsets untouched)"
_EXAMPLES = """\
examples:
  dynamic-kafka backfill --pipeline orders --start 2026-01-01 --end 2026-01-02
  dynamic-kafka backfill --start 2026-01-01T06:00+02:00 --end 2026-01-01T12:00+02:00 --json
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Registers ``backfill``."""
    parser = subparsers.add_parser("backfill", help=HELP, description=HELP, **examples(_EXAMPLES))
    add_config_argument(parser)
    add_pipeline_arguments(parser)
    parser.add_argument("--start", required=True, type=timestamp, help="window start, ISO-8601 (UTC when no offset)")
    parser.add_argument("--end", required=True, type=timestamp, help="window end (exclusive), ISO-8601")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")

    def handler(args: argparse.Namespace) -> int:
        if args.end <= args.start:
            parser.error(f"the window [{args.start}, {args.end}) is empty: give an --end after the --start")
        return _backfill(args)

    parser.set_defaults(handler=handler)


def timestamp(text: str) -> datetime:
    """An ISO-8601 timestamp from the command line, in UTC (one without an offset is taken as UTC).

    Example:
        >>> timestamp("2026-01-01T06:00:00+02:00")
        datetime.datetime(2026, 1, 1, 4, 0, tzinfo=datetime.timezone.utc)
    """
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an ISO-8601 timestamp; write e.g. 2026-01-01T00:00Z"
        ) from None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _backfill(args: argparse.Namespace) -> int:
    summary = one_pipeline(args).backfill(args.start, args.end)
    data = {
        "window_start": args.start.isoformat(),
        "window_end": args.end.isoformat(),
        **summary.model_dump(mode="json"),
    }
    print(json.dumps(data, indent=2) if args.json else format_backfill(summary, args.start, args.end))
    return 0


def format_backfill(summary: RunSummary, start: datetime, end: datetime) -> str:
    """A backfill's summary for people."""
    window = f"[{start.isoformat()}, {end.isoformat()})"
    if summary.status == "empty":
        return f"pipeline {summary.pipeline_id}: backfill {window}: no record in the window; nothing merged"
    # A table per stream has a version per table, listed below; one sink has one.
    version = "" if summary.stream_tables else f" (sink version {summary.sink_version})"
    already = " (every record was in the sink already)" if summary.records and not summary.sink_records else ""
    lines = [
        f"pipeline {summary.pipeline_id}: backfill {window} {summary.status}: {summary.records} records read, "
        f"{summary.sink_records} rows inserted{already}, {summary.bytes} bytes in {summary.total_seconds:.1f}s{version}"
    ]
    lines += [f"  {t.cluster_id}/{t.topic}: {t.records} records, {t.bytes} bytes" for t in summary.topics]
    lines += [
        f"  stream {t.stream_id} -> {t.path}: {t.records} records (table version {t.sink_version})"
        for t in summary.stream_tables
    ]
    if summary.dead_letters:
        lines.append(f"  {summary.dead_letters} undecodable records went to the dead-letter table")
    lines += [f"  WARNING: {f.message}" for f in summary.warnings]
    return "\n".join(lines)
