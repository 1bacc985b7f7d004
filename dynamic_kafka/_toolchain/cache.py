"""Where dynamic-kafka keeps downloaded jars between runs.

One root holds every cache (Kafka jars, the Maven repository they come from, Spark's Ivy cache), so deleting
that one folder gives a cold start and nothing else on the machine is touched.
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "DYNAMIC_KAFKA_CACHE"


def cache_dir() -> Path:
    """Return the cache root: ``$DYNAMIC_KAFKA_CACHE``, else ``$XDG_CACHE_HOME/dynamic-kafka``.

    ``XDG_CACHE_HOME`` defaults to ``~/.cache``. The folder is not created here.
    """
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "dynamic-kafka"
