"""The ``dynamic-kafka`` command: a small dispatcher over subcommand groups.

Each group lives in its own module with a ``register(subparsers)`` function that adds its parser and sets a
``handler`` (``Namespace -> exit code``) on every leaf command. To add a group, write its module and list its
``register`` in ``_GROUPS``. Errors from the library (:class:`DynamicKafkaError`) become one paragraph on stderr
and exit code 1; so does any other error (an ``OSError`` as :class:`HostError`, anything else as
:class:`UnexpectedError`, its traceback logged only with ``-v``): never a traceback. Results go to stdout. With
``--json`` anywhere on the command line, errors are one JSON document on stderr instead
(``{"error": {"type", "message", "hint", "retriable"}}``), usage errors included (exit code 2), so a program reads
stdout for the result and stderr for the error, never prose.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import TYPE_CHECKING, NoReturn, Protocol

from dynamic_kafka.cli import backfill as cli_backfill
from dynamic_kafka.cli import check as cli_check
from dynamic_kafka.cli import dead_letters as cli_dead_letters
from dynamic_kafka.cli import health as cli_health
from dynamic_kafka.cli import maintain as cli_maintain
from dynamic_kafka.cli import offsets as cli_offsets
from dynamic_kafka.cli import pipeline as cli_pipeline
from dynamic_kafka.cli import progress as cli_progress
from dynamic_kafka.cli import publish as cli_publish
from dynamic_kafka.cli import realign as cli_realign
from dynamic_kafka.cli import spark_server as cli_spark_server
from dynamic_kafka.cli._args import CONFIG_HELP, settle_config
from dynamic_kafka.errors import DynamicKafkaError, UnexpectedError, as_library_error
from dynamic_kafka.secrets import mask_secrets

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

_LOG = logging.getLogger(__name__)

Subparsers = argparse._SubParsersAction  # argparse's own (private) type of add_subparsers()' result

# One registrar per subcommand group: it adds parsers to the top-level subparsers.
_GROUPS: tuple[Callable[[Subparsers[argparse.ArgumentParser]], None], ...] = (
    cli_backfill.register,
    cli_check.register,
    cli_dead_letters.register,
    cli_health.register,
    cli_maintain.register,
    cli_offsets.register,
    cli_pipeline.register,
    cli_publish.register,
    cli_realign.register,
    cli_spark_server.register,
)


class JsonErrorParser(argparse.ArgumentParser):
    """A parser whose usage errors are a JSON document on stderr (for ``--json`` command lines)."""

    def error(self, message: str) -> NoReturn:
        """Print the usage error as ``{"error": {"type": "UsageError", "message": ...}}`` and exit 2."""
        print(json.dumps({"error": {"type": "UsageError", "message": f"{self.prog}: {message}"}}), file=sys.stderr)
        sys.exit(2)


def build_parser(*, json_errors: bool = False) -> argparse.ArgumentParser:
    """Return the parser of the whole command, with every registered subcommand group (``json_errors``: usage
    errors as JSON, see the module's docstring).
    """
    parser_class = JsonErrorParser if json_errors else argparse.ArgumentParser
    parser = parser_class(
        prog="dynamic-kafka",
        description="Exactly-once batch landing of multi-cluster Kafka streams into Delta Lake.",
    )
    parser.add_argument("--version", action=_Version, nargs=0, help="show program's version number and exit")
    parser.add_argument("-v", "--verbose", action="store_true", help=_VERBOSE_HELP)
    parser.add_argument("--config", dest="config_before_command", default=None, help=CONFIG_HELP)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=parser_class)
    for register in _GROUPS:
        register(subparsers)
    _verbose_anywhere(subparsers)
    return parser


_VERBOSE_HELP = "log every component's progress to stderr (before or after the command)"


class _Version(argparse.Action):
    """``--version``: the installed distribution's version, looked up only when asked (``importlib.metadata``
    costs every other command's start tens of milliseconds).
    """

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> NoReturn:
        import importlib.metadata

        print(f"{parser.prog} {importlib.metadata.version('dynamic-kafka')}")
        parser.exit()


def _verbose_anywhere(subparsers: Subparsers[argparse.ArgumentParser]) -> None:
    """Lets every command take ``-v`` after its name too. SUPPRESS: a command's parser that was not given ``-v``
    leaves the top-level parser's value alone.
    """
    for command in subparsers.choices.values():
        nested = [a for a in command._actions if isinstance(a, argparse._SubParsersAction)]
        for group in nested:
            _verbose_anywhere(group)
        if not nested:
            command.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help=_VERBOSE_HELP)


class ExplainedError(Protocol):
    """An error that carries its fix and whether to retry (the library's errors; the dev tools' follow suit)."""

    hint: str | None
    retriable: bool


def error_document(error: ExplainedError) -> str:
    """An error as the one-line JSON document ``--json`` prints on stderr (never a secret: messages hold none)."""
    message = str(error).removesuffix(f" {error.hint}") if error.hint else str(error)
    body = {"type": type(error).__name__, "message": message, "hint": error.hint, "retriable": error.retriable}
    return json.dumps({"error": body})


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the process exit code."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    json_errors = "--json" in arguments
    args = build_parser(json_errors=json_errors).parse_args(arguments)
    settle_config(args, args.config_before_command)
    logging.basicConfig(
        # With --json, stderr carries the error document alone: warnings are in the result (findings) already.
        level=logging.INFO if args.verbose else logging.ERROR if json_errors else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        with cli_progress.shown(json_output=json_errors):
            return handler(args)
    except Exception as e:  # the CLI's last line: an error, never a traceback
        error = as_library_error(e)
        if error is not e:
            _LOG.info("the original error, in full", exc_info=True)
        return _failed(error or UnexpectedError(e), json_errors=json_errors)
    except KeyboardInterrupt:
        print("dynamic-kafka: interrupted", file=sys.stderr)
        return 130


def _failed(error: DynamicKafkaError, *, json_errors: bool) -> int:
    """Print ``error`` as one paragraph (or its JSON document) on stderr, secrets masked; the exit code."""
    text = error_document(error) if json_errors else f"dynamic-kafka: error: {error}"
    print(mask_secrets(text), file=sys.stderr)
    return 1


def run() -> None:
    """The console script: runs :func:`main`, then leaves the process without native teardown.

    Every result is durable (Delta commits) and printed by the time ``main`` returns. What is left is the
    interpreter's shutdown, where the native thread pools of pyarrow, delta-rs and librdkafka were seen to abort the
    process (``terminate called without an active exception``, exit -6) after a successful run, which a scheduler
    would read as a failure. So Spark is stopped cleanly, output flushed, and the process exits with the real code.
    """
    code = main()
    if "pyspark" in sys.modules:
        from dynamic_kafka.spark.session import stop_spark_session

        stop_spark_session()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run()
