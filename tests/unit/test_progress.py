"""Progress reports: the lines a log gets (a line per stage, at most one per interval between, the end whether the
work succeeded or failed), silence without a listener, and the live line on a terminal (a pseudo-terminal here).
"""

from __future__ import annotations

import os
import pty
import sys
import time

import pytest

from dynamic_kafka.cli import progress as cli_progress
from dynamic_kafka.progress import every, reporting_progress, tracking


def test_a_log_gets_each_stage_the_end_and_at_most_one_line_per_interval_between() -> None:
    lines: list[str] = []
    with reporting_progress(every(lines.append, 3600)), tracking("run", "orders") as progress:
        progress.stage("planning")
        progress.stage("reading and writing", planned_offsets=1200)
        for done in range(5):  # Spark's updates within one interval: not logged
            progress.update(bytes_done=done * 1_000_000, tasks_done=done, tasks_total=4)
        progress.stage("committing")

    assert [line.rsplit(", ", 1)[0] for line in lines] == [
        "run orders: planning",
        "run orders: reading and writing, 1200 offsets planned",
        "run orders: committing, 1200 offsets planned, 4.0 MB read, 4/4 tasks",
        "run orders: done, 1200 offsets planned, 4.0 MB read, 4/4 tasks",
    ]
    assert all(line.endswith("0s") for line in lines)


def test_work_that_fails_reports_failed_and_a_failing_listener_fails_nothing() -> None:
    lines: list[str] = []
    with pytest.raises(RuntimeError), reporting_progress(every(lines.append, 3600)), tracking("backfill", "p"):
        raise RuntimeError("the write failed")
    assert lines[-1].startswith("backfill p: failed")

    def broken(_: object) -> None:
        raise ValueError("a display bug")

    with reporting_progress(broken), tracking("run", "p") as progress:
        progress.stage("planning")


def test_nobody_listening_means_no_report() -> None:
    with tracking("download", "delta-spark") as progress:
        assert not progress.watched
        progress.update(bytes_done=1)


def test_a_terminal_gets_a_live_line_and_json_gets_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    leader, follower = pty.openpty()
    terminal = os.fdopen(follower, "w")
    monkeypatch.setattr(sys, "stderr", terminal)
    with cli_progress.shown(json_output=False), tracking("download", "delta-spark") as progress:
        progress.stage("downloading")
        progress.update(bytes_done=12_300_000)
        time.sleep(0.3)  # rich redraws on its own thread
    terminal.flush()
    drawn = os.read(leader, 65536).decode(errors="replace")
    assert "download delta-spark: downloading, 12.3 MB downloaded" in drawn

    with cli_progress.shown(json_output=True), tracking("run", "p") as progress:
        assert not progress.watched
    terminal.close()
    os.close(leader)
