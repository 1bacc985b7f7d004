"""Arguments every pipeline command shares."""

from __future__ import annotations

import argparse
import os
from typing import Any

DEFAULT_CONFIG = "dynamic_kafka.yaml"
CONFIG_ENV = "DYNAMIC_KAFKA_CONFIG"
"""The variable that names the project config, for the CLI as for the Dagster code location."""


CONFIG_HELP = f"project config file (default ${CONFIG_ENV}, else {DEFAULT_CONFIG}); before or after the command"


def add_config_argument(parser: argparse.ArgumentParser) -> None:
    """Adds ``--config``, the project config file; its default is filled in by :func:`settle_config`, so that a
    ``--config`` given before the command (to the top-level parser) is not overwritten by this parser's default.
    """
    parser.add_argument("--config", default=argparse.SUPPRESS, metavar="FILE", help=CONFIG_HELP)
    parser.set_defaults(takes_config=True)


def settle_config(args: argparse.Namespace, before_command: str | None) -> None:
    """Sets ``args.config`` for a command that takes one: given after the command, else before it, else
    ``$DYNAMIC_KAFKA_CONFIG``, else ``dynamic_kafka.yaml``.
    """
    if getattr(args, "takes_config", False) and not hasattr(args, "config"):
        args.config = before_command or os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG


class _ExamplesFormatter(argparse.HelpFormatter):
    """Wraps one-paragraph descriptions as argparse does, and prints text of several lines (the examples) as
    written, as :class:`argparse.RawDescriptionHelpFormatter` does.
    """

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" not in text:
            return super()._fill_text(text, width, indent)
        return "".join(indent + line for line in text.splitlines(keepends=True))


def examples(text: str) -> dict[str, Any]:
    r"""The keyword arguments that give a parser ``text`` (command lines, one per line) as the epilog of its help.

    Example:
        >>> parser = argparse.ArgumentParser(prog="x", **examples("examples:\n  x --all\n"))
        >>> parser.format_help().endswith("examples:\n  x --all\n")
        True
    """
    return {"epilog": text, "formatter_class": _ExamplesFormatter}
