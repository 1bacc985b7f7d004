"""The ``python -m devtools`` command: ``SERVICE up | down | status`` for each local development service.

Each group lives in its own module with a ``register(subparsers)`` function, as the product's command does. Errors
(:class:`~devtools.errors.DevtoolsError`, and the library's :class:`~dynamic_kafka.errors.DynamicKafkaError` its
toolchain raises) become one paragraph on stderr and exit code 1; with ``--json`` anywhere on the command line they
are one JSON document on stderr instead (``{"error": {"type", "message", "hint", "retriable"}}``).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import TYPE_CHECKING

from devtools.cli import local_kafka as cli_local_kafka
from devtools.cli import local_postgres as cli_local_postgres
from devtools.cli import local_registry as cli_local_registry
from devtools.cli import local_s3 as cli_local_s3
from devtools.cli import spark_cluster as cli_spark_cluster
from devtools.cli import spark_connect as cli_spark_connect
from devtools.errors import DevtoolsError
from dynamic_kafka.cli.failures import error_document
from dynamic_kafka.cli.main import JsonErrorParser
from dynamic_kafka.errors import DynamicKafkaError

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from devtools.cli._service import Subparsers

PROG = "python -m devtools"

_GROUPS: tuple[Callable[[Subparsers[argparse.ArgumentParser]], None], ...] = (
    cli_local_kafka.register,
    cli_local_postgres.register,
    cli_local_registry.register,
    cli_local_s3.register,
    cli_spark_cluster.register,
    cli_spark_connect.register,
)


def build_parser(*, json_errors: bool = False) -> argparse.ArgumentParser:
    """Return the parser of the whole command, with every service group."""
    parser_class = JsonErrorParser if json_errors else argparse.ArgumentParser
    parser = parser_class(
        prog=PROG,
        description="Local development services of the dynamic-kafka repository (demos, tests, benchmarks): "
        "real Kafka, Schema Registry, S3 API, PostgreSQL and Spark Connect on 127.0.0.1. Not part of the product.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log every component's progress to stderr")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="SERVICE", parser_class=parser_class)
    for register in _GROUPS:
        register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the process exit code."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    json_errors = "--json" in arguments
    args = build_parser(json_errors=json_errors).parse_args(arguments)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.ERROR if json_errors else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except (DevtoolsError, DynamicKafkaError) as e:
        print(error_document(e) if json_errors else f"devtools: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("devtools: interrupted", file=sys.stderr)
        return 130


def run() -> None:
    """The ``python -m devtools`` entry: runs :func:`main`, then leaves without native teardown (as the product's
    command does: librdkafka's threads, used to create SCRAM users, were seen to abort an interpreter's shutdown).
    """
    code = main()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
