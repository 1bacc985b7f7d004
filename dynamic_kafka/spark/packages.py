"""The Maven packages a Spark session needs, and a record of the jars Ivy resolved for them.

spark-submit resolves ``spark.jars.packages`` with Ivy at every start, even when every jar is already in its
cache: about 4 of the 10 seconds a warm session takes to start here. The first start that resolves a set of
packages records the jar paths it got, under a key of everything that decides the resolution (packages,
exclusions, repositories, Ivy settings and cache folder). A later start with the same key, and every recorded jar
still on disk, passes those jars as ``spark.jars`` and skips Ivy; a changed setting or a deleted jar means a new
resolution and a new record.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

from dynamic_kafka._toolchain.cache import cache_dir

logger = logging.getLogger(__name__)

SCALA_VERSION = "2.13"
# The settings that change what Ivy resolves for the same packages.
_RESOLUTION_KEYS = ("spark.jars.excludes", "spark.jars.repositories", "spark.jars.ivySettings", "spark.jars.ivy")


def delta_package(spark_version: str) -> str:
    """Return Delta Lake's Maven coordinate for the installed ``delta-spark`` and Spark's minor version.

    The same coordinate ``delta.pip_utils.configure_spark_with_delta_pip`` would choose.

    Example:
        >>> delta_package("4.1.3")  # doctest: +SKIP
        'io.delta:delta-spark_4.1_2.13:4.4.0'
    """
    spark_minor = ".".join(spark_version.split(".")[:2])
    return f"io.delta:delta-spark_{spark_minor}_{SCALA_VERSION}:{metadata.version('delta-spark')}"


class ResolvedJars:
    """The recorded result of resolving ``packages`` under the resolution settings in ``conf``."""

    def __init__(self, packages: list[str], conf: dict[str, str]) -> None:
        what = {"packages": packages, **{key: conf.get(key, "") for key in _RESOLUTION_KEYS}}
        digest = hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]
        self.packages = packages
        self.path = cache_dir() / "spark-packages" / f"{digest}.json"

    def load(self) -> list[str] | None:
        """Return the recorded jar paths, or None when there is no usable record (then Ivy must resolve)."""
        try:
            jars = json.loads(self.path.read_text())["jars"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if not isinstance(jars, list) or not jars or not all(isinstance(j, str) and Path(j).is_file() for j in jars):
            return None
        return jars

    def save(self, submitted: str, own: str) -> None:
        """Record the jars spark-submit resolved: its merged ``spark.jars`` minus the ones we passed ourselves.

        Args:
            submitted: the JVM's ``spark.jars`` system property after start-up (URIs or paths, comma-separated).
            own: the ``spark.jars`` we passed in.
        """
        ours = {_local_path(j) for j in own.split(",") if j.strip()}
        jars = [p for p in (_local_path(j) for j in submitted.split(",") if j.strip()) if p not in ours]
        if not jars or not all(Path(j).is_file() for j in jars):
            logger.debug("spark-submit reported no local resolved jars; nothing recorded")
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps({"packages": self.packages, "jars": jars}, indent=2) + "\n")
        os.replace(partial, self.path)


def _local_path(jar: str) -> str:
    jar = jar.strip()
    parsed = urlparse(jar)
    return unquote(parsed.path) if parsed.scheme == "file" else jar
