"""The class data sharing archive's key, options and recording lock, without starting a JVM."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from dynamic_kafka.spark.class_archive import RECORDER_MODULE, ClassArchive, prune_archives

if TYPE_CHECKING:
    from pathlib import Path


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DYNAMIC_KAFKA_CACHE", str(tmp_path))


def test_the_key_follows_the_jars_spark_and_java(tmp_path: Path) -> None:
    java = tmp_path / "java"
    java.write_text("a")
    base = ClassArchive(["/j/a.jar", "/j/b.jar"], spark_version="4.1.3", java=str(java))
    assert base.path == tmp_path / "spark-cds" / f"{base.key}.jsa"
    assert ClassArchive(["/j/b.jar", "/j/a.jar"], spark_version="4.1.3", java=str(java)).key == base.key
    assert ClassArchive(["/j/a.jar"], spark_version="4.1.3", java=str(java)).key != base.key
    assert ClassArchive(["/j/a.jar", "/j/b.jar"], spark_version="4.1.4", java=str(java)).key != base.key
    assert (
        ClassArchive(["/j/a.jar", "/j/b.jar"], spark_version="4.1.3", java=str(java), spark_home="/x").key != base.key
    )
    java.write_text("a newer build")
    assert ClassArchive(["/j/a.jar", "/j/b.jar"], spark_version="4.1.3", java=str(java)).key != base.key


def test_a_jar_rewritten_in_place_gives_another_key(tmp_path: Path) -> None:
    # The JVM refuses an archive whose classpath jars changed size or time since it was recorded (silently, under
    # the quiet options): a jar fetched again into the same place must not map the old, ignored archive.
    jar = tmp_path / "a.jar"
    jar.write_text("v1")
    base = ClassArchive([str(jar)], spark_version="4.1.3", java="/usr/bin/java")
    os.utime(jar, ns=(1_000_000_000, 1_000_000_000))
    assert ClassArchive([str(jar)], spark_version="4.1.3", java="/usr/bin/java").key != base.key


def test_options_map_the_archive_or_record_it_quietly(tmp_path: Path) -> None:
    archive = ClassArchive(["/j/a.jar"], spark_version="4.1.3", java="/usr/bin/java")
    assert not archive.ready
    assert f"-XX:SharedArchiveFile={archive.path}" in archive.use_options()
    assert "-XX:ArchiveClassesAtExit=/x/y.partial" in ClassArchive.record_options("/x/y.partial")
    assert "-Xlog:cds=off" in archive.use_options()
    archive.path.parent.mkdir(parents=True)
    archive.path.write_bytes(b"archive")
    assert archive.ready


def test_one_recorder_at_a_time_and_a_dead_holder_is_replaced() -> None:
    archive = ClassArchive(["/j/a.jar"], spark_version="4.1.3", java="/usr/bin/java")
    lock = archive.path.with_suffix(".lock")
    # A stand-in recorder: the lock names a live process whose command line is the recorder module's.
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time; print('up', flush=True); time.sleep(60)",
            RECORDER_MODULE,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "up\n"  # exec'd: its command line is readable now
        lock.parent.mkdir(parents=True)
        lock.write_text(str(holder.pid))
        assert archive.recording
        with archive.lock() as held:
            assert not held
        assert lock.read_text() == str(holder.pid)
    finally:
        holder.kill()
        holder.wait()
    assert not archive.recording
    with archive.lock() as held:
        assert held
        assert lock.read_text() == str(os.getpid())
    assert not lock.exists()


def test_archives_of_a_removed_pyspark_or_java_are_pruned(tmp_path: Path) -> None:
    java = tmp_path / "java"
    java.write_text("a")
    (tmp_path / "pyspark-kept").mkdir()
    kept = ClassArchive(["/j/a.jar"], spark_version="4.1.3", java=str(java), spark_home=str(tmp_path / "pyspark-kept"))
    gone = ClassArchive(["/j/a.jar"], spark_version="4.1.3", java=str(java), spark_home=str(tmp_path / "removed"))
    for archive in (kept, gone):
        archive.path.parent.mkdir(parents=True, exist_ok=True)
        archive.path.write_bytes(b"archive")
        archive.path.with_suffix(".json").write_text(json.dumps(archive.description))

    assert prune_archives(kept.path.parent) == [gone.path]

    assert kept.ready
    assert not gone.ready
    assert not gone.path.with_suffix(".json").exists()
