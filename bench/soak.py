"""A randomized soak of the exactly-once promise on real components (``make soak``; not part of the test suite).

It starts two local KRaft clusters of its own, puts the stream ``orders`` on them, and then performs N random
operations, each one of:

- produce a few numbered records to a topic the metadata lists now;
- change the metadata: the stream moves between ``east``, ``east + west`` and ``west`` (``drain_removed`` on, so
  a cluster that leaves the stream is drained before it is dropped), sometimes with a new topic on a cluster;
- a run of ``dynamic-kafka run`` in a fresh process, either left to finish, killed with SIGKILL at one of the
  fault points (``after_plan``, ``after_sink``), or killed after a random delay wherever it is;
- two runs launched at once (one must win, the other must fail having written nothing).

At the end it runs until a run finds nothing to do and compares the sink with every record produced: it prints
the counts (runs, kills, records, lost, duplicated) and exits 1 unless both lost and duplicated are 0.

Usage: ``python -m bench.soak [--operations N] [--seed S] [--keep]``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from dynamic_kafka.faults import ENV as FAULT_ENV
from dynamic_kafka.local_kafka import start_clusters, stop_clusters
from dynamic_kafka.testing.kafka import Record, create_topic, produce, unique_name
from dynamic_kafka.testing.pipeline import PipelineHarness

PORTS = {"east": 39192, "west": 39292}
LAYOUTS = (("east",), ("east", "west"), ("west",))
RUN_TIMEOUT_S = 600.0


@dataclass
class Counts:
    """What the soak did, printed at the end."""

    operations: Counter[str] = field(default_factory=Counter)
    runs: int = 0
    kills: int = 0
    failed: int = 0
    failures: Counter[str] = field(default_factory=Counter)


class Soak:
    """The world of one soak: clusters, topics per cluster, the pipeline harness and what was produced."""

    def __init__(self, folder: Path, base_dir: Path, rng: random.Random) -> None:
        self.rng = rng
        self.counts = Counts()
        started = start_clusters(list(PORTS.items()), base_dir=base_dir)
        self.bootstrap = {name: c.bootstrap_servers for name, c in started.items()}
        self.topics: dict[str, list[str]] = {name: [] for name in PORTS}
        for name in PORTS:
            self.add_topic(name)
        self.layout: tuple[str, ...] = ("east",)
        self.harness = PipelineHarness(folder, clusters=self.bootstrap, drain_removed=True)
        self.publish()
        self.produced: list[bytes] = []

    def add_topic(self, cluster: str) -> None:
        """A fresh topic on ``cluster`` (1-3 partitions) that the stream lists from the next publish on."""
        topic = unique_name(f"soak-{cluster}")
        create_topic(self.bootstrap[cluster], topic, self.rng.randint(1, 3))
        self.topics[cluster].append(topic)

    def publish(self) -> None:
        """Writes the metadata file: the stream on the clusters of the current layout, all their topics."""
        self.harness.set_streams({"orders": {c: list(self.topics[c]) for c in self.layout}})

    def produce_some(self) -> None:
        """Produces 1-200 numbered records to a random listed topic."""
        cluster = self.rng.choice(self.layout)
        topic = self.rng.choice(self.topics[cluster])
        first = len(self.produced)
        values = [f"soak-{n}".encode() for n in range(first, first + self.rng.randint(1, 200))]
        produce(self.bootstrap[cluster], topic, [Record(value=v, key=v) for v in values])
        self.produced += values

    def change_metadata(self) -> None:
        """Moves the stream to another layout; now and then a new topic joins a cluster of it."""
        self.layout = self.rng.choice([layout for layout in LAYOUTS if layout != self.layout])
        if self.rng.random() < 0.3:
            self.add_topic(self.rng.choice(self.layout))
        self.publish()

    def launch(self, fault: str | None = None) -> subprocess.Popen[str]:
        """Starts ``dynamic-kafka run --json`` in a fresh process (own process group, so a kill takes its JVM)."""
        env = {**os.environ, FAULT_ENV: fault} if fault else None
        command = [sys.executable, "-m", "dynamic_kafka.cli.main", "run", "--json"]
        command += ["--config", str(self.harness.config_path), "--pipeline", "p"]
        return subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
        )

    def finish(self, process: subprocess.Popen[str], kill_after: float | None = None) -> int:
        """Waits for a run, killing its process group after ``kill_after`` seconds; returns its exit code."""
        try:
            _, err = process.communicate(timeout=kill_after if kill_after is not None else RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            _, err = process.communicate()
        self.counts.runs += 1
        code = process.returncode
        if code == -signal.SIGKILL:
            self.counts.kills += 1
        elif code != 0:
            self.counts.failed += 1
            # The error's first sentence names its kind; the counts show which failures were expected.
            self.counts.failures[err.strip().splitlines()[-1][:160] if err.strip() else f"exit {code}"] += 1
        return code

    def run(self) -> None:
        """One run: left alone, killed at a fault point, or killed after a random delay."""
        how = self.rng.choice(("clean", "fault", "timed"))
        if how == "fault":
            self.finish(self.launch(self.rng.choice(("after_plan", "after_sink"))))
        elif how == "timed":
            self.finish(self.launch(), kill_after=self.rng.uniform(1.0, 25.0))
        else:
            self.finish(self.launch())

    def concurrent_runs(self) -> None:
        """Two runs at once: at most one may commit; the other ends in RunInProgressError."""
        first, second = self.launch(), self.launch()
        self.finish(first)
        self.finish(second)

    def settle(self) -> None:
        """Runs, unkilled, until a run finds nothing to do (recovering whatever the last kill left)."""
        for _ in range(10):
            process = self.launch()
            out, err = process.communicate(timeout=RUN_TIMEOUT_S)
            self.counts.runs += 1
            if process.returncode != 0:
                raise SystemExit(f"soak: a settling run failed:\n{err[-3000:]}")
            if json.loads(out)["status"] == "empty":
                return
        raise SystemExit("soak: ten settling runs still found records to read")

    def verdict(self) -> tuple[int, int]:
        """(lost, duplicated) records: produced but not in the sink, and in the sink more than once."""
        landed = Counter(self.harness.sink_values())
        expected = Counter(self.produced)
        lost = sum(1 for v in expected if v not in landed)
        duplicated = sum(n - 1 for n in landed.values() if n > 1)
        return lost, duplicated


def main(argv: list[str] | None = None) -> int:
    """Runs the soak and prints its counts; exit status 1 when a record was lost or duplicated."""
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--operations", type=int, default=40, help="random operations (default %(default)s)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: time-based, printed)")
    parser.add_argument("--keep", action="store_true", help="keep the clusters and the pipeline folder")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else int(time.time())
    rng = random.Random(seed)
    work = Path(tempfile.mkdtemp(prefix="dynamic-kafka-soak-"))
    base_dir = work / "clusters"
    print(f"soak: seed {seed}, {args.operations} operations, working in {work}", flush=True)
    started = time.monotonic()
    try:
        soak = Soak(work / "pipeline", base_dir, rng)
        actions = {
            "produce": (0.35, soak.produce_some),
            "metadata": (0.15, soak.change_metadata),
            "run": (0.4, soak.run),
            "concurrent": (0.1, soak.concurrent_runs),
        }
        names = list(actions)
        weights = [actions[n][0] for n in names]
        soak.produce_some()
        for index in range(args.operations):
            name = rng.choices(names, weights)[0]
            actions[name][1]()
            soak.counts.operations[name] += 1
            print(f"  {index + 1}/{args.operations} {name}", flush=True)
        soak.settle()
        lost, duplicated = soak.verdict()
    finally:
        if not args.keep:
            stop_clusters(base_dir=base_dir, purge=True)
    c = soak.counts
    print(
        f"soak: {sum(c.operations.values())} operations ({dict(c.operations)}), runs {c.runs}, kills {c.kills}, "
        f"failed {c.failed}, records {len(soak.produced)}, lost {lost}, duplicated {duplicated}, "
        f"{time.monotonic() - started:.0f} s"
    )
    for message, count in c.failures.most_common():
        print(f"  failed x{count}: {message}")
    return 0 if lost == 0 and duplicated == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
