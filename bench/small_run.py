"""Where a small run through a warm Connect server goes (issue 29): ``python -m bench.small_run``; not in the suite.

Benchmark 8's small run (10,000 new records over 2 clusters x 8 partitions, a fresh ``dynamic-kafka run`` through
the benchmark's Spark Connect server, started here when it does not run) measured by what does not depend on the
machine's load: per run, the Spark Connect requests by kind and the import time before the first of them
(:mod:`bench.probe`), the process's CPU time, the server's CPU time during the run (``/proc/<server>/stat``) and the
interpreter's import time (``-X importtime``: the modules a run imports and the microseconds they took); and in a
second run under ``cProfile``, the calls that cost a round trip or a read elsewhere (Kafka clients made, Delta
tables opened). With ``--against REV``, the same runs of a git revision's ``dynamic_kafka`` (extracted with
``git archive``), alternating.

Start-up aids, clusters and data are benchmark 8's (``bench.env``, ``bench.connect``); ``--warm N`` small runs
(default 10) warm the server first. Leaves the clusters and the server running with ``--keep``.
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import probe
from bench.connect import (
    SERVER_PORT,
    SMALL_PARTITIONS,
    SMALL_RECORDS,
    SMALL_TOPIC,
    _cpu_s,
    _fresh_topic,
    _server,
    stop_server,
)
from bench.env import CLUSTERS, ROOT, BenchEnv, DataSet, fresh_dir, produce_fast, write_project

TOPIC = f"{SMALL_TOPIC}-probe"

# What a profile counts, by (file suffix, function name): each call is a request to a server or a client made.
COUNTED = {
    "Kafka admin or consumer made": ("dynamic_kafka/kafka/connection.py", "_conf"),
    "sink or dead-letter table opened (delta-rs)": ("dynamic_kafka/sink/tables.py", "open_delta_rs"),
    "state table opened (delta-rs)": ("dynamic_kafka/state/table.py", "open"),
}

# The console script's main under cProfile, then its teardown (``dynamic_kafka.cli.main.run``).
_CHILD = """
import cProfile, os, sys
from dynamic_kafka.cli.main import main
profile = cProfile.Profile()
profile.enable()
try:
    code = main(sys.argv[1:])
finally:
    profile.disable()
    profile.dump_stats(__PROFILE__)
if "pyspark" in sys.modules:
    from dynamic_kafka.spark.session import stop_spark_session
    stop_spark_session()
sys.stdout.flush()
os._exit(code)
"""


def _counts(profile: Path) -> dict[str, int]:
    stats = pstats.Stats(str(profile)).stats  # type: ignore[attr-defined]
    found = dict.fromkeys(COUNTED, 0)
    for (file, _line, name), (_cc, calls, *_rest) in stats.items():
        for label, (suffix, function) in COUNTED.items():
            if file.endswith(suffix) and name == function:
                found[label] += calls
    return found


def _one(source: Path, config: Path, *, profiled: bool, server_pid: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(source)}
    args = ["-v", "run", "--json", "--config", str(config), "--pipeline", "bench"]
    with tempfile.TemporaryDirectory() as folder:
        profile = Path(folder) / "run.prof"
        code = _CHILD.replace("__PROFILE__", repr(str(profile))) if profiled else probe.CHILD
        command = [sys.executable, "-X", "importtime", "-c", code, *args]
        server_began, began, launched = _cpu_s(server_pid), os.times(), time.time()
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False, cwd=folder)
        ended, server_ended = os.times(), _cpu_s(server_pid)
        if done.returncode != 0:
            raise RuntimeError(f"the run failed: {done.stderr[-3000:]}")
        summary = json.loads(done.stdout)
        figures: dict[str, Any] = {
            "records": summary["records"],
            "cpu_s": (ended.children_user - began.children_user) + (ended.children_system - began.children_system),
            "wall_s": ended.elapsed - began.elapsed,
            "server_cpu_s": server_ended - server_began,
        }
        if not profiled:
            figures.update(probe.figures(done.stderr, launched))
        if profiled:
            figures.update(_counts(profile))
    return figures


def _extract(revision: str, into: Path) -> Path:
    archive = subprocess.run(["git", "archive", revision, "dynamic_kafka"], cwd=ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def _compiled(source: Path) -> Path:
    """``source`` with its bytecode written, as an installed package has it: a process with
    ``PYTHONDONTWRITEBYTECODE`` set would otherwise compile every module of the package at every run.
    """
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(source / "dynamic_kafka")], check=True)
    return source


def main(argv: list[str] | None = None) -> int:
    """Warm the server, measure, print the table."""
    parser = argparse.ArgumentParser(prog="python -m bench.small_run", description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warm", type=int, default=10)
    parser.add_argument("--against", metavar="REV")
    parser.add_argument("--keep", action="store_true", help="leave the clusters and the server running")
    args = parser.parse_args(argv)
    env = BenchEnv.start()
    server_pid = _server().pid
    data = DataSet(SMALL_RECORDS, SMALL_PARTITIONS, 200)
    try:
        _fresh_topic(env, TOPIC, SMALL_PARTITIONS)
        remote = {"remote": f"sc://127.0.0.1:{SERVER_PORT}"}
        config = write_project(fresh_dir("small-run-probe"), env, {c: [TOPIC] for c in CLUSTERS}, spark=remote)

        def produce() -> None:
            for cluster in CLUSTERS:
                produce_fast(env.bootstrap(cluster), TOPIC, SMALL_RECORDS // len(CLUSTERS), data)

        for _ in range(args.warm):
            produce()
            _one(ROOT, config, profiled=False, server_pid=server_pid)
        with tempfile.TemporaryDirectory() as folder:
            sources = {"now": _compiled(ROOT)}
            if args.against:
                sources = {args.against: _compiled(_extract(args.against, Path(folder))), **sources}
            runs: dict[str, list[dict[str, Any]]] = {name: [] for name in sources}
            for _ in range(args.repeats):
                for name, source in sources.items():
                    for profiled in (False, True):
                        produce()
                        figures = _one(source, config, profiled=profiled, server_pid=server_pid)
                        if figures["records"] != SMALL_RECORDS:
                            raise RuntimeError(f"the run landed {figures['records']} records, not {SMALL_RECORDS}")
                        runs[name].append({**figures, "profiled": profiled})
                        print(f"{name} {'profiled' if profiled else 'plain'}: {figures}", file=sys.stderr, flush=True)
    finally:
        if not args.keep:
            BenchEnv.stop()
            stop_server()
    plain = ["wall_s", "cpu_s", "server_cpu_s", "modules_imported", "import_s", "import_before_request_s"]
    kinds = sorted({k for variant in runs.values() for r in variant for k in r if k.startswith("requests")})
    print("| figure (median) | " + " | ".join(runs) + " |\n|---|" + "---|" * len(runs))
    for label in [*plain, "first_request_s", "modules_before_request", *kinds, *COUNTED]:
        cells = []
        for variant in runs.values():
            # A profiled run's wall and CPU carry cProfile's cost: those figures are the plain runs'.
            chosen = [r[label] for r in variant if label in r and not (label in plain and r["profiled"])]
            cells.append(f"{statistics.median(chosen):.2f}" if chosen else "-")
        print(f"| {label} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
