"""Arguments every pipeline command shares."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse

DEFAULT_CONFIG = "dynamic_kafka.yaml"


def add_config_argument(parser: argparse.ArgumentParser) -> None:
    """Adds ``--config``, the project config file."""
    parser.add_argument("--config", default=DEFAULT_CONFIG, help=f"project config file (default {DEFAULT_CONFIG})")
