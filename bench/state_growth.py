"""State growth: many small runs in one process, then planning time and state bytes read per load, by run count.

``python -m bench.state_growth SPEC.json`` (run by the harness in a fresh process) keeps one ``PipelineRunner``
and one Spark session for every run, as a long-lived orchestrator process would: each run first produces a few
records to each cluster, then runs. At each checkpoint it measures, best of three:

- ``plan_s``: ``PipelineRunner.plan()`` (state load, metadata, broker offsets, planner);
- ``load_s`` and ``load_bytes``: ``StateStore.load()`` and the bytes this process read meanwhile (``rchar`` in
  ``/proc/self/io``: every read syscall, Delta log, checkpoint and data files alike);
- the state table's files on disk and its ``_delta_log`` entries.

Prints one JSON document: the checkpoints, and every run's wall time.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any


def _bytes_read() -> int:
    with open("/proc/self/io") as io:
        return next(int(line.split()[1]) for line in io if line.startswith("rchar:"))


def _best_of(count: int, call: Any) -> tuple[float, int]:
    """Smallest wall time and smallest bytes read of ``count`` calls."""
    times, reads = [], []
    for _ in range(count):
        before, began = _bytes_read(), time.perf_counter()
        call()
        times.append(time.perf_counter() - began)
        reads.append(_bytes_read() - before)
    return min(times), min(reads)


def _tree(path: Path) -> tuple[int, int]:
    files = [p for p in path.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def main(spec_path: str) -> None:
    """Run the state-growth benchmark described by the spec file and print its figures."""
    from confluent_kafka import Producer

    from dynamic_kafka.config.loader import load_project_config
    from dynamic_kafka.protocol.context import PipelineContext
    from dynamic_kafka.protocol.run import PipelineRunner
    from dynamic_kafka.spark.session import build_spark_session

    spec = json.loads(Path(spec_path).read_text())
    project = load_project_config(spec["config"])
    settings = project.spark
    runner = PipelineRunner(PipelineContext(project, "bench", spark=lambda: build_spark_session(settings)))
    producers = {c: Producer({"bootstrap.servers": b, "linger.ms": 0}) for c, b in spec["bootstrap"].items()}
    checkpoints = set(spec["checkpoints"])
    state_path = Path(runner.store.path)
    per_run: list[dict[str, Any]] = []
    measured: list[dict[str, Any]] = []
    for run in range(1, spec["runs"] + 1):
        for producer in producers.values():
            for i in range(spec["records_per_run"]):
                producer.produce(spec["topic"], b"state-growth %06d %d" % (run, i), partition=i % spec["partitions"])
            producer.flush(30)
        began = time.perf_counter()
        summary = runner.run()
        elapsed = time.perf_counter() - began
        expected = spec["records_per_run"] * len(producers)
        if summary.records != expected or summary.status != "committed":
            raise SystemExit(f"run {run}: {summary.status} with {summary.records} records, expected {expected}")
        per_run.append({"run": run, "run_s": elapsed, "plan_s": summary.plan_seconds})
        if run in checkpoints:
            plan_s, _ = _best_of(3, runner.plan)
            load_s, load_bytes = _best_of(3, runner.store.load)
            files, size = _tree(state_path)
            log_entries = len(os.listdir(state_path / "_delta_log"))
            sink_log_entries = len(os.listdir(runner.pipeline.sink.path.local_path / "_delta_log"))
            measured.append(
                {
                    "runs": run,
                    "run_s": elapsed,
                    "plan_s": plan_s,
                    "load_s": load_s,
                    "load_bytes": load_bytes,
                    "state_files": files,
                    "state_bytes": size,
                    "log_entries": log_entries,
                    "sink_log_entries": sink_log_entries,
                }
            )
            print(json.dumps(measured[-1]), file=sys.stderr, flush=True)
    print(json.dumps({"checkpoints": measured, "runs": per_run}))


if __name__ == "__main__":
    main(sys.argv[1])
