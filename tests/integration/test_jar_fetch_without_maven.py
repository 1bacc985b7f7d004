"""Spark's jars come from Ivy in the machine's Java, with no Maven on PATH, here from a folder laid out as a Maven
repository (how an air-gapped machine is set up: spark.jars.repositories=file:///...)."""

from __future__ import annotations

import os
import shutil
from typing import TYPE_CHECKING

import pytest

from dynamic_kafka._toolchain.ivy import resolve_jars
from dynamic_kafka._toolchain.java import find_java

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.integration


def _publish(repository: Path, artifact: str, version: str, dependencies: str = "") -> None:
    folder = repository / "local" / "test" / artifact / version
    folder.mkdir(parents=True)
    (folder / f"{artifact}-{version}.jar").write_bytes(b"PK\x05\x06" + bytes(18))  # an empty zip
    (folder / f"{artifact}-{version}.pom").write_text(
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        f"<groupId>local.test</groupId><artifactId>{artifact}</artifactId><version>{version}</version>"
        f"<dependencies>{dependencies}</dependencies></project>"
    )


def test_jars_are_fetched_without_maven_from_a_folder_repository(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repository = tmp_path / "repository"
    _publish(repository, "base", "2.0")
    _publish(repository, "left-out", "1.0")
    dependency = (
        "<dependency><groupId>local.test</groupId><artifactId>{}</artifactId><version>{}</version></dependency>"
    )
    _publish(repository, "app", "1.0", dependency.format("base", "2.0") + dependency.format("left-out", "1.0"))
    bin_dir = tmp_path / "bin"  # Java alone on PATH: no mvn
    bin_dir.mkdir()
    (bin_dir / "java").symlink_to(find_java())
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("DYNAMIC_KAFKA_CACHE", str(tmp_path / "cache"))
    assert shutil.which("mvn") is None

    libs = resolve_jars(
        "app", ["local.test:app:1.0"], exclusions=["local.test:left-out"], repositories=[repository.as_uri()]
    )

    assert sorted(p.name for p in libs.iterdir()) == ["app-1.0.jar", "base-2.0.jar"]
    # Offline after the first run: the repository gone, the same folder comes back without a JVM.
    shutil.rmtree(repository)
    os.environ["PATH"] = str(tmp_path / "nothing")
    assert resolve_jars("app", ["local.test:app:1.0"], exclusions=["local.test:left-out"]) == libs
