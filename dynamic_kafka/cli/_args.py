"""Arguments every pipeline command shares."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse

DEFAULT_CONFIG = "dynamic_kafka.yaml"
CONFIG_ENV = "DYNAMIC_KAFKA_CONFIG"
"""The variable that names the project config, for the CLI as for the Dagster code location."""


def add_config_argument(parser: argparse.ArgumentParser) -> None:
    """Adds ``--config``, the project config file (default: ``$DYNAMIC_KAFKA_CONFIG``, else ``dynamic_kafka.yaml``)."""
    parser.add_argument(
        "--config",
        default=os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG,
        help=f"project config file (default ${CONFIG_ENV}, else {DEFAULT_CONFIG})",
    )
