"""Arguments every pipeline command shares."""

from __future__ import annotations

import argparse
import os

DEFAULT_CONFIG = "dynamic_kafka.yaml"
CONFIG_ENV = "DYNAMIC_KAFKA_CONFIG"
"""The variable that names the project config, for the CLI as for the Dagster code location."""


CONFIG_HELP = f"project config file (default ${CONFIG_ENV}, else {DEFAULT_CONFIG}); before or after the command"


def add_config_argument(parser: argparse.ArgumentParser) -> None:
    """Adds ``--config``, the project config file; its default is filled in by :func:`settle_config`, so that a
    ``--config`` given before the command (to the top-level parser) is not overwritten by this parser's default.
    """
    parser.add_argument("--config", default=argparse.SUPPRESS, help=CONFIG_HELP)
    parser.set_defaults(takes_config=True)


def settle_config(args: argparse.Namespace, before_command: str | None) -> None:
    """Sets ``args.config`` for a command that takes one: given after the command, else before it, else
    ``$DYNAMIC_KAFKA_CONFIG``, else ``dynamic_kafka.yaml``.
    """
    if getattr(args, "takes_config", False) and not hasattr(args, "config"):
        args.config = before_command or os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG
