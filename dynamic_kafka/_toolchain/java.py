"""The machine's Java: in-process Spark runs in it, and Ivy fetches Spark's jars with it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from dynamic_kafka.errors import ToolchainError

MIN_JAVA_MAJOR = 17
INSTALL_JAVA_HINT = (
    f"Install Java {MIN_JAVA_MAJOR} or newer (Debian/Ubuntu: `apt-get install openjdk-17-jre-headless`; macOS: "
    "`brew install openjdk@17`) and put it on PATH or set JAVA_HOME; or set spark.remote to use a Spark Connect "
    "server instead."
)


def parse_java_major(version_output: str) -> int | None:
    """Return the major version from ``java -version`` output (``"1.8.0_292"`` is 8), or None if absent."""
    match = re.search(r'version "([0-9]+)(?:\.([0-9]+))?', version_output)
    if not match:
        return None
    major = int(match.group(1))
    if major == 1 and match.group(2):
        return int(match.group(2))
    return major


def find_java() -> Path:
    """Return a Java 17+ executable: ``$JAVA_HOME/bin/java`` if set, else ``java`` on PATH.

    Raises:
        ToolchainError: no Java, or a Java older than 17.
    """
    java_home = os.environ.get("JAVA_HOME")
    candidate = Path(java_home) / "bin" / "java" if java_home else None
    found = str(candidate) if candidate and candidate.is_file() else shutil.which("java")
    if not found:
        raise ToolchainError(
            "Java was not found (no $JAVA_HOME/bin/java, no `java` on PATH); in-process Spark and the download of "
            f"its jars need Java {MIN_JAVA_MAJOR}+.",
            hint=INSTALL_JAVA_HINT,
        )
    try:
        result = subprocess.run([found, "-version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ToolchainError(f"could not run `{found} -version`: {e}.") from e
    major = parse_java_major(result.stderr + result.stdout)
    if major is None or major < MIN_JAVA_MAJOR:
        seen = (result.stderr or result.stdout).strip().splitlines()
        raise ToolchainError(
            f"{found} is not Java {MIN_JAVA_MAJOR}+ (it reports: {seen[0] if seen else 'nothing'}).",
            hint=INSTALL_JAVA_HINT,
        )
    return Path(found)
