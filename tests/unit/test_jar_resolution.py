"""Spark's jars are fetched by Ivy in the machine's Java: the rendered module and settings, and the errors."""

from __future__ import annotations

import stat
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING

import pytest

from dynamic_kafka._toolchain.ivy import MAVEN_CENTRAL, render_module, render_settings, resolve_jars
from dynamic_kafka.errors import ToolchainError

if TYPE_CHECKING:
    from pathlib import Path


def _parse(xml: str) -> ET.Element:
    return ET.fromstring(xml)  # noqa: S314 (the document this test just rendered, not untrusted input)


def _fake_java(folder: Path, script: str) -> None:
    folder.mkdir(exist_ok=True)
    java = folder / "java"
    java.write_text(
        '#!/bin/sh\nif [ "$1" = -version ]; then echo \'openjdk version "17.0.15"\' >&2; exit 0; fi\n' + script + "\n"
    )
    java.chmod(java.stat().st_mode | stat.S_IXUSR)


def test_module_maps_each_coordinate_to_its_runtime_closure_and_excludes_everywhere() -> None:
    module = _parse(render_module("two", ["g:a:1.0", "h:b:2.0"], exclusions=["x:y", "z:*"]))
    dependencies = [(d.get("org"), d.get("name"), d.get("rev"), d.get("transitive")) for d in module.iter("dependency")]
    assert dependencies == [("g", "a", "1.0", "true"), ("h", "b", "2.0", "true")]
    assert {d.get("conf") for d in module.iter("dependency")} == {"default->runtime(*),master(*)"}
    assert [(e.get("org"), e.get("module")) for e in module.iter("exclude")] == [("x", "y"), ("z", "*")]


def test_module_without_transitive_dependencies_says_so() -> None:
    module = _parse(render_module("one", ["g:a:1.0"], transitive=False))
    assert [d.get("transitive") for d in module.iter("dependency")] == ["false"]


@pytest.mark.parametrize(
    ("coordinates", "exclusions"),
    [(["org.apache.kafka:kafka_2.13"], []), (['g:a:1"/><x a="'], []), ([], []), (["g:a:1"], ["x:y:1"])],
)
def test_module_refuses_anything_but_plain_coordinates(coordinates: list[str], exclusions: list[str]) -> None:
    with pytest.raises(ToolchainError, match="group:artifact:version"):
        render_module("bad", coordinates, exclusions=exclusions)


def test_settings_try_the_given_repositories_before_maven_central_and_cache_in_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DYNAMIC_KAFKA_CACHE", str(tmp_path))
    settings = _parse(render_settings(["https://mirror.example/maven", "file:///srv/jars"]))
    roots = [r.get("root") for r in settings.iter("ibiblio")]
    assert roots == ["https://mirror.example/maven/", "file:///srv/jars/", MAVEN_CENTRAL]
    caches = settings.find("caches")
    assert caches is not None
    assert caches.get("defaultCacheDir") == str(tmp_path / "ivy")


def test_missing_java_without_cache_names_java_and_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DYNAMIC_KAFKA_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolchainError, match=r"Java was not found") as info:
        resolve_jars("one", ["g:a:1.0"])
    assert "apt-get install openjdk-17-jre-headless" in str(info.value)
    assert "make setup" not in str(info.value)


def test_unreachable_repositories_without_cache_are_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    said = "java.net.UnknownHostException: repo1.maven.org"
    _fake_java(tmp_path / "bin", f"echo 'Server access error at url https://repo1.maven.org ({said})'; exit 1")
    monkeypatch.setenv("DYNAMIC_KAFKA_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    with pytest.raises(ToolchainError, match="repositories are unreachable and there is no cached copy") as info:
        resolve_jars("one", ["g:a:1.0"])
    assert "spark.jars.repositories" in str(info.value)


def test_complete_cache_is_used_without_java(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_java(tmp_path / "bin", 'echo called > "$0.called"; exit 1')
    monkeypatch.setenv("DYNAMIC_KAFKA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    home = tmp_path / "cache" / "one"
    (home / "libs").mkdir(parents=True)
    (home / "jars.complete").write_text("{}")
    assert resolve_jars("one", ["g:a:1.0"]) == home / "libs"
    assert not (tmp_path / "bin" / "java.called").exists()


def test_an_in_process_session_without_the_spark_extra_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from importlib import metadata

    from dynamic_kafka.spark import packages

    def missing(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(packages.metadata, "version", missing)
    with pytest.raises(ToolchainError, match=r"delta-spark is not installed") as info:
        packages.delta_package("4.1.3")
    assert "dynamic-kafka[spark]" in (info.value.hint or "")
    assert "spark.remote" in (info.value.hint or "")
