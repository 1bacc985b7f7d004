"""Loading a user's Python code named in config as ``package.module:attribute`` (a metadata service factory, a
custom offsets initializer).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from dynamic_kafka.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Callable


def load_callable(import_path: str, setting: str) -> Callable[..., Any]:
    """The callable ``import_path`` names (``package.module:name``, dots after the colon reach attributes).

    Raises:
        ConfigError: the module cannot be imported, the attribute is missing, or it is not callable; names
            ``setting``, the config key that holds the path.
    """
    module_name, _, attribute = import_path.partition(":")
    try:
        target: object = importlib.import_module(module_name)
        for part in attribute.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as e:
        raise ConfigError(
            f"{setting} {import_path!r} cannot be loaded: {e}.",
            hint="Use 'package.module:name' for an importable module on PYTHONPATH.",
        ) from e
    if not callable(target):
        raise ConfigError(f"{setting} {import_path!r} is not callable.")
    return target
