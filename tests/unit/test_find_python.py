"""Where the wheel tests find the interpreter of each Python version they install the wheel on
(tests/support/wheel.py): the 3.13 tests skip only when none of these places has one."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from tests.support.wheel import find_python

if TYPE_CHECKING:
    from pathlib import Path

    import pytest


def _empty_machine(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PATH", str(home / "no-bin"))
    monkeypatch.delenv("PY313", raising=False)


def test_the_running_interpreter_serves_its_own_version() -> None:
    assert find_python(f"{sys.version_info.major}.{sys.version_info.minor}") == sys.executable


def test_the_variable_comes_before_pyenv(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _empty_machine(monkeypatch, tmp_path)
    (tmp_path / ".pyenv" / "versions" / "3.13.1" / "bin").mkdir(parents=True)
    monkeypatch.setenv("PY313", "/opt/python3.13")

    assert find_python("3.13") == "/opt/python3.13"


def test_pyenv_gives_its_newest_release_of_the_version(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _empty_machine(monkeypatch, tmp_path)
    for name in ("3.13.2", "3.13.10", "3.13.11t", "3.12.9"):
        (tmp_path / ".pyenv" / "versions" / name / "bin").mkdir(parents=True)

    assert find_python("3.13") == str(tmp_path / ".pyenv" / "versions" / "3.13.10" / "bin" / "python3.13")


def test_a_python_on_path_that_does_not_run_is_not_one(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _empty_machine(monkeypatch, tmp_path)
    shim = tmp_path / "no-bin" / "python3.13"
    shim.parent.mkdir()
    # What pyenv's shim does for a version that is installed but not selected.
    shim.write_text("#!/bin/sh\necho 'pyenv: python3.13: command not found' >&2\nexit 127\n")
    shim.chmod(0o755)

    assert find_python("3.13") is None
