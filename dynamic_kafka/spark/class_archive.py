"""A class data sharing (CDS) archive for the Spark driver's JVM.

A fresh Spark process spends most of its first seconds loading, verifying and linking the classes of Spark, Delta
and the Kafka connector. Java 13 and later can record the classes a JVM loaded into an archive when it exits
(``-XX:ArchiveClassesAtExit``) and map that archive at the next start (``-XX:SharedArchiveFile``). Measured here
(2 cores, Java 17): the session starts ~2.5 s sooner and its first Delta write takes ~2.5 s less.

An archive only fits the JVM binary and the classpath it was recorded with, so its key is the java binary,
pyspark's version and install folder, and the session's jars (with their sizes and times). It is recorded once
per key by a background process at low priority (``python -m dynamic_kafka.spark.class_archive_recorder KEY``, see
:mod:`dynamic_kafka.spark.class_archive_recorder`): it starts a session, writes and reads a tiny Delta table, closes
the JVM's stdin so that it exits and writes the archive, and renames the archive into place only after that JVM
exited with status 0, so no run maps a half-written file. A JVM that finds the archive unusable
runs without it (Java's default ``-Xshare:auto``), so the archive can only make a start faster. Each recording
also deletes the archives no JVM can use any more (their java or pyspark folder is gone), ~180 MB each.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from dynamic_kafka._toolchain.cache import cache_dir
from dynamic_kafka._toolchain.process import is_alive, spawn_detached

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

logger = logging.getLogger(__name__)

RECORD_ENV = "DYNAMIC_KAFKA_CDS_RECORD"
# The recorder's module (named, not imported: it imports the session, which imports this module).
RECORDER_MODULE = "dynamic_kafka.spark.class_archive_recorder"
JAR_SETTINGS_ENV = "DYNAMIC_KAFKA_CDS_JAR_SETTINGS"
# The JVM's warnings about classes it cannot archive (signed jars, old bytecode) are noise for a user.
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def _file_stamp(path: str) -> list[int] | None:
    """A file's size and modification time (ns), or None when it is not a local file (a URL, a missing path)."""
    try:
        stat = Path(path).stat()
    except (OSError, ValueError):
        return None
    return [stat.st_size, stat.st_mtime_ns]


class ClassArchive:
    """The CDS archive for a session with ``jars`` on the given java and pyspark."""

    def __init__(
        self, jars: Sequence[str], *, spark_version: str, spark_home: str | None = None, java: str | None = None
    ) -> None:
        java = java or _java_binary()
        stat = Path(java).stat() if java and Path(java).exists() else None
        what = {
            "java": java,
            "java_build": [stat.st_size, stat.st_mtime_ns] if stat else None,
            "spark": spark_version,
            # The JVM's own classpath is Spark's jars folder: an archive recorded with another one is ignored.
            "spark_home": spark_home or _spark_home(),
            "jars": sorted(jars),
            # The JVM checks each classpath jar's size and time against the archive and ignores an archive whose jar
            # changed (fetched again into the same place): such a jar gives another key, so a fresh recording.
            "jar_files": [_file_stamp(jar) for jar in sorted(jars)],
        }
        self.key = hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]
        self.path = cache_dir() / "spark-cds" / f"{self.key}.jsa"
        self._lock = self.path.with_suffix(".lock")
        self.description = what

    @property
    def ready(self) -> bool:
        """Tell whether the archive was recorded and can be mapped."""
        return self.path.is_file()

    def use_options(self) -> str:
        """Driver JVM options that map the archive."""
        return f"-XX:SharedArchiveFile={self.path} {_QUIET}"

    @staticmethod
    def record_options(partial: str) -> str:
        """Driver JVM options that write an archive to ``partial`` at exit."""
        return f"-XX:ArchiveClassesAtExit={partial} {_QUIET}"

    @property
    def recording(self) -> bool:
        """Whether a live process is recording this archive now."""
        return _lock_holder_alive(self._lock)

    def record_in_background(self, jar_settings: dict[str, str]) -> None:
        """Start the low-priority process that records the archive, unless one is at it already.

        Args:
            jar_settings: the session's ``spark.jars*`` settings, which decide its jars and so the archive's key.
                They reach the recorder through its environment, which unlike its command line other users
                cannot read (a repository URL may carry a password).
        """
        if self.ready or self.recording:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        spawn_detached(
            [sys.executable, "-m", RECORDER_MODULE, self.key],
            log_file=self.path.parent / f"{self.key}.log",
            cwd=self.path.parent,
            env={**os.environ, JAR_SETTINGS_ENV: json.dumps(jar_settings)},
        )
        logger.info("recording a class data sharing archive for faster Spark starts in the background: %s", self.path)

    @contextlib.contextmanager
    def lock(self) -> Iterator[bool]:
        """Hold the recording lock; yields False when another live process holds it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(2):
            try:
                fd = os.open(self._lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                if _lock_holder_alive(self._lock):
                    yield False
                    return
                self._lock.unlink(missing_ok=True)
                continue
            with os.fdopen(fd, "w") as f:
                f.write(str(os.getpid()))
            try:
                yield True
            finally:
                self._lock.unlink(missing_ok=True)
            return
        yield False


def prune_archives(folder: Path) -> list[Path]:
    """Delete the archives whose java binary or pyspark folder no longer exists (a removed virtualenv or JDK):
    no JVM can use them again, and each takes ~180 MB. Returns the deleted archives.
    """
    pruned = []
    for described in folder.glob("*.json"):
        try:
            what = json.loads(described.read_text())
            needed = [what["java"], what["spark_home"]]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if all(isinstance(p, str) and Path(p).exists() for p in needed):
            continue
        archive = described.with_suffix(".jsa")
        archive.unlink(missing_ok=True)
        described.unlink(missing_ok=True)
        described.with_suffix(".log").unlink(missing_ok=True)
        pruned.append(archive)
    return pruned


def _spark_home() -> str:
    import pyspark

    return os.environ.get("SPARK_HOME") or os.path.dirname(os.path.realpath(pyspark.__file__))


def _java_binary() -> str | None:
    java_home = os.environ.get("JAVA_HOME")
    found = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    return os.path.realpath(found) if found else None


def _lock_holder_alive(lock: Path) -> bool:
    try:
        pid = int(lock.read_text().strip() or "0")
    except (OSError, ValueError):
        return False
    return pid > 0 and is_alive(pid, RECORDER_MODULE)
