"""The ``offsets`` command group: ``offsets show`` lists a pipeline's committed offsets against the brokers.

Per cluster, topic (with its topic id) and partition: the next offset the pipeline reads, the broker's earliest and
latest offsets, the lag, the partition's state and the last run that moved it. Like ``status``, it fails (exit 1)
when a cluster does not answer, after printing what it knows.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from dynamic_kafka.cli._args import add_config_argument
from dynamic_kafka.errors import ClusterUnreachableError
from dynamic_kafka.pipeline import Pipeline

if TYPE_CHECKING:
    import argparse

    from dynamic_kafka.status import PipelineStatus

HELP = "show per partition the committed next offset, the broker's earliest and latest, the lag and the last run"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Registers ``offsets show``."""
    group = subparsers.add_parser("offsets", help="a pipeline's committed offsets", description=HELP)
    commands = group.add_subparsers(dest="offsets_command", required=True, metavar="COMMAND")
    show = commands.add_parser("show", help=HELP, description=HELP)
    add_config_argument(show)
    show.add_argument("--pipeline", required=True, help="pipeline id from the config")
    show.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    show.set_defaults(handler=_show)


def _show(args: argparse.Namespace) -> int:
    status = Pipeline.from_config(args.config, args.pipeline).offsets()
    rows = [p.model_dump(mode="json") for p in status.partitions]
    document = {"pipeline_id": status.pipeline_id, "never_ran": status.never_ran, "partitions": rows}
    print(json.dumps(document, indent=2) if args.json else format_offsets(status))
    if status.unreachable_clusters:
        names = ", ".join(status.unreachable_clusters)
        raise ClusterUnreachableError(
            "no answer from the brokers, so their earliest and latest offsets are unknown.",
            cluster_id=names,
            hint=f"Check that the brokers run and that the metadata's bootstrap_servers and properties for {names} "
            "are right (`dynamic-kafka check` validates the files).",
        )
    return 0


def format_offsets(status: PipelineStatus) -> str:
    """The offsets table for people."""
    if status.never_ran:
        return f"pipeline {status.pipeline_id} has never run: no offsets are committed yet"
    lines = [
        f"  {'cluster':<10} {'topic':<20} {'topic id':<24} {'part':>4} {'next':>10} {'earliest':>10} "
        f"{'latest':>10} {'lag':>8}  {'state':<8} last run"
    ]
    for p in status.partitions:
        shown = ["?" if v is None else str(v) for v in (p.earliest_offset, p.latest_offset, p.lag)]
        lines.append(
            f"  {p.cluster_id:<10} {p.topic:<20} {p.topic_id or '-':<24} {p.partition:>4} {p.next_offset:>10} "
            f"{shown[0]:>10} {shown[1]:>10} {shown[2]:>8}  {p.status:<8} {p.updated_run_seq}"
        )
    return f"pipeline {status.pipeline_id}:\n" + "\n".join(lines)
