"""Where a secret could show during a run, as texts, for tests that it shows nowhere."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest


def command_lines() -> str:
    """Every running process's command line (``/proc/*/cmdline``, arguments joined by spaces), one per line."""
    texts = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            texts.append(cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            continue  # the process ended meanwhile
    return "\n".join(texts)


def run_texts(caplog: pytest.LogCaptureFixture, **shown: object) -> dict[str, str]:
    """The captured logs (as formatted and as raw records), the ``repr`` of each object ``shown`` (a plan, a
    summary...) and the process list, by where they are shown.
    """
    return {
        "logs": caplog.text,
        "log records": repr([(r.msg, r.args) for r in caplog.records]),
        **{name: repr(value) for name, value in shown.items()},
        "process list": command_lines(),
    }
