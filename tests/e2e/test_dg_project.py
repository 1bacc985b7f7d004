"""A team's own Dagster project, created fresh in the test as `dg` users have one: it finds the Component through
the package's entry point (no registry_modules of its own), scaffolds two instances, checks them together and
launches a run of one asset that lands its records (real Kafka, the session's Spark Connect server, Delta)."""

from __future__ import annotations

import os
import subprocess
from typing import TYPE_CHECKING, Any

import pytest

from tests.support.e2e import REPO_ROOT, Project, Record, create_topic, produce, sink_rows, unique_topic

if TYPE_CHECKING:
    from pathlib import Path

    from devtools.local_spark_connect import ServerInfo

pytestmark = pytest.mark.e2e

DG = REPO_ROOT / ".venv" / "bin" / "dg"
COMPONENT = "dynamic_kafka.dagster.DynamicKafkaComponent"
# The project's code location: every component under defs/ (what `dg scaffold project` writes).
DEFINITIONS = """from pathlib import Path

import dagster as dg


@dg.definitions
def defs() -> dg.Definitions:
    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)
"""


def dg(project: Path, *args: str) -> str:
    """Runs one `dg` command in the project; its output (stdout and stderr), which must say it succeeded."""
    env = {k: v for k, v in os.environ.items() if k != "DYNAMIC_KAFKA_CONFIG"}
    env.update(DAGSTER_HOME=str(project / ".dagster"), COLUMNS="200")
    done = subprocess.run(
        [str(DG), *args], cwd=project, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"dg {' '.join(args)}:\n{output}"
    return output


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
    tmp_path: Path, kafka_clusters: Any, spark_connect_server: ServerInfo
) -> None:
    project = new_project(tmp_path / "project")
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
