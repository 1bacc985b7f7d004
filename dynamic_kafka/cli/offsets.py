"""The ``offsets`` command group: ``offsets show`` lists a pipeline's committed offsets against the brokers;
``offsets reset`` moves them between runs (:mod:`dynamic_kafka.operations.offsets_reset`).

``show``: per cluster, topic (with its topic id) and partition: the next offset the pipeline reads, the broker's
earliest and latest offsets, the lag, the partition's state (``reset`` while a reset's offset waits for its next
run) and the last run that moved it. Like ``status``, it fails (exit 1) when a cluster does not answer, after
printing what it knows.

``reset``: without ``--yes`` it prints what would change; with it, one state commit recorded in the run history.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from dynamic_kafka.cli._args import add_config_argument
from dynamic_kafka.cli._pipelines import add_pipeline_arguments, one_pipeline
from dynamic_kafka.errors import ClusterUnreachableError

if TYPE_CHECKING:
    import argparse


HELP = "show per partition the committed next offset, the broker's earliest and latest, the lag and the last run"
RESET_HELP = (
    "move a pipeline's committed next offsets (between runs), recorded in its run history with the reason; "
    "without --yes only show what would change"
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Registers ``offsets show``."""
    group = subparsers.add_parser("offsets", help="a pipeline's committed offsets", description=HELP)
    commands = group.add_subparsers(dest="offsets_command", required=True, metavar="COMMAND")
    show = commands.add_parser("show", help=HELP, description=HELP)
    add_config_argument(show)
    add_pipeline_arguments(show)
    show.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    show.set_defaults(handler=_show)
    reset = commands.add_parser("reset", help=RESET_HELP, description=RESET_HELP)
    add_config_argument(reset)
    add_pipeline_arguments(reset)
    reset.add_argument(
        "--to",
        required=True,
        help="earliest | latest | timestamp:<ISO-8601 or epoch ms> (the first offset at or after it) | offset:<N>",
    )
    reset.add_argument("--cluster", help="only this cluster's partitions (also one the streams no longer list)")
    reset.add_argument("--topic", help="only this topic's partitions")
    reset.add_argument("--partition", type=int, help="only this partition")
    reset.add_argument("--reason", required=True, help="why (recorded in the state's run history)")
    reset.add_argument("--yes", action="store_true", help="make the change (without it, only show it)")
    reset.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    reset.set_defaults(handler=_reset)


def _show(args: argparse.Namespace) -> int:
    status = one_pipeline(args).offsets()
    rows = [p.model_dump(mode="json") for p in status.partitions]
    document = {"pipeline_id": status.pipeline_id, "never_ran": status.never_ran, "partitions": rows}
    print(json.dumps(document, indent=2) if args.json else status.offsets_text())
    if status.unreachable_clusters:
        names = ", ".join(status.unreachable_clusters)
        raise ClusterUnreachableError(
            "no answer from the brokers, so their earliest and latest offsets are unknown.",
            cluster_id=names,
            hint=f"Check that the brokers run and that the metadata's bootstrap_servers and properties for {names} "
            "are right (`dynamic-kafka check` validates the files).",
        )
    return 0


def _reset(args: argparse.Namespace) -> int:
    pipeline = one_pipeline(args)
    result = pipeline.reset_offsets(
        args.to, args.reason, cluster=args.cluster, topic=args.topic, partition=args.partition, apply=args.yes
    )
    print(result.model_dump_json(indent=2) if args.json else result.text())
    return 0
