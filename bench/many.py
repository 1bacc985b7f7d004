"""Many pipelines at once through one Spark Connect server (issue 29): ``python -m bench.many``; not in the suite.

``--pipelines N`` pipelines (default 20), each over its own topic on both benchmark clusters (``east`` and
``west``, 2 partitions each), all with ``spark.remote`` at one warm local Spark Connect server (127.0.0.1:15393,
``local[*]``, 2 GB, under ``.cache/bench/spark-connect-many``; started here and stopped at the end). Then
``--rounds R`` (default 10) rounds, each:

- **together**: ``--records K`` new records (default 2,000, half per cluster) for every pipeline, then the N runs
  launched at once, each a fresh ``dynamic-kafka run --json`` process (the way Dagster launches them), timed until
  the last one exits;
- **one after another**: K more records each, then the same N runs in sequence.

Every run must commit exactly the records produced for it (its ``--json`` summary's ``records``), and after the
last round every sink holds every record produced for it once (the Delta table's row count); else it exits 1.
Printed per round: the together wall, the one-after-another wall and their ratio, and the server's resident memory
after the round (it should stay flat). The first round is a warm-up of the server (cold JIT): compare the later
ones. Needs the 2 cores to itself to mean anything; ``--pipelines 2 --rounds 1 --records 20`` is a smoke check.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from typing import TYPE_CHECKING

from bench.connect import _heap_after_gc_mb, _rss_mb
from bench.env import (
    BENCH_DIR,
    CLUSTERS,
    PORT_SHIFT,
    BenchEnv,
    DataSet,
    bench_environ,
    fresh_dir,
    produce_fast,
    write_project,
)

if TYPE_CHECKING:
    from pathlib import Path

    from devtools.local_spark_connect import ServerInfo

SERVER_DIR = BENCH_DIR / "spark-connect-many"
SERVER_PORT = 15393 + PORT_SHIFT
PARTITIONS = 2
RUN_TIMEOUT_S = 1800


def _launch(config: Path) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "dynamic_kafka.cli.main", "run", "--json", "--config", str(config)]
    return subprocess.Popen(
        [*command, "--pipeline", "bench"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=bench_environ(),
    )


def _records_of(process: subprocess.Popen[str], config: Path) -> int | str:
    """The records the run committed, or why it did not commit (the benchmark goes on and fails at the end)."""
    out, err = process.communicate(timeout=RUN_TIMEOUT_S)
    if process.returncode != 0:
        return f"exit {process.returncode}: {err.strip()[-2000:]}"
    summary = json.loads(out)
    if summary["status"] != "committed":
        return f"ended {summary['status']!r}, not committed"
    return int(summary["records"])


def _produce(env: BenchEnv, topics: list[str], records: int) -> None:
    data = DataSet(records, PARTITIONS)
    for topic in topics:
        for cluster in CLUSTERS:
            produce_fast(env.bootstrap(cluster), topic, data.per_cluster(cluster), data)


def _round(
    env: BenchEnv, configs: list[Path], topics: list[str], records: int, *, together: bool, failures: list[str]
) -> float:
    """Produces ``records`` per pipeline, runs every pipeline (together or in turn) and returns the wall time;
    appends to ``failures`` each run that did not commit exactly its ``records``.
    """
    _produce(env, topics, records)
    begun = time.monotonic()
    if together:
        launched = [(_launch(c), c) for c in configs]
        landed = [_records_of(p, c) for p, c in launched]
    else:
        landed = [_records_of(_launch(c), c) for c in configs]
    wall = time.monotonic() - begun
    mode = "together" if together else "in turn"
    failures += [f"{c.parent.name} ({mode}): {n}" for c, n in zip(configs, landed, strict=True) if n != records]
    return wall


def _sink_errors(env: BenchEnv, config: Path, topic: str) -> list[str]:
    """What is wrong with the pipeline's sink: every record of its topic on both clusters (offsets 0 to the end of
    each partition: the benchmark only ever appends) must be in it exactly once.
    """
    from collections import Counter

    from deltalake import DeltaTable

    table = DeltaTable(str(config.parent / "sink")).to_pyarrow_table(
        columns=["cluster", "topic", "partition", "offset"]
    )
    landed = Counter(zip(*(table.column(c).to_pylist() for c in table.column_names), strict=True))
    expected = {
        (cluster, topic, partition, offset)
        for cluster in CLUSTERS
        for partition, (_, end) in env.offsets(cluster, [topic])[topic].items()
        for offset in range(end)
    }
    twice = sum(1 for n in landed.values() if n > 1)
    missing, foreign = len(expected - landed.keys()), len(landed.keys() - expected)
    if not (twice or missing or foreign):
        return []
    return [f"{topic}: {missing} records missing, {twice} landed more than once, {foreign} not produced"]


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print a line per round and the medians; exit 1 if any run was not exact."""
    parser = argparse.ArgumentParser(prog="python -m bench.many", description=__doc__.split("\n\n")[0])
    parser.add_argument("--pipelines", type=int, default=20, help="pipelines launched together (default 20)")
    parser.add_argument("--rounds", type=int, default=10, help="rounds (default 10)")
    parser.add_argument("--records", type=int, default=2000, help="new records per pipeline and run (default 2,000)")
    parser.add_argument("--keep", action="store_true", help="leave the clusters and the server running")
    args = parser.parse_args(argv)
    from devtools.local_spark_connect import start_server, stop_server

    env = BenchEnv.start()
    server: ServerInfo = start_server(
        base_dir=SERVER_DIR, port=SERVER_PORT, master="local[*]", driver_memory="2g", start_timeout_s=900
    )
    try:
        topics = [f"many-{i}" for i in range(args.pipelines)]
        configs = []
        for topic in topics:
            for cluster in CLUSTERS:
                env.delete_topics(cluster, list(env.offsets(cluster, [topic])))
                env.create_topics(cluster, [topic], PARTITIONS)
            folder = fresh_dir(f"many/{topic}")
            configs.append(write_project(folder, env, {c: [topic] for c in CLUSTERS}, spark={"remote": server.remote}))
        print(
            f"{args.pipelines} pipelines x 2 clusters x {PARTITIONS} partitions, {args.records} records per run, "
            f"through {server.remote}"
        )
        print("round  together_s  one_after_another_s  ratio  server_rss_mb  heap_after_gc_mb")
        rows = []
        failures: list[str] = []
        for number in range(1, args.rounds + 1):
            together = _round(env, configs, topics, args.records, together=True, failures=failures)
            in_turn = _round(env, configs, topics, args.records, together=False, failures=failures)
            rss = _rss_mb(server.pid)
            heap = _heap_after_gc_mb(server.pid)
            rows.append((together, in_turn, rss))
            print(
                f"{number:>5}  {together:>10.1f}  {in_turn:>19.1f}  {together / in_turn:>5.2f}  {rss:>13.0f}  "
                f"{'-' if heap is None else f'{heap:.0f}':>16}"
            )
        failures += [error for c, t in zip(configs, topics, strict=True) for error in _sink_errors(env, c, t)]
        if failures:
            print(f"NOT EXACT ({len(failures)}):", *failures, sep="\n  ")
            return 1
        later = rows[1:] or rows
        which = "after the warm-up round" if rows[1:] else "of the one round (the server's warm-up: cold JIT)"
        print(
            f"all {2 * args.rounds * args.pipelines} runs exact; median {which}: together "
            f"{statistics.median(r[0] for r in later):.1f} s, one after another "
            f"{statistics.median(r[1] for r in later):.1f} s; server RSS {rows[0][2]:.0f} -> {rows[-1][2]:.0f} MB"
        )
        return 0
    finally:
        if not args.keep:
            stop_server(base_dir=SERVER_DIR)
            BenchEnv.stop()


if __name__ == "__main__":
    sys.exit(main())
