"""The wheel as a user installs it: built once per test session, installed into clean virtualenvs.

The installs are constrained to the versions of ``uv.lock`` (every group and extra, so `dg`'s own CLI is pinned
too), whose wheels are in uv's shared cache after ``make setup``. Each install tries uv's cache alone first
(``--offline``): that works once uv has also cached the index pages of those versions, which ``uv sync`` does not
do but any earlier online ``uv pip install`` of them did; otherwise the same install asks the index.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# The Python versions the wheel tests install the package on: the lowest and the highest it declares.
PYTHONS = ("3.11", "3.13")

# The installs the README and docs/getting-started.md show (`pip install dynamic-kafka`, `"dynamic-kafka[spark]"`,
# `"dynamic-kafka[dagster]"`, ...), as the extras the wheel tests install the built wheel with
# (tests/unit/test_install_lines.py holds the pages to this list).
CORE, SPARK, DAGSTER, AIRFLOW, PROMETHEUS, OTLP = "", "[spark]", "[dagster]", "[airflow]", "[prometheus]", "[otlp]"
DOCUMENTED_INSTALLS = (CORE, SPARK, DAGSTER, AIRFLOW, PROMETHEUS, OTLP)


def uv() -> str:
    """The uv that ``make setup`` installs (else one on PATH)."""
    found = ROOT / ".cache" / "uv" / "bin" / "uv"
    path = str(found) if found.is_file() else shutil.which("uv")
    assert path, "uv is needed to build and install the wheel (`make setup` installs it into .cache/uv)"
    return path


def find_python(version: str) -> str | None:
    """An interpreter of Python ``version`` (``"3.13"``), or None: this one if it is that version, else
    ``$PY313`` (the version without its dot), else the newest ``~/.pyenv/versions/3.13.*``, else a ``python3.13`` on
    PATH that runs (pyenv's shim of a version not selected does not)."""
    if f"{sys.version_info.major}.{sys.version_info.minor}" == version:
        return sys.executable
    named = os.environ.get(f"PY{version.replace('.', '')}")
    if named:
        return named
    releases = [
        p for p in (Path.home() / ".pyenv" / "versions").glob(f"{version}.*") if p.name.split(".")[-1].isdigit()
    ]
    if releases:
        newest = max(releases, key=lambda p: int(p.name.split(".")[-1]))
        return str(newest / "bin" / f"python{version}")
    on_path = shutil.which(f"python{version}")
    if on_path and try_run([on_path, "--version"]).returncode == 0:
        return on_path
    return None


def run(argv: list[str | Path], **kwargs: object) -> subprocess.CompletedProcess[str]:
    """Runs a command that must succeed; its output is in the assertion when it does not."""
    done = try_run(argv, **kwargs)
    assert done.returncode == 0, f"{argv[:3]} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def try_run(argv: list[str | Path], **kwargs: object) -> subprocess.CompletedProcess[str]:
    """Runs a command (ten minutes at most) and returns how it went."""
    return subprocess.run(  # type: ignore[call-overload,no-any-return]
        [str(a) for a in argv], capture_output=True, text=True, timeout=600, check=False, **kwargs
    )


@dataclass(frozen=True)
class BuiltWheel:
    """This repository's wheel (``uv build``) and the constraints that pin its dependencies to ``uv.lock``."""

    wheel: Path
    constraints: Path

    def install(self, python: Path, extras: str = "", *more: str) -> None:
        """Installs the wheel (with ``extras``, e.g. ``"[dagster]"``) and ``more`` requirements for ``python``."""
        argv: list[str | Path] = [uv(), "pip", "install", "--quiet", "--python", python, "-c", self.constraints]
        argv += [f"{self.wheel}{extras}", *more]
        # From a folder outside the repository: its pyproject.toml's [tool.uv] settings are not a user's.
        if try_run([*argv, "--offline"], cwd=self.wheel.parent).returncode != 0:
            run(argv, cwd=self.wheel.parent)

    def new_venv(self, venv: Path, extras: str = "", *more: str, python: str = sys.executable) -> Path:
        """A clean virtualenv at ``venv`` of ``python`` (by default this interpreter) with the wheel installed;
        returns its bin folder."""
        run([uv(), "venv", "--quiet", "--python", python, venv], cwd=self.wheel.parent)
        self.install(venv / "bin" / "python", extras, *more)
        return venv / "bin"


def build_wheel(folder: Path) -> BuiltWheel:
    """Builds the wheel into ``folder`` and exports the locked versions of every dependency beside it."""
    folder.mkdir(parents=True, exist_ok=True)
    run([uv(), "build", "--wheel", "--out-dir", folder, ROOT], cwd=folder)
    (wheel,) = folder.glob("dynamic_kafka-*.whl")
    constraints = folder / "constraints.txt"
    export = ["export", "--frozen", "--all-extras", "--all-groups", "--no-emit-project", "--no-hashes"]
    run([uv(), *export, "-o", constraints], cwd=ROOT)
    return BuiltWheel(wheel=wheel, constraints=constraints)
