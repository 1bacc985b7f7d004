"""The library's public face: what ``dynamic_kafka`` exports, that importing one module stays cheap, that the
Dagster and Airflow integrations reach the library only through the face, and that the core never needs either.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import dynamic_kafka
from dynamic_kafka import ConfigError, Pipeline, load_project_config

ROOT = Path(__file__).resolve().parents[2]


def test_every_public_name_loads_from_the_top_level() -> None:
    missing = [name for name in dynamic_kafka.__all__ if getattr(dynamic_kafka, name, None) is None]
    assert missing == []
    assert set(dir(dynamic_kafka)) >= set(dynamic_kafka.__all__)


def test_an_unknown_name_is_an_attribute_error_and_submodules_still_import() -> None:
    with pytest.raises(AttributeError, match="module 'dynamic_kafka' has no attribute 'PipelineRunner'"):
        _ = dynamic_kafka.PipelineRunner  # type: ignore[attr-defined]
    from dynamic_kafka import initializers as offsets

    assert offsets.timestamp(5).timestamp_ms == 5


def test_importing_one_module_does_not_load_the_clients_of_the_operations() -> None:
    probe = (
        "import sys, dynamic_kafka.errors, dynamic_kafka.config.models; "
        "print(sorted(m for m in ('confluent_kafka', 'deltalake', 'pyarrow') if m in sys.modules))"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True).stdout
    assert loaded.strip() == "[]"


def imports_past_the_face(path: Path, root: Path = ROOT) -> list[str]:
    """``from dynamic_kafka.x import ...`` and ``import dynamic_kafka.x`` lines of one file (named from ``root``)."""
    name = path.relative_to(root)

    def past_the_face(module: str) -> bool:
        # The integration's own modules are its own business; the core's are reached through the face.
        return module.startswith("dynamic_kafka.") and not module.startswith(
            ("dynamic_kafka.dagster", "dynamic_kafka.airflow")
        )

    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and past_the_face(node.module or ""):
            found.append(f"{name}:{node.lineno}: from {node.module} import ...")
        elif isinstance(node, ast.Import):
            found += [f"{name}:{node.lineno}: import {alias.name}" for alias in node.names if past_the_face(alias.name)]
    return sorted(found)


def test_the_dagster_integration_imports_the_library_only_through_its_face() -> None:
    sources = [*(ROOT / "dynamic_kafka" / "dagster").rglob("*.py"), *(ROOT / "pipelines").rglob("*.py")]
    offenders = [line for path in sorted(sources) for line in imports_past_the_face(path)]
    assert offenders == [], "the integration imports names from `dynamic_kafka` itself (its __all__), not its modules"


def test_the_airflow_integration_imports_the_library_only_through_its_face() -> None:
    sources = (ROOT / "dynamic_kafka" / "airflow").rglob("*.py")
    offenders = [line for path in sorted(sources) for line in imports_past_the_face(path)]
    assert offenders == [], "the integration imports names from `dynamic_kafka` itself (its __all__), not its modules"


# Run in a fresh interpreter where `import dagster` and `import airflow` fail as they do without the extras: every
# core module imports, and each integration says which extra to install.
_WITHOUT_ORCHESTRATORS = """
import importlib, importlib.abc, pkgutil, sys

ORCHESTRATORS = ("dagster", "dagster_pipes", "airflow")

class NoOrchestrator(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ORCHESTRATORS or name.startswith("dagster_"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoOrchestrator())
import dynamic_kafka
core = [m.name for m in pkgutil.walk_packages(dynamic_kafka.__path__, "dynamic_kafka.")
        if not m.name.startswith(("dynamic_kafka.dagster", "dynamic_kafka.airflow"))
        and not m.name.endswith(".__main__")]
for name in core:
    importlib.import_module(name)
print(len(core), sorted(m for m in sys.modules if m.split(".")[0] in ORCHESTRATORS))
for integration in ("dynamic_kafka.dagster", "dynamic_kafka.airflow"):
    try:
        importlib.import_module(integration)
    except ImportError as error:
        print(error)
"""


def test_the_core_imports_every_module_without_dagster_or_airflow_and_each_integration_names_its_extra() -> None:
    done = subprocess.run([sys.executable, "-c", _WITHOUT_ORCHESTRATORS], capture_output=True, text=True, check=False)

    assert done.returncode == 0, done.stderr
    imported, dagster, airflow = done.stdout.splitlines()
    assert int(imported.split()[0]) > 50, imported  # the walk saw the core, not an empty package
    assert imported.endswith(" []"), imported
    assert 'install the extra with `pip install "dynamic-kafka[dagster]"`' in dagster
    assert 'install the extra with `pip install "dynamic-kafka[airflow]"`' in airflow


def test_the_scan_sees_every_form_of_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "from dynamic_kafka import Pipeline\nimport dynamic_kafka\n"
        "if TYPE_CHECKING:\n    from dynamic_kafka.operations.status import PipelineStatus\n"
        "import dynamic_kafka.protocol.run as r\n"
    )
    assert imports_past_the_face(module, tmp_path) == [
        "m.py:4: from dynamic_kafka.operations.status import ...",
        "m.py:5: import dynamic_kafka.protocol.run",
    ]


def imports_of_devtools(path: Path, root: Path = ROOT) -> list[str]:
    """Every import of the ``devtools`` package (top level or lazy, in any form) in one file, named from ``root``."""
    name = path.relative_to(root)

    def is_devtools(module: str) -> bool:
        return module.split(".")[0] == "devtools"

    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and not node.level and is_devtools(node.module or ""):
            found.append(f"{name}:{node.lineno}: from {node.module} import ...")
        elif isinstance(node, ast.Import):
            found += [f"{name}:{node.lineno}: import {a.name}" for a in node.names if is_devtools(a.name)]
    return found


def test_neither_the_wheel_nor_the_code_location_imports_the_development_services() -> None:
    # devtools/ is not in the wheel: an import of it works in this repository and fails where the wheel is installed.
    # This scan is the fence (a ruff banned-api per folder would need a ruff.toml inside the package).
    sources = [*(ROOT / "dynamic_kafka").rglob("*.py"), *(ROOT / "pipelines").rglob("*.py")]
    offenders = [line for path in sorted(sources) for line in imports_of_devtools(path)]
    assert offenders == [], "move what the product needs from devtools/ into dynamic_kafka/"


def test_the_devtools_scan_sees_lazy_and_dotted_imports_only_of_devtools(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "import devtools_extra\nfrom . import devtools\ndef f():\n    import devtools.local_kafka as k\n"
        "    from devtools.testing import kafka\n"
    )
    assert sorted(imports_of_devtools(module, tmp_path)) == [
        "m.py:4: import devtools.local_kafka",
        "m.py:5: from devtools.testing import ...",
    ]


def test_a_pipeline_is_built_from_a_config_file_or_a_loaded_config(tmp_path: Path) -> None:
    (tmp_path / "metadata.yaml").write_text("clusters: {east: {bootstrap_servers: 'a:1'}}\nstreams: {}\n")
    config = tmp_path / "dynamic_kafka.yaml"
    config.write_text(
        "metadata_service: {type: file, path: metadata.yaml}\n"
        "pipelines:\n  - {id: orders, streams: [orders], sink: {path: sink}}\n"
    )

    from_file = Pipeline.from_config(config, "orders")
    loaded = Pipeline(load_project_config(config), "orders")
    assert (from_file.id, loaded.id, loaded.config.sink.path.uri) == ("orders", "orders", str(tmp_path / "sink"))
    with pytest.raises(ConfigError, match="billing"):
        Pipeline.from_config(config, "billing")
