"""The ``check`` command: validate a project's config and metadata files offline, every problem at once.

Exit code 0 when there is none, 3 otherwise (1 when the check itself failed); see :mod:`dynamic_kafka.operations.check`
and :mod:`dynamic_kafka.operations.check_online` for what is checked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dynamic_kafka.cli._args import add_config_argument, examples
from dynamic_kafka.cli.exit_codes import ExitCode

if TYPE_CHECKING:
    import argparse

    from dynamic_kafka.operations.check import CheckReport

HELP = (
    "validate the config and metadata files offline and list every problem (contacts nothing); with --online, "
    "also plan each pipeline against its brokers (missing topics, unreachable clusters, refused credentials)"
)
_EXAMPLES = f"""\
examples:
  dynamic-kafka check                                 dynamic_kafka.yaml here (or $DYNAMIC_KAFKA_CONFIG)
  dynamic-kafka check --config prod.yaml --json       in CI: exit {ExitCode.CHECK_FAILED:d} when a problem is found
  dynamic-kafka check --online                        also ask the brokers
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Registers ``check``."""
    parser = subparsers.add_parser("check", help=HELP, description=HELP, **examples(_EXAMPLES))
    add_config_argument(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    parser.add_argument(
        "--online", action="store_true", help="also plan each pipeline against its brokers (reads, writes nothing)"
    )
    parser.set_defaults(handler=_check)


def _check(args: argparse.Namespace) -> int:
    # Imported here: every other command's start would load the checks' code.
    from dynamic_kafka.operations import check

    report = check.check_project(args.config)
    if args.online:
        from dynamic_kafka.operations.check_online import check_online

        report = check_online(report)
    print(report.model_dump_json(indent=2) if args.json else format_report(report))
    return ExitCode.OK if report.ok else ExitCode.CHECK_FAILED


def format_report(report: CheckReport) -> str:
    """The problems grouped by file, then the notes; or a one-line all-clear."""
    lines = []
    if report.ok:
        pipelines = ", ".join(report.pipelines) or "none"
        lines.append(f"ok: {' and '.join(report.files)} (pipelines: {pipelines}; streams: {len(report.streams)})")
    else:
        count = len(report.problems)
        lines.append(f"{count} problem{'s' if count != 1 else ''} found:")
        for file in dict.fromkeys(p.file for p in report.problems):
            lines.append(f"{file}:")
            lines += [f"  {p.location}: {p.message}" for p in report.problems if p.file == file]
    lines += [f"note: {note}" for note in report.notes]
    return "\n".join(lines)
