"""Apicurio Registry's distribution from Maven Central: downloaded once, verified, unpacked into the shared cache.

Why not ``mvn``: the distribution (``io.apicurio:apicurio-registry-app:<version>``, classifier ``all``, type
``zip``) is on Central, but the parent pom of 3.0.9 (``io.apicurio:apicurio-registry:3.0.9``) is not, so Maven
refuses to resolve the zip ("Failed to read artifact descriptor"). The zip needs nothing from its pom, so it is
fetched over HTTPS from the same repository and checked against the SHA-512 Central publishes beside it: the same
guarantee as ``mvn -C``. The repository can be pointed at a mirror with ``$DYNAMIC_KAFKA_MAVEN_REPOSITORY``.

Layout under the cache root (see :mod:`dynamic_kafka.cache`)::

    apicurio-registry-<version>/apicurio-registry-app-<version>-runner.jar
    apicurio-registry-<version>/lib/...
    apicurio-registry-<version>/dist.complete      written last: later calls are offline
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
import urllib.error
import urllib.request
import zipfile
from typing import TYPE_CHECKING

from dynamic_kafka._toolchain.cache import cache_dir
from dynamic_kafka._toolchain.filelock import exclusive_lock
from dynamic_kafka.errors import ToolchainError

if TYPE_CHECKING:
    from pathlib import Path

logger = logging.getLogger(__name__)

DEFAULT_REGISTRY_VERSION = "3.0.9"
REPOSITORY_ENV = "DYNAMIC_KAFKA_MAVEN_REPOSITORY"
DEFAULT_REPOSITORY = "https://repo.maven.apache.org/maven2"
DOWNLOAD_TIMEOUT_S = 120.0
_MARKER = "dist.complete"
_CHUNK = 1 << 20


def runner_jar(version: str) -> str:
    """Return the file name of the Quarkus runner jar inside the distribution of ``version``."""
    return f"apicurio-registry-app-{version}-runner.jar"


def artifact_path(version: str) -> str:
    """Return the distribution zip's path inside a Maven repository."""
    return f"io/apicurio/apicurio-registry-app/{version}/apicurio-registry-app-{version}-all.zip"


def resolve_registry_distribution(version: str = DEFAULT_REGISTRY_VERSION) -> Path:
    """Return the folder holding Apicurio Registry's runner jar and ``lib/``, downloading it on first use.

    Safe to call from several processes at once: one downloads, the others wait and reuse its result.

    Args:
        version: the Apicurio Registry release.

    Returns:
        The unpacked distribution folder (``<cache>/apicurio-registry-<version>``).

    Raises:
        ToolchainError: Maven Central is unreachable and nothing is cached, or the download does not match its
            published checksum.
    """
    home = cache_dir() / f"apicurio-registry-{version}"
    if (home / _MARKER).is_file():
        return home
    with exclusive_lock(cache_dir() / f"apicurio-registry-{version}.lock"):
        if (home / _MARKER).is_file():
            return home
        repository = os.environ.get(REPOSITORY_ENV, DEFAULT_REPOSITORY).rstrip("/")
        if not repository.startswith(("https://", "http://")):
            raise ToolchainError(f"${REPOSITORY_ENV} must be an http(s) URL, not {repository!r}.")
        url = f"{repository}/{artifact_path(version)}"
        logger.info("downloading Apicurio Registry %s from %s into %s (first use only)", version, url, home)
        began = time.monotonic()
        expected = _fetch_text(url + ".sha512", version).split()[0].lower()
        partial = cache_dir() / f"apicurio-registry-{version}.zip.part"
        actual = _download(url, partial, version)
        if actual != expected:
            partial.unlink(missing_ok=True)
            raise ToolchainError(
                f"the Apicurio Registry {version} download from {url} does not match its published SHA-512 "
                f"(got {actual[:16]}..., expected {expected[:16]}...).",
                hint="Try again; if it repeats, check the proxy or mirror in $" + REPOSITORY_ENV + ".",
            )
        shutil.rmtree(home, ignore_errors=True)
        staging = home.with_name(home.name + ".unpacking")
        shutil.rmtree(staging, ignore_errors=True)
        with zipfile.ZipFile(partial) as archive:
            archive.extractall(staging)
        partial.unlink()
        if not (staging / runner_jar(version)).is_file():
            raise ToolchainError(f"the Apicurio Registry {version} distribution has no {runner_jar(version)}.")
        staging.rename(home)
        libs = sorted(p.name for p in (home / "lib").glob("*.jar"))
        (home / _MARKER).write_text(json.dumps({"url": url, "sha512": expected, "jars": len(libs)}, indent=2) + "\n")
        logger.info("Apicurio Registry %s ready in %.1fs (%d jars)", version, time.monotonic() - began, len(libs))
    return home


def _fetch_text(url: str, version: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response:  # noqa: S310 (scheme checked)
            text: str = response.read().decode("ascii", errors="replace")
    except (urllib.error.URLError, OSError) as e:
        raise _unreachable(url, version, e) from e
    return text


def _download(url: str, target: Path, version: str) -> str:
    digest = hashlib.sha512()
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        with (
            urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response,  # noqa: S310 (scheme checked)
            target.open("wb") as out,
        ):
            while chunk := response.read(_CHUNK):
                digest.update(chunk)
                out.write(chunk)
    except (urllib.error.URLError, OSError) as e:
        target.unlink(missing_ok=True)
        raise _unreachable(url, version, e) from e
    return digest.hexdigest()


def _unreachable(url: str, version: str, error: Exception) -> ToolchainError:
    return ToolchainError(
        f"could not download Apicurio Registry {version} from {url}: {error}; nothing is cached in "
        f"{cache_dir() / f'apicurio-registry-{version}'}.",
        hint=f"Check the network (or point ${REPOSITORY_ENV} at a Maven mirror) and try again.",
    )
