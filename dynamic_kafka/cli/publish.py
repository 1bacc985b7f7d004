"""The ``publish`` command: publish a Delta table's new rows to its stream (``--dry-run``: show what would be
sent), and ``publish status``: the last version published and what is behind.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from dynamic_kafka.cli._args import add_config_argument
from dynamic_kafka.cli._pipelines import choose

if TYPE_CHECKING:
    import argparse

    from dynamic_kafka.publish.publisher import Publication, PublicationPlan, PublicationStatus

HELP = "publish the rows a Delta table gained since the last run to its stream, exactly once"
STATUS_HELP = "show the last table version published, and the versions and rows behind"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Registers ``publish`` and ``publish status``."""
    parser = subparsers.add_parser("publish", help=HELP, description=HELP)
    _common(parser)
    parser.add_argument("--dry-run", action="store_true", help="show what would be sent; fence and send nothing")
    parser.set_defaults(handler=_publish)
    commands = parser.add_subparsers(dest="publish_command", metavar="status")
    status = commands.add_parser("status", help=STATUS_HELP, description=STATUS_HELP)
    _common(status)
    status.set_defaults(handler=_status)


def _common(parser: argparse.ArgumentParser) -> None:
    add_config_argument(parser)
    parser.add_argument(
        "--publication", help="publication id from the config (may be left out when the config has one publication)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")


def _publication(args: argparse.Namespace) -> Publication:
    from dynamic_kafka.config.loader import load_project_config

    # Imported here: publishing reads tables with pyarrow's datasets, which no other command needs.
    from dynamic_kafka.publish.publisher import Publication

    project = load_project_config(args.config)
    return Publication(
        project, choose("publication", args.publication, [p.id for p in project.publications], args.config)
    )


def _publish(args: argparse.Namespace) -> int:
    publication = _publication(args)
    if args.dry_run:
        plan = publication.plan()
        print(plan.model_dump_json(indent=2) if args.json else format_plan(plan))
        return 0
    outcome = publication.publish()
    if args.json:
        print(outcome.model_dump_json(indent=2))
    else:
        moved = " (the writes moved here)" if outcome.moved else ""
        print(
            f"publication {publication.config.id}: {outcome.records} records in {outcome.transactions} transaction(s) "
            f"to {outcome.cluster_id}/{outcome.topic}{moved}; next version {outcome.next_version}"
        )
    return 0


def _status(args: argparse.Namespace) -> int:
    status = _publication(args).status()
    print(status.model_dump_json(indent=2) if args.json else format_status(status))
    return 0


def format_plan(plan: PublicationPlan) -> str:
    """A dry run as text: where, which versions, how many rows, and the first records."""
    moved = ", moving the writes there" if plan.moves_to_cluster else ""
    lines = [
        f"publication {plan.publication_id}: {plan.table} -> stream {plan.stream_id} on {plan.cluster_id}/"
        f"{plan.topic}{moved}",
        f"  would publish versions {plan.next_version}..{plan.latest_version}: {plan.rows} rows in "
        f"{plan.transactions} transaction(s)"
        if plan.versions
        else f"  nothing to publish (next version {plan.next_version}, table version {plan.latest_version})",
    ]
    lines += [f"  version {v.version}: {v.rows} rows" for v in plan.versions]
    lines += [f"  record: {json.dumps(r)}" for r in plan.sample]
    return "\n".join(lines)


def format_status(status: PublicationStatus) -> str:
    """A publication's status as text."""
    last = "none yet" if status.last_published_version is None else str(status.last_published_version)
    lines = [
        f"publication {status.publication_id}: {status.table} -> stream {status.stream_id} on "
        f"{status.cluster_id}/{status.topic}",
        f"  last version published: {last}; table version: {status.latest_version}",
        f"  behind: {status.versions_behind} version(s), {status.rows_behind} rows",
    ]
    lines += [f"  move {m.move_seq}: to {m.cluster_id}/{m.topic} from version {m.start_version}" for m in status.moves]
    return "\n".join(lines)
