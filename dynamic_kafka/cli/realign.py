"""The ``realign`` command: repair a pipeline state that is behind its sink (restored from a backup or moved).

Without ``--yes`` it only reports what it would change; with ``--yes`` it makes the change in one state commit.
See :mod:`dynamic_kafka.protocol.realign` for what it does and its consequences.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dynamic_kafka.cli._args import add_config_argument
from dynamic_kafka.cli._pipelines import add_pipeline_arguments, one_pipeline

if TYPE_CHECKING:
    import argparse

    from dynamic_kafka.protocol.realign import Realignment

HELP = "realign a pipeline's state with its sink after the state was restored from a backup or moved"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Registers ``realign``."""
    parser = subparsers.add_parser("realign", help=HELP, description=HELP)
    add_config_argument(parser)
    add_pipeline_arguments(parser)
    parser.add_argument("--yes", action="store_true", help="make the change (without it, only show it)")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    parser.set_defaults(handler=_realign)


def _realign(args: argparse.Namespace) -> int:
    result = one_pipeline(args).realign(apply=args.yes)
    print(result.model_dump_json(indent=2) if args.json else format_realignment(result))
    return 0


def format_realignment(result: Realignment) -> str:
    """What realign found and did, for people."""
    sink_run = result.sink_txn if result.sink_txn is not None else "none"
    sink_backfill = result.sink_backfill if result.sink_backfill is not None else "none"
    if not result.needed:
        return (
            f"pipeline {result.pipeline_id}: the state (run {result.state_run_seq}, backfill "
            f"{result.state_backfill}) is not behind its sink (run {sink_run}, backfill {sink_backfill}); "
            "nothing to realign."
        )
    lines = [
        f"pipeline {result.pipeline_id}: the state's last run is {result.state_run_seq} and it knows backfills up to "
        f"{result.state_backfill}, but the sink holds run {sink_run} and backfill {sink_backfill}.",
        f"  {'realigned' if result.applied else 'realign would'}: the next run_seq becomes {result.next_run_seq}; "
        "the offsets stay; the next run re-reads from them and skips what the sink already holds below:",
    ]
    lines += [f"    {partition}: offset {offset}" for partition, offset in result.frontier.items()]
    if not result.applied:
        lines.append("  nothing changed; run again with --yes to realign.")
    return "\n".join(lines)
