"""A randomized nemesis soak of the exactly-once promise on real components (``make soak``; not part of the suite).

It starts two local KRaft clusters and a Spark Connect server of its own (loopback only), puts two streams on
them, and then performs random operations until ``--operations`` or ``--duration`` runs out, each one of:

- produce a few numbered records to a topic the metadata lists now (stream ``orders``), or to the mirrored
  topic (stream ``mirrored``: written to ``east`` and copied to ``west`` with the same timestamp, as MirrorMaker 2
  does, until the failover);
- change the metadata: ``orders`` moves between ``east``, ``east + west`` and ``west`` (``drain_removed`` on),
  sometimes with a new topic on a cluster;
- fail ``mirrored`` over to its mirror once: the stream moves to ``west`` with ``starting_offsets: {timestamp:
  <switch>}`` on that cluster's metadata entry, producers write there from then on;
- a run of ``dynamic-kafka run`` (a Spark Connect client in a fresh process): left to finish, killed with SIGKILL
  at a fault point (``after_plan``, ``after_sink``), or killed after a random delay wherever it is (the server
  may still finish its job: a late writer);
- two runs launched at once (one must win, the other must fail having written nothing);
- kill -9 of the Spark Connect server in the middle of a run, then a restart;
- a broker restart (one cluster stopped and started again on its data);
- a backfill of the last minutes racing an incremental run;
- a run killed right after its plan, then ``dynamic-kafka abandon`` of it;
- an operator's command, killed with SIGKILL one time in three: ``offsets reset --to earliest`` (a rewind),
  ``dead-letters replay`` or ``maintain``;
- and, the whole time, a second Spark process (its own JVM) running OPTIMIZE and VACUUM on the sink in a loop.

At the end it stops the nemeses, runs until a run finds nothing to do and compares the sink and dead-letter
table with every record produced, by record identity (a mirrored copy is its original): it prints runs, kills,
operations, records, lost and duplicated, and exits 1 unless both are 0.

Usage: ``python -m bench.soak [--operations N] [--duration SECONDS] [--seed S] [--keep]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from devtools.local_kafka import start_clusters, stop_clusters
from devtools.local_spark_connect import ServerInfo, server_status, start_server, stop_server
from devtools.testing.clusters import distinct_free_ports
from devtools.testing.kafka import Record, create_topic, produce, unique_name
from devtools.testing.pipeline import PipelineHarness
from dynamic_kafka.faults import ENV as FAULT_ENV

LAYOUTS = (("east",), ("east", "west"), ("west",))
RUN_TIMEOUT_S = 600.0
MAINTENANCE_PAUSE_S = 3.0


@dataclass
class Counts:
    """What the soak did, printed at the end."""

    operations: Counter[str] = field(default_factory=Counter)
    runs: int = 0
    kills: int = 0
    failed: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    nemesis: Counter[str] = field(default_factory=Counter)


class Soak:
    """The world of one soak: clusters, the Connect server, topics per cluster, the harness and what was produced."""

    def __init__(self, work: Path, rng: random.Random) -> None:
        self.rng = rng
        self.work = work
        self.counts = Counts()
        east, west, connect = distinct_free_ports(3)
        self.ports = {"east": east, "west": west}
        self.cluster_dir = work / "clusters"
        started = start_clusters(list(self.ports.items()), base_dir=self.cluster_dir)
        self.bootstrap = {name: c.bootstrap_servers for name, c in started.items()}
        self.connect_dir, self.connect_port = work / "connect", connect
        server = self.start_connect()
        self.topics: dict[str, list[str]] = {name: [] for name in self.ports}
        for name in self.ports:
            self.add_topic(name)
        self.layout: tuple[str, ...] = ("east",)
        # The mirrored stream's clusters have entries of their own (the same brokers), so the mirror's starting
        # offsets in the metadata apply to it alone.
        self.mirror_topic = unique_name("soak-mirrored")
        for name in self.ports:
            create_topic(self.bootstrap[name], self.mirror_topic, 2)
        self.mirror_on = "east"
        self.harness = PipelineHarness(
            work / "pipeline",
            clusters={**self.bootstrap, **{f"{c}-m": b for c, b in self.bootstrap.items()}},
            spark_config={"remote": server.remote},
            streams=["orders", "mirrored"],
            drain_removed=True,
            key={"format": "string"},
            run_lease_seconds=30,
        )
        self.publish()
        self.produced: list[bytes] = []
        self.mirrored: set[bytes] = set()
        self.maintenance: subprocess.Popen[str] | None = None

    # ---- components

    def start_connect(self) -> ServerInfo:
        """Start the soak's Connect server (again, after a kill), on its port and folder."""
        return start_server(base_dir=self.connect_dir, port=self.connect_port, master="local[2]", driver_memory="1g")

    def kill_connect(self) -> None:
        """Kill -9 the Connect server's JVM (the process this soak started, by the pid its folder records)."""
        status = server_status(self.connect_dir)
        if status is not None and status.running:
            with contextlib.suppress(ProcessLookupError):
                os.kill(status.info.pid, signal.SIGKILL)

    def add_topic(self, cluster: str) -> None:
        """A fresh topic on ``cluster`` (1-3 partitions) that the stream lists from the next publish on."""
        topic = unique_name(f"soak-{cluster}")
        create_topic(self.bootstrap[cluster], topic, self.rng.randint(1, 3))
        self.topics[cluster].append(topic)

    def publish(self) -> None:
        """Writes the metadata file: ``orders`` on the clusters of the current layout, ``mirrored`` where it is."""
        self.harness.set_streams(
            {
                "orders": {c: list(self.topics[c]) for c in self.layout},
                "mirrored": {f"{self.mirror_on}-m": [self.mirror_topic]},
            }
        )

    # ---- operations

    def produce_some(self) -> None:
        """Produces 1-200 numbered records to a random listed topic."""
        cluster = self.rng.choice(self.layout)
        topic = self.rng.choice(self.topics[cluster])
        produce(self.bootstrap[cluster], topic, [Record(value=v, key=v) for v in self._numbered(1, 200)])

    def _numbered(self, low: int, high: int) -> list[bytes]:
        first = len(self.produced)
        values = [f"soak-{n}".encode() for n in range(first, first + self.rng.randint(low, high))]
        self.produced += values
        return values

    def produce_mirrored(self) -> None:
        """Produces to the mirrored topic where producers write now; before the failover, each record is copied
        to ``west`` with the same partition and timestamp (MirrorMaker 2 with the identity replication policy).
        """
        now = int(time.time() * 1000)
        records = [
            Record(value=v, key=v, timestamp_ms=now, partition=i % 2) for i, v in enumerate(self._numbered(1, 50))
        ]
        produce(self.bootstrap[self.mirror_on], self.mirror_topic, records)
        self.mirrored.update(r.value for r in records if r.value is not None)
        if self.mirror_on == "east":
            copies = [
                Record(value=r.value, key=r.key, timestamp_ms=r.timestamp_ms, partition=r.partition) for r in records
            ]
            produce(self.bootstrap["west"], self.mirror_topic, copies)

    def fail_over(self) -> None:
        """Once: ``mirrored`` moves to ``west`` with a timestamp handover in the metadata."""
        if self.mirror_on != "east":
            return
        time.sleep(0.01)
        switch = int(time.time() * 1000)
        self.harness.set_cluster(
            "west-m", bootstrap_servers=self.bootstrap["west"], starting_offsets={"timestamp": switch}
        )
        self.mirror_on = "west"
        time.sleep(0.01)
        self.publish()

    def change_metadata(self) -> None:
        """Moves ``orders`` to another layout; now and then a new topic joins a cluster of it."""
        self.layout = self.rng.choice([layout for layout in LAYOUTS if layout != self.layout])
        if self.rng.random() < 0.3:
            self.add_topic(self.rng.choice(self.layout))
        self.publish()

    def launch(self, *args: str, fault: str | None = None) -> subprocess.Popen[str]:
        """Starts ``dynamic-kafka ARGS --json`` (default ``run``) in a fresh process and process group."""
        env = {**os.environ, FAULT_ENV: fault} if fault else None
        command = [sys.executable, "-m", "dynamic_kafka.cli.main", *(args or ("run",)), "--json"]
        command += ["--config", str(self.harness.config_path), "--pipeline", "p"]
        return subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
        )

    def finish(self, process: subprocess.Popen[str], kill_after: float | None = None) -> int:
        """Waits for a run, killing its process group after ``kill_after`` seconds; returns its exit code."""
        try:
            out, err = process.communicate(timeout=kill_after if kill_after is not None else RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            out, err = process.communicate()
        self.counts.runs += 1
        code = process.returncode
        self.log_run(out, code)
        if code == -signal.SIGKILL:
            self.counts.kills += 1
        elif code != 0:
            self.counts.failed += 1
            # The error's first sentence names its kind; the counts show which failures were expected.
            self.counts.failures[_last_error(err) if err.strip() else f"exit {code}"] += 1
        return code

    @staticmethod
    def log_run(out: str, code: int) -> None:
        """One line per run: its outcome, and the findings that say where new partitions start."""
        try:
            summary = json.loads(out)
        except ValueError:
            print(f"    run: exit {code}", flush=True)
            return
        notes = [f["message"] for f in summary.get("findings", []) if f.get("kind") in ("new_topic", "data_loss")]
        print(
            f"    run {summary.get('run_seq')}: {summary.get('status')}, {summary.get('records')} records"
            f"{', recovered ' + str(summary['recovered_run_seq']) if summary.get('recovered_run_seq') else ''}"
            + "".join(f"; {n}" for n in notes),
            flush=True,
        )

    def run(self) -> None:
        """One run: left alone, killed at a fault point, or killed after a random delay."""
        how = self.rng.choice(("clean", "fault", "timed"))
        if how == "fault":
            self.finish(self.launch(fault=self.rng.choice(("after_plan", "after_sink"))))
        elif how == "timed":
            self.finish(self.launch(), kill_after=self.rng.uniform(1.0, 25.0))
        else:
            self.finish(self.launch())

    def concurrent_runs(self) -> None:
        """Two runs at once: at most one may commit; the other ends in RunInProgressError."""
        first, second = self.launch(), self.launch()
        self.finish(first)
        self.finish(second)

    def kill_connect_during_run(self) -> None:
        """Kill -9 the Spark Connect server while a run uses it; the server is started again after."""
        process = self.launch()
        time.sleep(self.rng.uniform(1.0, 15.0))
        self.kill_connect()
        self.counts.nemesis["connect kill -9"] += 1
        self.finish(process)
        self.start_connect()

    def restart_broker(self) -> None:
        """One broker stops and starts again on its data (a rolling restart of a one-broker cluster)."""
        name = self.rng.choice(sorted(self.ports))
        stop_clusters([name], base_dir=self.cluster_dir)
        start_clusters([(name, self.ports[name])], base_dir=self.cluster_dir)
        self.counts.nemesis["broker restart"] += 1

    def backfill_racing_a_run(self) -> None:
        """A backfill of a short recent window, started together with an incremental run. Short: a backfill
        lands every record of its window, so a wide one would hide what the runs lost.
        """
        end = datetime.now(UTC) - timedelta(seconds=self.rng.uniform(0, 30))
        start = end - timedelta(seconds=self.rng.uniform(5, 60))
        command = [sys.executable, "-m", "bench.soak", "--backfill", str(self.harness.config_path)]
        command += [start.isoformat(), end.isoformat()]
        backfill = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
        self.finish(self.launch())
        try:
            _, err = backfill.communicate(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(backfill.pid, signal.SIGKILL)
            _, err = backfill.communicate()
        if backfill.returncode != 0:
            self.counts.failures["backfill: " + _last_error(err)] += 1

    def abandon_a_crashed_run(self) -> None:
        """A run killed right after writing its plan, then ``dynamic-kafka abandon`` of it (as an operator)."""
        self.finish(self.launch(fault="after_plan"))
        head = self.harness.runner().store.load().last_run
        if head is None or head.status != "planned":
            return
        self.command("abandon", "abandon", "--run-seq", str(head.run_seq), "--reason", "soak: operator gives it up")

    def operator_command(self) -> None:
        """An operator's command between runs, killed with SIGKILL after a random delay one time in three: an
        offsets rewind to earliest (the next runs read everything again and land nothing twice), a dead-letter
        replay, or ``dynamic-kafka maintain`` of the pipeline's tables (beside the second Spark's own).
        """
        kind = self.rng.choice(("offsets reset", "dead-letter replay", "maintain"))
        args = {
            "offsets reset": ("offsets", "reset", "--to", "earliest", "--reason", "soak: read again", "--yes"),
            "dead-letter replay": ("dead-letters", "replay", "--yes"),
            "maintain": ("maintain",),
        }[kind]
        self.command(kind, *args, kill_after=self.rng.uniform(0.5, 10.0) if self.rng.random() < 1 / 3 else None)

    def command(self, label: str, *args: str, kill_after: float | None = None) -> None:
        """``dynamic-kafka ARGS`` as an operator runs it, killed after ``kill_after`` seconds if still running;
        counted as a nemesis when it succeeds, as a failure (by its error) when it fails.
        """
        process = self.launch(*args)
        try:
            _, err = process.communicate(timeout=kill_after if kill_after is not None else RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            _, err = process.communicate()
        if process.returncode == -signal.SIGKILL:
            self.counts.kills += 1
        elif process.returncode != 0:
            self.counts.failures[f"{label}: " + _last_error(err)] += 1
        else:
            self.counts.nemesis[label] += 1

    def start_maintenance(self) -> None:
        """A second Spark process (its own JVM) running OPTIMIZE and VACUUM on the sink in a loop."""
        command = [sys.executable, "-m", "bench.soak", "--maintain", str(self.harness.sink_path)]
        self.maintenance = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )

    def stop_maintenance(self) -> None:
        """Stop the maintenance process and count what its statements did."""
        if self.maintenance is None:
            return
        os.killpg(self.maintenance.pid, signal.SIGKILL)
        out, _ = self.maintenance.communicate()
        for line in out.splitlines():
            if line.startswith("maintenance: "):
                self.counts.nemesis[line.removeprefix("maintenance: ")[:140]] += 1
        self.maintenance = None

    # ---- the end

    def settle(self) -> None:
        """Runs, unkilled, until a run finds nothing to do (recovering whatever the last kill left)."""
        for _ in range(10):
            process = self.launch()
            out, err = process.communicate(timeout=RUN_TIMEOUT_S)
            self.counts.runs += 1
            self.log_run(out, process.returncode)
            if process.returncode != 0:
                raise SystemExit(f"soak: a settling run failed:\n{err[-3000:]}")
            if json.loads(out)["status"] == "empty":
                return
        raise SystemExit("soak: ten settling runs still found records to read")

    def verdict(self) -> tuple[int, int]:
        """(lost, duplicated) records by identity: produced but in neither table, and landed more than once."""
        from dynamic_kafka.sink.tables import open_delta_rs

        landed = Counter(self.harness.sink_values())
        opened = open_delta_rs(self.harness.runner().pipeline.dead_letter_table, doing="reading the dead letters")
        if opened is not None:
            keys = opened.to_pyarrow_table(columns=["key"]).column("key").to_pylist()
            landed.update(k if isinstance(k, bytes) else str(k).encode() for k in keys if k is not None)
        expected = set(self.produced)
        lost = sorted((v for v in expected if v not in landed), key=_number)
        duplicated = {v: n for v, n in landed.items() if n > 1}
        for what, values in (("lost", lost), ("duplicated", sorted(duplicated, key=_number))):
            if values:
                mirrored = sum(1 for v in values if v in self.mirrored)
                shown = ", ".join(v.decode() for v in values[:12])
                print(f"soak: {what}: {len(values)} records ({mirrored} of the mirrored stream): {shown}", flush=True)
        return len(lost), sum(n - 1 for n in duplicated.values())


def _last_error(err: str) -> str:
    """The last line of a process's stderr that names an error (else its last line), shortened."""
    lines = [line.strip() for line in err.splitlines() if line.strip()]
    named = [line for line in lines if "rror" in line]
    return (named or lines or ["failed"])[-1][:160]


def _number(value: bytes) -> int:
    return int(value.decode().rsplit("-", 1)[1])


def maintain(sink: Path) -> int:
    """The second Spark process: OPTIMIZE, then VACUUM (default retention), on the sink until killed."""
    from dynamic_kafka.config.models import SparkConfig
    from dynamic_kafka.spark.session import build_spark_session

    spark = build_spark_session(SparkConfig(master="local[1]", ui_enabled=False))
    while True:
        if (sink / "_delta_log").exists():
            for statement in (f"OPTIMIZE delta.`{sink}`", f"VACUUM delta.`{sink}`"):
                try:
                    spark.sql(statement).collect()
                    print(f"maintenance: {statement.split()[0]} committed", flush=True)
                except Exception as e:  # a conflict with a run is what this nemesis is for: count it, go on
                    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
                    print(f"maintenance: {statement.split()[0]} failed: {type(e).__name__}: {first}", flush=True)
        time.sleep(MAINTENANCE_PAUSE_S)


def backfill(config: Path, start: str, end: str) -> int:
    """A backfill of ``[start, end)`` as a process of its own (the library's ``run_backfill``)."""
    from dynamic_kafka.config.loader import load_project_config
    from dynamic_kafka.operations.backfill import run_backfill
    from dynamic_kafka.protocol.context import PipelineContext

    summary = run_backfill(
        PipelineContext(load_project_config(config), "p"), datetime.fromisoformat(start), datetime.fromisoformat(end)
    )
    print(summary.model_dump_json())
    return 0


def main(argv: list[str] | None = None) -> int:
    """Runs the soak and prints its counts; exit status 1 when a record was lost or duplicated."""
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--operations", type=int, default=40, help="random operations at most (default %(default)s)")
    parser.add_argument(
        "--duration", type=float, default=None, help="start no operation after SECONDS of operations (default: none)"
    )
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: time-based, printed)")
    parser.add_argument("--keep", action="store_true", help="keep the clusters and the pipeline folder")
    parser.add_argument("--maintain", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--backfill", nargs=3, metavar=("CONFIG", "START", "END"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.maintain is not None:
        return maintain(args.maintain)
    if args.backfill is not None:
        return backfill(Path(args.backfill[0]), args.backfill[1], args.backfill[2])
    seed = args.seed if args.seed is not None else int(time.time())
    rng = random.Random(seed)
    work = Path(tempfile.mkdtemp(prefix="dynamic-kafka-soak-"))
    print(f"soak: seed {seed}, {args.operations} operations, working in {work}", flush=True)
    started = time.monotonic()
    soak: Soak | None = None
    try:
        soak = Soak(work, rng)
        soak.start_maintenance()
        actions = {
            "produce": (0.25, soak.produce_some),
            "produce mirrored": (0.1, soak.produce_mirrored),
            "metadata": (0.08, soak.change_metadata),
            "failover": (0.03, soak.fail_over),
            "run": (0.3, soak.run),
            "concurrent": (0.05, soak.concurrent_runs),
            "connect kill": (0.05, soak.kill_connect_during_run),
            "broker restart": (0.03, soak.restart_broker),
            "backfill race": (0.05, soak.backfill_racing_a_run),
            "abandon": (0.06, soak.abandon_a_crashed_run),
            "operator": (0.06, soak.operator_command),
        }
        names = list(actions)
        weights = [actions[n][0] for n in names]
        soak.produce_some()
        soak.produce_mirrored()
        operating = time.monotonic()  # the duration bounds the operations, not the start of the components
        # Every kind of operation once first (in random order), so that even a short soak meets each nemesis.
        tour = rng.sample(names, len(names))
        if tour.index("failover") < tour.index("run"):  # a failover is a handover only once the stream was read
            a, b = tour.index("failover"), tour.index("run")
            tour[a], tour[b] = tour[b], tour[a]
        for index in range(args.operations):
            if args.duration is not None and time.monotonic() - operating > args.duration:
                break
            name = tour[index] if index < len(tour) else rng.choices(names, weights)[0]
            actions[name][1]()
            soak.counts.operations[name] += 1
            print(f"  {index + 1}/{args.operations} {name} done ({time.monotonic() - started:.0f} s)", flush=True)
        soak.stop_maintenance()
        soak.settle()
        lost, duplicated = soak.verdict()
    finally:
        if soak is not None:
            soak.stop_maintenance()
        if not args.keep:
            stop_server(base_dir=work / "connect")
            stop_clusters(base_dir=work / "clusters", purge=True)
            shutil.rmtree(work, ignore_errors=True)
    c = soak.counts
    print(
        f"soak: {sum(c.operations.values())} operations ({dict(c.operations)}), runs {c.runs}, kills {c.kills}, "
        f"failed {c.failed}, nemesis {dict(c.nemesis)}, records {len(set(soak.produced))}, lost {lost}, "
        f"duplicated {duplicated}, {time.monotonic() - started:.0f} s"
    )
    for message, count in c.failures.most_common():
        print(f"  failed x{count}: {message}")
    return 0 if lost == 0 and duplicated == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
