"""The shape every local-service command group shares: ``NAME up | down | status`` with a ``--base-dir`` each.

Each group (``local-kafka``, ``local-registry``, ``local-s3``, ``local-postgres``, ``spark-connect``) adds its own
arguments and handlers to the three parsers :func:`service_commands` returns.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

Subparsers = argparse._SubParsersAction  # argparse's own (private) type of add_subparsers()' result


@dataclass(frozen=True)
class ServiceCommands:
    """The ``up``, ``down`` and ``status`` parsers of one service group."""

    up: argparse.ArgumentParser
    down: argparse.ArgumentParser
    status: argparse.ArgumentParser


def service_commands(
    subparsers: Subparsers[argparse.ArgumentParser],
    name: str,
    *,
    help_text: str,
    description: str,
    base_dir_help: str,
    up_help: str,
    down_help: str,
    status_help: str,
) -> ServiceCommands:
    """Add the group ``name`` with its ``up``, ``down`` and ``status`` commands, each taking ``--base-dir``."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--base-dir", type=Path, default=None, help=base_dir_help)
    group = subparsers.add_parser(name, help=help_text, description=description)
    dest = f"{name.replace('-', '_')}_command"
    commands = group.add_subparsers(dest=dest, required=True, metavar="{up,down,status}")
    return ServiceCommands(
        up=commands.add_parser("up", parents=[common], help=up_help),
        down=commands.add_parser("down", parents=[common], help=down_help),
        status=commands.add_parser("status", parents=[common], help=status_help),
    )
