"""``python -m bench [--quick] [--json PATH] [--only e2e,idle,...]``: run the benchmarks, print the tables."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.env import ROOT, BenchEnv, warm_spark_start
from bench.measure import cpu_busy_fraction
from bench.report import render
from bench.suite import BENCHMARKS, Settings, settings_dict

# Those that start Spark (the scale benchmark's runs have nothing to read and start none).
SPARK_BENCHMARKS = ("e2e", "growth", "state", "s3", "connect", "connect10m", "local", "publish", "dagster")
FLINK_ONLY = "flink"


def parse_args(argv: list[str] | None = None) -> tuple[Settings, argparse.Namespace]:
    """Parse the command line into benchmark settings and the parsed arguments."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller sizes and fewer repeats (< 3 minutes)")
    parser.add_argument("--json", type=Path, help="write every figure here (default bench/results/<time>.json)")
    parser.add_argument(
        "--only",
        help=f"comma-separated subset of: {', '.join(BENCHMARKS)}; {FLINK_ONLY}: only benchmark 8's 1M comparison "
        "(ours via Connect, the Flink peer, the landing ceiling)",
    )
    parser.add_argument("--records", type=int, help="records of the end-to-end data set (both clusters together)")
    parser.add_argument("--value-bytes", type=int, help="average value size of the data sets")
    parser.add_argument("--partitions", type=int, help="partitions per topic of the data sets")
    parser.add_argument("--repeats", type=int, help="runs of each end-to-end variant")
    parser.add_argument("--growth", help="comma-separated record counts for the growth benchmark")
    parser.add_argument("--connect-sizes", help="comma-separated record counts for the connect10m benchmark")
    parser.add_argument("--state-runs", type=int, help="runs of the state-growth benchmark")
    parser.add_argument(
        "--keep-clusters",
        action="store_true",
        help="leave the benchmark's brokers running for the next run (idle on 10,000 partitions they still use "
        "~15%% of a core; starting them again takes ~25 s)",
    )
    args = parser.parse_args(argv)
    settings = Settings.defaults(args.quick)
    overrides: dict[str, Any] = {}
    for name in ("records", "value_bytes", "partitions", "repeats"):
        if getattr(args, name) is not None:
            overrides[name] = getattr(args, name)
    if args.growth:
        overrides["growth_sizes"] = tuple(int(x) for x in args.growth.split(","))
    if args.connect_sizes:
        overrides["connect_sizes"] = tuple(int(x) for x in args.connect_sizes.split(","))
    if args.state_runs:
        overrides["state_runs"] = args.state_runs
        overrides["state_checkpoints"] = tuple(
            sorted({1, *(c for c in settings.state_checkpoints if c < args.state_runs), args.state_runs})
        )
    if args.only:
        chosen = {x.strip() for x in args.only.split(",") if x.strip()}
        if FLINK_ONLY in chosen:  # a part of benchmark 8, not a benchmark of its own
            chosen.discard(FLINK_ONLY)
            overrides["connect_e2e_only"] = "connect" not in chosen
            chosen.add("connect")
        unknown = chosen - set(BENCHMARKS)
        if unknown:
            parser.error(f"unknown benchmark(s) {', '.join(sorted(unknown))}; choose from {', '.join(BENCHMARKS)}")
        overrides["only"] = frozenset(chosen)
    return dataclasses.replace(settings, **overrides), args


def machine() -> dict[str, Any]:
    """Describe the machine the figures were measured on (cores, memory, Python, Java)."""
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return {"cores": os.cpu_count(), "memory_gb": pages / 2**30, "load_before": os.getloadavg()}


def commit() -> str:
    """Return the git commit the benchmarks ran at, or "unknown"."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    except OSError:
        return "unknown"
    return out.stdout.strip() or "unknown"


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks, print the tables and write the JSON results; return the exit status."""
    settings, args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    began = time.monotonic()
    results: dict[str, Any] = {
        "started_at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit(),
        "settings": settings_dict(settings),
        "machine": {**machine(), "busy_before": cpu_busy_fraction(1.0)},
        "benchmarks": {},
    }
    print("setting up (clusters under .cache/bench/, data sets) ...", file=sys.stderr, flush=True)
    env = BenchEnv.start()
    try:
        needs_data = any(settings.wants(n) for n in ("e2e", "ceiling", "idle", "s3", "connect", "local"))
        # Setup, not measured: Spark's one-time recording (one JVM) overlaps the producing (brokers and librdkafka).
        with ThreadPoolExecutor(max_workers=1) as pool:
            warm_up = (
                pool.submit(warm_spark_start, s3a=settings.wants("s3"))
                if any(settings.wants(n) for n in SPARK_BENCHMARKS)
                else None
            )
            results["produced_s"] = env.ensure_data_set(settings.data_set()) if needs_data else 0.0
            results["spark_warm_up_s"] = warm_up.result() if warm_up else 0.0
        results["setup_s"] = time.monotonic() - began
        done = results["benchmarks"]
        for name, bench in BENCHMARKS.items():
            if not settings.wants(name):
                continue
            print(f"benchmark {name} ...", file=sys.stderr, flush=True)
            try:
                if name in ("ceiling", "growth", "connect"):
                    done[name] = bench(env, settings, done.get("e2e"))
                else:
                    done[name] = bench(env, settings)
            except Exception as e:  # one broken benchmark must not lose the others' figures
                logging.exception("benchmark %s failed", name)
                results.setdefault("failed", {})[name] = str(e)[-2000:]
    finally:
        if not args.keep_clusters:
            BenchEnv.stop()
            if any(settings.wants(n) for n in ("connect", "connect10m", "local", "dagster")):
                from bench.connect import stop_server

                stop_server()
    results["machine"]["load_after"] = os.getloadavg()
    results["total_wall_s"] = time.monotonic() - began
    print(render(results))
    path = args.json or ROOT / "bench" / "results" / f"bench-{datetime.now(UTC):%Y%m%d-%H%M%S}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(f"figures written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
