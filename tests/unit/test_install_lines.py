"""The install lines a user reads (the README, the PyPI page, and docs/getting-started.md) are the installs the
wheel tests run: the same extras, each an extra the package declares.

The wheel tests install the built wheel with ``uv pip install WHEEL[extra]`` (the same requirement with the same
extras, from the file instead of the index name), pinned to uv.lock: tests/support/wheel.py.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from tests.support.wheel import DOCUMENTED_INSTALLS

ROOT = Path(__file__).resolve().parents[2]
_PIP_INSTALL = re.compile(r'^pip install "?dynamic-kafka(\[[a-z]+\])?"?(?:\s+#.*)?$')


def install_lines(page: Path) -> list[str]:
    """The lines of the first ``bash`` block under the page's ``## Install`` heading."""
    text = page.read_text(encoding="utf-8")
    section = text[text.index("\n## Install\n") :]
    block = section[section.index("```bash\n") + len("```bash\n") :]
    return block[: block.index("```")].splitlines()


def extras_of(lines: list[str]) -> tuple[str, ...]:
    """The extras (``""`` for none) of ``pip install dynamic-kafka[...]`` lines; any other line fails."""
    matches = [_PIP_INSTALL.match(line) for line in lines]
    assert all(matches), f"not a `pip install dynamic-kafka[extra]` line: {lines}"
    return tuple(m.group(1) or "" for m in matches if m)


def test_the_readme_and_getting_started_show_the_installs_the_wheel_tests_run() -> None:
    readme, getting_started = install_lines(ROOT / "README.md"), install_lines(ROOT / "docs" / "getting-started.md")

    assert readme == getting_started
    assert extras_of(readme) == DOCUMENTED_INSTALLS


def test_every_extra_the_package_declares_is_shown() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]

    assert {f"[{name}]" for name in declared} == set(DOCUMENTED_INSTALLS) - {""}


def test_a_line_of_the_package_with_an_extra_is_read() -> None:
    assert extras_of(['pip install "dynamic-kafka[spark]"   # + Spark']) == ("[spark]",)


@pytest.mark.parametrize(
    "line", ["pip install dynamic_kafka", "pip install dynamic-kafka pyspark", "uv add dynamic-kafka"]
)
def test_a_line_that_is_not_an_install_of_the_package_is_refused(line: str) -> None:
    with pytest.raises(AssertionError, match="not a `pip install"):
        extras_of([line])
