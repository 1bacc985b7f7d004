"""What the package and its pages say to a user who has only the wheel: the repository's development services and
commands are named on one page only, the README (the package index's page) links nowhere relative, and the
classifiers name the Python versions the package installs on.
"""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_development_services_and_commands_are_named_only_on_the_development_page() -> None:
    # Issue 36's criterion as written: hints and user pages must not send a user to tools that do not ship.
    found = subprocess.run(
        ["grep", "-rn", r"devtools\|make setup", "dynamic_kafka/", "docs/"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert found.returncode in (0, 1), found.stderr
    elsewhere = [line for line in found.stdout.splitlines() if not line.startswith("docs/development.md:")]
    assert elsewhere == [], "link to docs/development.md instead of naming them:\n" + "\n".join(elsewhere)
    assert found.stdout, "docs/development.md no longer names the development services"


def test_the_readme_has_no_relative_link() -> None:
    # A package index renders the README without the repository around it: a relative link or image is broken there.
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)\s]+)", readme) + re.findall(r"""(?:src|href)=["']([^"']+)""", readme)
    targets += re.findall(r"^\s*\[[^\]]+\]:\s*(\S+)", readme, flags=re.MULTILINE)

    assert [t for t in targets if not re.match(r"https?://|#", t)] == []


def test_the_classifiers_name_each_python_version_the_package_installs_on() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    bounds = re.fullmatch(r">=3\.(\d+),<3\.(\d+)", project["requires-python"])
    assert bounds, project["requires-python"]
    low, high = bounds.groups()
    named = {c.rsplit(" ", 1)[1] for c in project["classifiers"] if re.fullmatch(r".*Python :: 3\.\d+", c)}

    assert named == {f"3.{minor}" for minor in range(int(low), int(high))}
