"""The ``dead-letters`` command group: ``dead-letters replay`` decodes a pipeline's dead letters again under the
current config and lands the ones that decode now in the sink, exactly once (:mod:`dynamic_kafka.dead_letters`).

Without ``--yes`` it counts what a replay would do (it decodes, and writes nothing); with it, it writes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dynamic_kafka.cli._args import add_config_argument
from dynamic_kafka.cli._pipelines import add_pipeline_arguments, one_pipeline

if TYPE_CHECKING:
    import argparse

    from dynamic_kafka.dead_letters import ReplayReport

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
    print(report.model_dump_json(indent=2) if args.json else format_replay(report))
    return 0


def format_replay(report: ReplayReport) -> str:
    """What a replay found and did, for people."""
    which = f"of run {report.replay.run_seq}" if report.replay.run_seq is not None else "in all"
    if not report.dead_letters:
        return f"pipeline {report.pipeline_id}: no dead letters {which}; nothing to replay."
    r = report.replay
    verb = "replayed" if report.applied else "a replay would land"
    lines = [
        f"pipeline {report.pipeline_id}: {report.dead_letters} dead letter(s) {which} decoded again under the "
        f"current config:",
        f"  {verb} {r.replayed} into the sink"
        + (f" (replay {r.replay_seq}" if report.applied else "")
        + (f", sink version {r.sink_version})" if report.applied and r.sink_version is not None else "")
        + (")" if report.applied and r.sink_version is None else ""),
    ]
    if r.already_landed:
        lines.append(
            f"  {r.already_landed} were in the sink already (an interrupted replay): removed, not landed twice"
        )
    if r.still_undecodable:
        lines.append(f"  {r.still_undecodable} still do not decode: kept, with their new error")
    if r.conflicting:
        lines.append(f"  {r.conflicting} decode but the sink holds another record at their coordinates: kept")
    if report.applied:
        recorded = f"recorded as run {report.history_run_seq}" if report.history_run_seq else "nothing recorded"
        lines.append(f"  {recorded} (by {report.requested_by})")
    else:
        lines.append("  nothing changed; run again with --yes to replay.")
    return "\n".join(lines)
