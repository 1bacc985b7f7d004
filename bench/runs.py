"""The measured commands: our CLI, the hand-written baseline job, the confluent-kafka ceiling, each in a fresh
process, with what each reports turned into figures.

Our run is ``dynamic-kafka -v run --json``: ``-v`` adds timestamped log lines on stderr (a few per run), from
which :func:`ours_phases` splits the wall time into start-up and planning, Spark start, read+write, commit and
exit.
"""

from __future__ import annotations

import json
import re
import sys
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

from bench import probe
from bench.env import CLUSTERS, BenchEnv, bench_environ, spark_settings
from bench.measure import Measured, run_measured

if TYPE_CHECKING:
    from pathlib import Path

PYTHON = sys.executable
_LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \w+ ([\w.]+): (.*)$")
# A phase ends at the first log line of this logger containing this text (tests/unit/test_bench_phases.py checks
# that each module still logs such a line: when one moved, every phase of ours printed "-").
_MARKS = (
    ("startup_plan_s", "dynamic_kafka.spark.session", "starting Spark"),
    ("spark_start_s", "dynamic_kafka.spark.reader", "partition range(s)"),
    ("read_write_s", "dynamic_kafka.sink.incremental", "landed in"),
    ("commit_s", "dynamic_kafka.state.table", "commit_run run"),
)


def run_ours(config: Path, *, pipeline: str = "bench", probed: bool = False) -> tuple[Measured, dict[str, Any]]:
    """``dynamic-kafka -v run --config ... --json`` in a fresh process; returns the measurement (with the
    phases) and the run summary.

    ``probed``: under :data:`bench.probe.CHILD` and ``-X importtime``, adding the probe's figures (Spark Connect
    requests by kind, import time before the first request) to the measurement's ``extra``. The probe's own cost
    (the import-time lines) makes such a run's wall no measurement of the product's.
    """
    began = time.time()
    program = ["-X", "importtime", "-c", probe.CHILD] if probed else ["-m", "dynamic_kafka.cli.main"]
    measured = run_measured(
        [
            PYTHON,
            *program,
            "-v",
            "run",
            "--config",
            str(config),
            "--pipeline",
            pipeline,
            "--json",
        ],
        cwd=config.parent,
        env=bench_environ(),
    ).check()
    measured.extra.update(ours_phases(measured, began))
    if probed:
        measured.extra.update(probe.figures(measured.stderr, began))
    return measured, json.loads(measured.stdout)


def run_plan(config: Path, *, pipeline: str = "bench") -> tuple[Measured, int]:
    """``dynamic-kafka plan`` (the readable table an operator asks for) in a fresh process; returns the
    measurement and the number of splits listed.
    """
    measured = run_measured(
        [PYTHON, "-m", "dynamic_kafka.cli.main", "plan", "--config", str(config), "--pipeline", pipeline],
        cwd=config.parent,
        env=bench_environ(),
    ).check()
    splits = sum(1 for line in measured.stdout.splitlines() if line.split(maxsplit=1)[:1] in ([c] for c in CLUSTERS))
    return measured, splits


def ours_phases(measured: Measured, began: float) -> dict[str, float]:
    """Splits a run's wall time at its log lines' timestamps (millisecond resolution)."""
    stamps: dict[str, float] = {}
    for line in measured.stderr.splitlines():
        match = _LOG_LINE.match(line)
        if not match:
            continue
        when = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        for phase, logger, text in _MARKS:
            if phase not in stamps and match.group(2) == logger and text in match.group(3):
                stamps[phase] = when
                break
    if len(stamps) != len(_MARKS):
        return {}
    phases, previous = {}, began
    for phase, _, _ in _MARKS:
        phases[phase] = stamps[phase] - previous
        previous = stamps[phase]
    phases["exit_s"] = began + measured.wall_s - previous
    return phases


def source_spec(env: BenchEnv, topic: str) -> dict[str, Any]:
    """What the baseline and the ceiling read: per cluster, the topic's [earliest, latest) ranges, taken from
    the brokers as our planner takes them.
    """
    ranges = env.ranges(topic)
    return {
        c: {
            "bootstrap_servers": env.bootstrap(c),
            "topic": topic,
            "ranges": {str(p): list(r) for p, r in sorted(ranges[c].items())},
        }
        for c in CLUSTERS
    }


def run_baseline(env: BenchEnv, topic: str, folder: Path) -> Measured:
    """The hand-written job over the same ranges, into ``folder/sink``."""
    spec = {"sources": source_spec(env, topic), "sink": str(folder / "sink"), "spark": spark_settings()}
    spec_path = folder / "baseline.json"
    spec_path.write_text(json.dumps(spec, indent=2))
    measured = run_measured([PYTHON, "-m", "bench.baseline", str(spec_path)], env=bench_environ()).check()
    measured.extra.update(json.loads(measured.stdout.strip().splitlines()[-1]))
    return measured


def run_available_now(env: BenchEnv, topic: str, folder: Path, remote: str) -> Measured:
    """Structured Streaming with ``Trigger.AvailableNow`` through the Connect server at ``remote``, over the same
    ranges, into ``folder/sink`` with its checkpoint in ``folder/checkpoint`` (:mod:`bench.available_now`).
    """
    spec = {
        "sources": source_spec(env, topic),
        "sink": str(folder / "sink"),
        "checkpoint": str(folder / "checkpoint"),
        "spark": {"remote": remote},
    }
    spec_path = folder / "available_now.json"
    spec_path.write_text(json.dumps(spec, indent=2))
    measured = run_measured([PYTHON, "-m", "bench.available_now", str(spec_path)], env=bench_environ()).check()
    measured.extra.update(json.loads(measured.stdout.strip().splitlines()[-1]))
    return measured


def run_ceiling(env: BenchEnv, topic: str, folder: Path, *, land: bool = False) -> Measured:
    """confluent-kafka consuming the same ranges in one process (``land``: and writing them to Parquet with
    pyarrow under ``folder/landed``).
    """
    spec_path = folder / "ceiling.json"
    spec_path.write_text(json.dumps({"sources": source_spec(env, topic)}, indent=2))
    argv = [PYTHON, "-m", "bench.ceiling", str(spec_path)] + (["--land", str(folder / "landed")] if land else [])
    measured = run_measured(argv, env=bench_environ()).check()
    measured.extra.update(json.loads(measured.stdout.strip().splitlines()[-1]))
    return measured
