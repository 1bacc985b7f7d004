"""This repository's Dagster code location (``workspace.yaml``): ``defs`` for the project config named by
``$DYNAMIC_KAFKA_CONFIG``, else ``dynamic_kafka.yaml`` in the working directory, else the demo's
(``examples/demo/dynamic_kafka.yaml``). The definitions come from the product's integration,
:func:`dynamic_kafka.dagster.build_definitions`; this module only chooses the config. Not in the wheel.

Loading reads the config file and nothing else: no secret, no metadata service, no broker, no Spark.
"""

import os
from pathlib import Path

from dynamic_kafka import ConfigError
from dynamic_kafka.dagster import build_definitions

CONFIG_ENV = "DYNAMIC_KAFKA_CONFIG"
DEFAULT_CONFIG = "dynamic_kafka.yaml"
# The demo project, loaded when nothing names a config and the working directory has none (a new user's first
# `dagster dev` in the repository root).
DEMO_CONFIG = Path(__file__).resolve().parents[1] / "examples" / "demo" / "dynamic_kafka.yaml"


def config_path_from_env() -> Path:
    """The project config the workspace loads, made absolute.

    ``$DYNAMIC_KAFKA_CONFIG`` when set (it must exist), else ``dynamic_kafka.yaml`` in the working directory when
    there is one, else the demo's config (``examples/demo/dynamic_kafka.yaml``).

    Raises:
        ConfigError: ``$DYNAMIC_KAFKA_CONFIG`` names a file that does not exist; one line naming the variable and
            the example to copy.
    """
    named = os.environ.get(CONFIG_ENV)
    if named:
        path = Path(named).expanduser().resolve()
        if not path.is_file():
            raise ConfigError(
                f"${CONFIG_ENV} names {path}, which does not exist.",
                hint=f"Copy {DEMO_CONFIG} there and edit it, or unset ${CONFIG_ENV} to load the demo.",
            )
        return path
    local = Path(DEFAULT_CONFIG).resolve()
    if local.is_file() or not DEMO_CONFIG.is_file():
        return local
    return DEMO_CONFIG


defs = build_definitions(config_path_from_env())
