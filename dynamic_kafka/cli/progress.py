"""How the command line shows the progress of long work (runs, backfills, a first jar download), on stderr only.

- On a terminal: one live line per piece of work drawn by rich (stage, offsets planned, MB read or downloaded,
  Spark tasks, elapsed time), cleared when the work ends; the result follows on stdout as always.
- Otherwise (a log file, a CI job, a scheduler): a log line at each stage and every :data:`LOG_EVERY_SECONDS`.
- With ``--json``: nothing, so stderr stays the error document alone.
"""

from __future__ import annotations

import logging
import sys
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING

from dynamic_kafka.progress import Progress, every, reporting_progress

if TYPE_CHECKING:
    from collections.abc import Iterator
    from contextlib import AbstractContextManager

    from rich.progress import Progress as RichProgress
    from rich.progress import TaskID

LOG_EVERY_SECONDS = 10.0

_LOG = logging.getLogger("dynamic_kafka.progress")


def shown(*, json_output: bool) -> AbstractContextManager[None]:
    """Shows the progress of the work done inside on stderr, as the module's docstring says."""
    if json_output:
        return nullcontext()
    if sys.stderr.isatty():
        return _live()
    # Shown at the command line's default level (warnings), yet not warnings.
    _LOG.setLevel(logging.INFO)
    return reporting_progress(every(_LOG.info, LOG_EVERY_SECONDS))


@contextmanager
def _live() -> Iterator[None]:
    from rich.console import Console
    from rich.progress import Progress as RichProgress
    from rich.progress import SpinnerColumn, TextColumn, TimeElapsedColumn

    display = RichProgress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
        # stdout is the result's, and stays a plain stream for pipes and programs.
        redirect_stdout=False,
        redirect_stderr=False,
    )
    lines: dict[tuple[str, str], TaskID] = {}
    try:
        with reporting_progress(lambda progress: _draw(display, lines, progress)):
            yield
    finally:
        display.stop()


def _draw(display: RichProgress, lines: dict[tuple[str, str], TaskID], progress: Progress) -> None:
    """Draws ``progress`` on its own line; the display runs (a refresh thread) only while work is shown."""
    key = (progress.operation, progress.subject)
    if progress.done:
        if key in lines:
            display.remove_task(lines.pop(key))
        if not lines:
            display.stop()
        return
    if key not in lines:
        if not lines:
            display.start()
        lines[key] = display.add_task(progress.line(elapsed=False), total=None)
    display.update(lines[key], description=progress.line(elapsed=False))
