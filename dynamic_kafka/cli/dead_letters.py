"""The ``dead-letters`` command group: ``dead-letters replay`` decodes a pipeline's dead letters again under the
current config and lands the ones that decode now in the sink, exactly once (:mod:`dynamic_kafka.operations.replay`).

Without ``--yes`` it counts what a replay would do (it decodes, and writes nothing); with it, it writes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dynamic_kafka.cli._args import add_config_argument
from dynamic_kafka.cli._pipelines import add_pipeline_arguments, one_pipeline

if TYPE_CHECKING:
    import argparse


HELP = (
    "decode a pipeline's dead letters again under the current config and land the ones that decode now in the sink, "
    "once; without --yes only count them"
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Registers ``dead-letters replay``."""
    group = subparsers.add_parser("dead-letters", help="a pipeline's dead letters", description=HELP)
    commands = group.add_subparsers(dest="dead_letters_command", required=True, metavar="COMMAND")
    replay = commands.add_parser("replay", help=HELP, description=HELP)
    add_config_argument(replay)
    add_pipeline_arguments(replay)
    replay.add_argument("--run-seq", type=int, help="only the dead letters of this run (default: all)")
    replay.add_argument("--yes", action="store_true", help="land them (without it, only count them)")
    replay.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    replay.set_defaults(handler=_replay)


def _replay(args: argparse.Namespace) -> int:
    report = one_pipeline(args).replay_dead_letters(run_seq=args.run_seq, apply=args.yes)
    print(report.model_dump_json(indent=2) if args.json else report.text())
    return 0
