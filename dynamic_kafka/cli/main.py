# PYTHON_ARGCOMPLETE_OK (argcomplete's global completion looks for this marker in the console script's module)
"""The ``dynamic-kafka`` command: a small dispatcher over subcommand groups.

Each group lives in its own module with a ``register(subparsers)`` function that adds its parser and sets a
``handler`` (``Namespace -> exit code``) on every leaf command. To add a group, write its module and list its
``register`` in ``_GROUPS``. Exit codes are :class:`~dynamic_kafka.cli.exit_codes.ExitCode`. Errors from the
library (:class:`DynamicKafkaError`) become one paragraph on stderr and exit code 1; so does any other error (an
``OSError`` as :class:`HostError`, anything else as :class:`UnexpectedError`, its traceback logged only with
``-v``): never a traceback. Results go to stdout. With
``--json`` anywhere on the command line, errors are one JSON document on stderr instead
(``{"error": {"type", "message", "hint", "retriable"}}``), usage errors included (exit code 2), so a program reads
stdout for the result and stderr for the error, never prose.
"""

from __future__ import annotations

import argparse
import difflib
import json
import logging
import os
import re
import sys
from typing import TYPE_CHECKING, NoReturn

from dynamic_kafka.cli import backfill as cli_backfill
from dynamic_kafka.cli import check as cli_check
from dynamic_kafka.cli import dead_letters as cli_dead_letters
from dynamic_kafka.cli import health as cli_health
from dynamic_kafka.cli import init as cli_init
from dynamic_kafka.cli import maintain as cli_maintain
from dynamic_kafka.cli import offsets as cli_offsets
from dynamic_kafka.cli import pipeline as cli_pipeline
from dynamic_kafka.cli import progress as cli_progress
from dynamic_kafka.cli import publish as cli_publish
from dynamic_kafka.cli import realign as cli_realign
from dynamic_kafka.cli import spark_server as cli_spark_server
from dynamic_kafka.cli._args import CONFIG_HELP, examples, settle_config
from dynamic_kafka.cli.exit_codes import ExitCode
from dynamic_kafka.cli.failures import library_error, report_error

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

Subparsers = argparse._SubParsersAction  # argparse's own (private) type of add_subparsers()' result

# One registrar per subcommand group: it adds parsers to the top-level subparsers.
_GROUPS: tuple[Callable[[Subparsers[argparse.ArgumentParser]], None], ...] = (
    cli_backfill.register,
    cli_check.register,
    cli_dead_letters.register,
    cli_health.register,
    cli_init.register,
    cli_maintain.register,
    cli_offsets.register,
    cli_pipeline.register,
    cli_publish.register,
    cli_realign.register,
    cli_spark_server.register,
)


class CommandParser(argparse.ArgumentParser):
    """A parser whose usage errors name the closest command or option to a mistyped one ("did you mean")."""

    def error(self, message: str) -> NoReturn:
        """Print the usage error, with the closest command or option when there is one, and exit 2."""
        super().error(with_suggestion(message, self))


class JsonErrorParser(CommandParser):
    """A parser whose usage errors are a JSON document on stderr (for ``--json`` command lines)."""

    def error(self, message: str) -> NoReturn:
        """Print the usage error as ``{"error": {"type": "UsageError", "message": ...}}`` and exit 2."""
        document = {"error": {"type": "UsageError", "message": f"{self.prog}: {with_suggestion(message, self)}"}}
        print(json.dumps(document), file=sys.stderr)
        sys.exit(ExitCode.USAGE)


def with_suggestion(message: str, parser: argparse.ArgumentParser) -> str:
    """The usage error ``message`` with "did you mean" for a mistyped command (among ``parser``'s) or option (among
    every command's: argparse reports a subcommand's unknown option from the top-level parser).
    """
    choice = re.search(r"invalid choice: '([^']*)'", message)
    if choice:
        known = [str(c) for a in parser._actions if a.choices is not None for c in a.choices]
        wrong = [choice.group(1)]
    elif message.startswith("unrecognized arguments: "):
        known = sorted(_option_strings(parser))
        wrong = [w.split("=", 1)[0] for w in message.split()[2:] if w.startswith("--")]
    else:
        return message
    near = [n for w in wrong for n in difflib.get_close_matches(w, known, n=1, cutoff=0.6)]
    return f"{message}; did you mean {' '.join(near) if len(near) > 1 else repr(near[0])}?" if near else message


def _option_strings(parser: argparse.ArgumentParser) -> set[str]:
    found: set[str] = set()
    for action in parser._actions:
        found.update(o for o in action.option_strings if o.startswith("--"))
        if isinstance(action, argparse._SubParsersAction):
            for command in action.choices.values():
                found |= _option_strings(command)
    return found


def build_parser(*, json_errors: bool = False) -> argparse.ArgumentParser:
    """Return the parser of the whole command, with every registered subcommand group (``json_errors``: usage
    errors as JSON, see the module's docstring).
    """
    parser_class: type[argparse.ArgumentParser] = JsonErrorParser if json_errors else CommandParser
    parser = parser_class(
        prog="dynamic-kafka",
        description="Exactly-once batch landing of multi-cluster Kafka streams into Delta Lake.",
        **examples(_EXAMPLES),
    )
    parser.add_argument("--version", action=_Version, nargs=0, help="show program's version number and exit")
    parser.add_argument("-v", "--verbose", action="store_true", help=_VERBOSE_HELP)
    parser.add_argument("--config", dest="config_before_command", default=None, metavar="FILE", help=CONFIG_HELP)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=parser_class)
    for register in _GROUPS:
        register(subparsers)
    _verbose_anywhere(subparsers)
    return parser


_VERBOSE_HELP = "log every component's progress to stderr (before or after the command)"

_EXAMPLES = f"""\
start a project here, check it, see what a run would read, run every pipeline:
  dynamic-kafka init
  dynamic-kafka check
  dynamic-kafka plan
  dynamic-kafka run --all

exit codes:
  {ExitCode.OK:<3d} ok
  {ExitCode.FAILED:<3d} failed (the error on stderr says what to do)
  {ExitCode.USAGE:<3d} usage error (a wrong command line, a pipeline the config lacks)
  {ExitCode.CHECK_FAILED:<3d} a check failed (check found problems, a health verdict failed)
  {ExitCode.DEADLINE:<3d} a run did not stop past its max_run_seconds

shell completion (bash, zsh): eval "$(register-python-argcomplete dynamic-kafka)"
"""


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


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the process exit code."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    json_errors = "--json" in arguments
    parser = build_parser(json_errors=json_errors)
    if "_ARGCOMPLETE" in os.environ:  # a shell asks for completions: imported only then (it costs every start)
        import argcomplete

        argcomplete.autocomplete(parser)
    args = parser.parse_args(arguments)
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
        return report_error(library_error(e), json_errors=json_errors)
    except KeyboardInterrupt:
        print("dynamic-kafka: interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED


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
