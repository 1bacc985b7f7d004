"""A team's own Dagster project, created fresh in the test as `dg` users have one: its own virtualenv with the
built wheel, the ``dagster`` extra and ``dagster-dg-cli`` (not this repository's environment), where `dg` finds the
Component through the package's entry point (no registry_modules of its own), scaffolds two instances, checks them
together and launches a run of one asset that lands its records (real Kafka, the session's Spark Connect server,
Delta)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.support.e2e import Project, Record, create_topic, produce, sink_rows, unique_topic
from tests.support.wheel import DAGSTER, run

if TYPE_CHECKING:
    from devtools.local_spark_connect import ServerInfo
    from tests.support.wheel import BuiltWheel

pytestmark = pytest.mark.e2e

COMPONENT = "dynamic_kafka.dagster.DynamicKafkaComponent"
# The project's code location: every component under defs/ (what `dg scaffold project` writes).
DEFINITIONS = """from pathlib import Path

import dagster as dg


@dg.definitions
def defs() -> dg.Definitions:
    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)
"""


def user_env(project: Path) -> dict[str, str]:
    """The shell of the project's user: its virtualenv active, no repository on PYTHONPATH, its own Dagster home."""
    venv = project / ".venv"
    env = {k: v for k, v in os.environ.items() if k not in ("DYNAMIC_KAFKA_CONFIG", "PYTHONPATH")}
    env.update(VIRTUAL_ENV=str(venv), PATH=f"{venv / 'bin'}:{env['PATH']}")
    env.update(DAGSTER_HOME=str(project / ".dagster"), COLUMNS="200")
    return env


def dg(project: Path, *args: str) -> str:
    """Runs one `dg` command of the project's virtualenv; its output (stdout and stderr), which must say it
    succeeded."""
    dg_cli = project / ".venv" / "bin" / "dg"
    done = run([dg_cli, *args], cwd=project, env=user_env(project))
    return done.stdout + done.stderr


def new_project(root: Path) -> Path:
    """A bare dg project (module `lake`) that lists no registry module: only installed entry points count."""
    (root / "lake" / "defs").mkdir(parents=True)
    (root / "dg.toml").write_text('directory_type = "project"\n\n[project]\nroot_module = "lake"\n')
    (root / "lake" / "__init__.py").write_text("")
    (root / "lake" / "defs" / "__init__.py").write_text("")
    (root / "lake" / "definitions.py").write_text(DEFINITIONS)
    (root / ".dagster").mkdir()
    return root


def scaffolded(project: Path, name: str, clusters: dict[str, str], spark: dict[str, Any], topic: str) -> Project:
    """`dg scaffold defs` of one instance, and the project config its defs.yaml names (one pipeline `name`)."""
    dg(project, "scaffold", "defs", COMPONENT, name)
    config = Project(root=project / "lake" / "defs" / name, clusters=clusters, spark=spark)
    config.write_metadata({topic: {"east": [topic]}})
    config.add_pipeline(name, [topic], starting_offsets="earliest")
    return config


def test_a_fresh_dg_project_finds_scaffolds_checks_and_runs_two_components(
    built_wheel: BuiltWheel, tmp_path: Path, kafka_clusters: Any, spark_connect_server: ServerInfo
) -> None:
    project = new_project(tmp_path / "project")
    python = built_wheel.new_venv(project / ".venv", DAGSTER, "dagster-dg-cli") / "python"
    imported = run(
        [python, "-c", "import dynamic_kafka; print(dynamic_kafka.__file__)"], cwd=project, env=user_env(project)
    )
    assert Path(imported.stdout.strip()).is_relative_to(project / ".venv"), "the repository's package was imported"
    clusters = {name: c.bootstrap_servers for name, c in kafka_clusters.items()}
    spark = {"remote": spark_connect_server.remote}
    orders_topic, invoices_topic = unique_topic("dg-orders"), unique_topic("dg-invoices")

    assert COMPONENT in dg(project, "list", "components")

    orders = scaffolded(project, "orders", clusters, spark, orders_topic)
    invoices = scaffolded(project, "invoices", clusters, spark, invoices_topic)
    defs_yaml = project / "lake" / "defs" / "invoices" / "defs.yaml"
    assert "config_path: dynamic_kafka.yaml" in defs_yaml.read_text()
    defs_yaml.write_text(defs_yaml.read_text() + "  key_prefix: [billing]\n  group_name: billing\n")

    dg(project, "check", "defs")

    create_topic(clusters["east"], orders_topic, partitions=2)
    landed = produce("east", clusters["east"], orders_topic, [Record(p, f"order-{p}") for p in (0, 1, 0)])
    # The incremental run of the orders table (its job materializes the table and its dead-letter twin together).
    dg(project, "launch", "--job", "orders_incremental")

    assert sorted(sink_rows(orders.sink_path("orders"))) == sorted(landed)
    assert not invoices.sink_path("invoices").exists()  # the other instance's asset was not selected
