"""The demo as a Dagster Components project (examples/demo): `dg check yaml` checks defs.yaml against the schema
Dagster derives from DynamicKafkaComponent, with the line of a misspelt key."""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import TYPE_CHECKING

import pytest

from tests.support.e2e import REPO_ROOT

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.e2e

DEMO = REPO_ROOT / "examples" / "demo"
DG = REPO_ROOT / ".venv" / "bin" / "dg"


def dg_check_yaml(project: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "DYNAMIC_KAFKA_CONFIG"}
    return subprocess.run([str(DG), "check", "yaml"], cwd=project, env=env, capture_output=True, text=True, timeout=300)


def test_dg_check_yaml_accepts_the_demo_component() -> None:
    done = dg_check_yaml(DEMO)

    assert done.returncode == 0, done.stdout + done.stderr
    assert "All component YAML validated successfully" in done.stdout + done.stderr


def test_dg_check_yaml_names_a_misspelt_attribute_and_its_line(tmp_path: Path) -> None:
    shutil.copy(DEMO / "dg.toml", tmp_path / "dg.toml")
    shutil.copytree(DEMO / "dynamic_kafka_demo", tmp_path / "dynamic_kafka_demo")
    defs = tmp_path / "dynamic_kafka_demo" / "defs" / "pipelines" / "defs.yaml"
    defs.write_text(defs.read_text().replace("  config_path:", "  config_pth:"))

    done = dg_check_yaml(tmp_path)

    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "attributes.config_pth Additional properties are not allowed ('config_pth' was unexpected)" in output
    assert "'config_path' is a required property" in output
