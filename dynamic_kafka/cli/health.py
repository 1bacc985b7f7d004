"""The ``health`` command: the checks between runs, against the brokers, with a non-zero exit when one fails.

A thin call of :meth:`dynamic_kafka.pipeline.Pipeline.health`, what the Dagster health job evaluates. Exit codes:
0 every verdict passed, 3 a verdict failed (the report says which), 1 the report could not be made.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dynamic_kafka.cli._args import add_config_argument, examples
from dynamic_kafka.cli._pipelines import Outcome, add_pipeline_arguments, each_pipeline
from dynamic_kafka.cli.exit_codes import ExitCode

if TYPE_CHECKING:
    import argparse

    from dynamic_kafka.pipeline import Pipeline

HELP = (
    "evaluate the lag, data-loss and freshness verdicts, idle partitions, stuck open transactions and the "
    f"event-time lag against the brokers (exit {ExitCode.CHECK_FAILED:d} when one fails)"
)
_EXAMPLES = f"""\
examples:
  dynamic-kafka health --pipeline orders
  dynamic-kafka health --all --json        every pipeline; exit {ExitCode.CHECK_FAILED:d} when a verdict of one fails
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Registers ``health``."""
    parser = subparsers.add_parser("health", help=HELP, description=HELP, **examples(_EXAMPLES))
    add_config_argument(parser)
    add_pipeline_arguments(parser, every=True)
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    parser.set_defaults(handler=_health)


def _health(args: argparse.Namespace) -> int:
    return each_pipeline(args, _health_of)


def _health_of(pipeline: Pipeline) -> Outcome:
    report = pipeline.health()
    code = ExitCode.OK if report.passed else ExitCode.CHECK_FAILED
    return Outcome(report.model_dump(mode="json"), report.text, code)
