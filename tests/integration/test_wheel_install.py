"""The built wheel, installed as a user installs it: into a clean virtualenv, from the wheel and its declared
dependencies only (no repository on sys.path, no Maven on PATH), run from a folder outside the repository, on the
lowest and the highest Python the package declares (3.11 and 3.13; skipped only where no such interpreter exists).

With the core dependencies, ``--version``, ``check``, ``plan`` and a ``run`` through the session's Spark Connect
server land every record once; with the ``spark`` extra, a first in-process run fetches its jars (Ivy in the
machine's Java, into an empty jar cache) and lands its records; with the ``dagster`` extra too, the integration
builds the pipeline's definitions. How the wheel is built and installed (once per session, versions of ``uv.lock``,
uv's cache first) and where an interpreter is looked for: ``tests/support/wheel.py``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import dynamic_kafka
from dynamic_kafka._toolchain.cache import cache_dir
from dynamic_kafka._toolchain.java import find_java
from tests.support.exactly_once import TwoClusterStream
from tests.support.wheel import CORE, DAGSTER, PYTHONS, SPARK, find_python
from tests.support.wheel import run as _run

if TYPE_CHECKING:
    from devtools.local_kafka import ClusterEndpoint
    from devtools.local_spark_connect import ServerInfo
    from tests.support.wheel import BuiltWheel

pytestmark = pytest.mark.integration

# The asset keys of the definitions of the config in argv[1], as the Dagster extra builds them.
_ASSET_KEYS = (
    "import sys; from dynamic_kafka.dagster import build_definitions; "
    "print(sorted(k.to_user_string() for k in build_definitions(sys.argv[1]).resolve_all_asset_keys()))"
)


def _path_without_maven(folder: Path) -> str:
    """A PATH of the machine's commands (Spark's launcher scripts need a shell and coreutils) and Java, less mvn."""
    folder.mkdir()
    for directory in ("/usr/local/bin", "/usr/bin", "/bin"):
        for tool in Path(directory).iterdir() if Path(directory).is_dir() else ():
            if tool.name != "mvn" and not (folder / tool.name).exists():
                (folder / tool.name).symlink_to(tool)
    (folder / "java").unlink(missing_ok=True)
    (folder / "java").symlink_to(find_java())
    return str(folder)


@pytest.fixture(scope="module", params=PYTHONS)
def installed(
    request: pytest.FixtureRequest, built_wheel: BuiltWheel, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """A clean virtualenv of each Python in ``PYTHONS`` with the wheel and its core dependencies (the tests below
    add extras to it, in their order); returns its bin folder."""
    version: str = request.param
    python = find_python(version)
    if python is None:
        variable = f"$PY{version.replace('.', '')}"
        pytest.skip(
            f"no Python {version} on this machine (looked for: this interpreter, {variable}, "
            f"~/.pyenv/versions/{version}.*, python{version} on PATH): install one (`pyenv install {version}`, "
            f"`uv python install {version}` where uv can download) or set {variable} to its interpreter"
        )
    return built_wheel.new_venv(tmp_path_factory.mktemp(f"wheel-venv-{version}") / "venv", CORE, python=python)


def _user_env(bin_dir: Path, tmp_path: Path, **extra: str) -> dict[str, str]:
    """What a user's shell has: the virtualenv first on PATH, no mvn, no PYTHONPATH, this session's token."""
    env = {
        "HOME": os.environ["HOME"],
        "PATH": f"{bin_dir}:{_path_without_maven(tmp_path / 'bin')}",
        "SPARK_CONNECT_AUTHENTICATE_TOKEN": os.environ["SPARK_CONNECT_AUTHENTICATE_TOKEN"],
    }
    return {**env, **extra}


def test_the_core_install_checks_plans_and_runs_through_spark_connect_exactly_once(
    installed: Path,
    kafka_clusters: dict[str, ClusterEndpoint],
    spark_connect_server: ServerInfo,
    tmp_path: Path,
) -> None:
    env = _user_env(installed, tmp_path)
    imported = "import dynamic_kafka, pyspark; print(dynamic_kafka.__file__)"
    where = _run([installed / "python", "-c", imported], env=env, cwd=tmp_path)
    assert Path(where.stdout.strip()).is_relative_to(installed.parent), "the repository's package was imported"
    version = _run([installed / "dynamic-kafka", "--version"], env=env, cwd=tmp_path)
    assert version.stdout.strip() == f"dynamic-kafka {dynamic_kafka.__version__}"

    stream = TwoClusterStream(
        kafka_clusters, tmp_path / "project", spark_config={"remote": spark_connect_server.remote}
    )
    config = ["--config", str(stream.harness.config_path)]
    stream.produce("first", east=7, west=5)
    _run([installed / "dynamic-kafka", "check", *config], env=env, cwd=tmp_path)
    planned = _run([installed / "dynamic-kafka", "plan", *config, "--pipeline", "p"], env=env, cwd=tmp_path)
    assert "12" in planned.stdout, planned.stdout
    _run([installed / "dynamic-kafka", "run", *config, "--pipeline", "p"], env=env, cwd=tmp_path)
    _run([installed / "dynamic-kafka", "run", *config, "--pipeline", "p"], env=env, cwd=tmp_path)
    assert stream.harness.sink_rows() == stream.expected_rows()


# On the highest Python only: an in-process run is the bulk of this test's time, and the suite's own Python (3.11)
# runs in-process Spark in every local-mode test and fetches jars without Maven in test_jar_fetch_without_maven.py.
@pytest.mark.parametrize("installed", PYTHONS[-1:], indirect=True)
def test_the_spark_extra_fetches_its_jars_without_maven_and_lands_in_process(
    built_wheel: BuiltWheel, installed: Path, kafka_clusters: dict[str, ClusterEndpoint], tmp_path: Path
) -> None:
    built_wheel.install(installed / "python", SPARK)
    # An empty jar cache: this is the first run. Ivy's own download cache is the machine's, so the jars are not
    # fetched from Maven Central again by every test session (Ivy still resolves and retrieves them).
    jars = tmp_path / "jar-cache"
    jars.mkdir()
    shared_ivy = cache_dir() / "ivy"
    shared_ivy.mkdir(parents=True, exist_ok=True)
    (jars / "ivy").symlink_to(shared_ivy)
    env = _user_env(installed, tmp_path, DYNAMIC_KAFKA_CACHE=str(jars))

    stream = TwoClusterStream(kafka_clusters, tmp_path / "project", spark_config={"master": "local[1]"})
    stream.produce("first", east=4, west=3)
    config = ["--config", str(stream.harness.config_path), "--pipeline", "p"]
    ran = _run([installed / "dynamic-kafka", "run", *config], env=env, cwd=tmp_path)
    assert "first use: downloading the jars of spark-jars-" in ran.stderr
    assert stream.harness.sink_rows() == stream.expected_rows()


# On the highest Python only: tests/e2e/test_dg_project.py installs the Dagster extra on the suite's own (3.11).
@pytest.mark.parametrize("installed", PYTHONS[-1:], indirect=True)
def test_the_dagster_extra_builds_the_definitions_of_a_config(
    built_wheel: BuiltWheel, installed: Path, kafka_clusters: dict[str, ClusterEndpoint], tmp_path: Path
) -> None:
    built_wheel.install(installed / "python", DAGSTER)
    env = {"HOME": os.environ["HOME"], "PATH": f"{installed}:/usr/bin:/bin"}
    stream = TwoClusterStream(kafka_clusters, tmp_path / "project", spark_config={"master": "local[1]"})

    defined = _run([installed / "python", "-c", _ASSET_KEYS, stream.harness.config_path], env=env, cwd=tmp_path)
    assert defined.stdout.strip() == "['dynamic_kafka/p', 'dynamic_kafka/p_dead_letter', 'kafka/orders']"
