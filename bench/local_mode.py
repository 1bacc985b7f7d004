"""Benchmark 8c (``local``): local mode without a JVM per run (issue 42, item 2).

The same runs in three modes, side by side, each a fresh ``dynamic-kafka run`` process:

- **in-process**: the default ``spark`` section (``local[*]``, no ``spark.remote``): every run starts its own JVM;
- **managed**: the same section with ``spark.local_server: true``: the first run starts the local Spark server
  (:mod:`dynamic_kafka.spark.local_server`, its folder ``.cache/bench/spark-server``), later runs reuse it; that
  first run is reported on its own (``managed_first_run``), the measured ones are second and later runs;
- **explicit**: ``spark.remote`` naming the benchmark's Spark Connect server (benchmark 8's, 127.0.0.1:15392).

Two sizes: a 10,000-record incremental run (2 clusters x 8 partitions; each mode's pipeline reads the same new
records from its own state) and the e2e data set from empty state (1,000,000 records; quick: 200,000). Both
servers are warmed by at least :data:`WARM_SMALL_RUNS` small runs and one e2e run each, and more until the managed
server's JIT has settled (:func:`bench.connect.warm_until_steady`), before anything is measured; the
in-process mode has nothing to warm. The modes run in a rotating order each repeat (the first repeat of the small
run is unmeasured). Reported per mode and size: wall, CPU (the run's process, any JVM it started, and the server's
CPU during the run) and whether the run started a JVM. Target: the managed server's 10,000-record run within
:data:`TARGET` x the explicit server's, with no JVM of its own.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from bench.connect import (
    SMALL_PARTITIONS,
    SMALL_RECORDS,
    WARM_MOST_E2E_RUNS,
    WARM_MOST_SMALL_RUNS,
    _fresh_topic,
    _run,
    warm_until_steady,
    warm_up_text,
)
from bench.connect import _server as explicit_server
from bench.env import BENCH_DIR, CLUSTERS, DataSet, fresh_dir, produce_fast, spark_settings, write_project

if TYPE_CHECKING:
    from bench.env import BenchEnv

MANAGED_DIR = BENCH_DIR / "spark-server"
SMALL_TOPIC = "local-small-8p"
WARM_SMALL_RUNS = 30
TARGET = 1.2
"""The managed local server's 10,000-record run: at most this many times the explicit server's wall."""
MODES = ("in-process", "managed", "explicit")


def bench_local(env: BenchEnv, settings: Any) -> dict[str, Any]:
    """8c. The default's runs with a JVM each, through the managed local server, and through an explicit server."""
    from bench.suite import _progress, median_of
    from dynamic_kafka.spark.local_server import SERVER_DIR_ENV, local_server_status, stop_local_server

    os.environ[SERVER_DIR_ENV] = str(MANAGED_DIR)  # the measured runs inherit it
    stop_local_server()  # the first managed run starts it
    explicit = explicit_server()
    sections = {
        "in-process": spark_settings(),
        "managed": {**spark_settings(), "local_server": True},
        "explicit": {"remote": explicit.remote},
    }
    data = settings.data_set()
    env.ensure_data_set(data)
    small_data = DataSet(SMALL_RECORDS, SMALL_PARTITIONS, settings.value_bytes)
    _fresh_topic(env, SMALL_TOPIC, SMALL_PARTITIONS)
    small_configs = {
        mode: write_project(fresh_dir(f"local-small-{mode}"), env, {c: [SMALL_TOPIC] for c in CLUSTERS}, spark=spark)
        for mode, spark in sections.items()
    }
    pending = dict.fromkeys(MODES, 0)  # records each mode's pipeline has not read yet
    server_pids: dict[str, int | None] = {"in-process": None, "managed": None, "explicit": explicit.pid}

    def produce_small() -> None:
        for c in CLUSTERS:
            produce_fast(env.bootstrap(c), SMALL_TOPIC, SMALL_RECORDS // len(CLUSTERS), small_data)
        for mode in MODES:
            pending[mode] += SMALL_RECORDS

    def small(mode: str) -> dict[str, Any]:
        run = _run(small_configs[mode], server_pids[mode], pending[mode])
        pending[mode] = 0
        return run

    def e2e(mode: str) -> dict[str, Any]:
        config = write_project(
            fresh_dir(f"local-e2e-{mode}"), env, {c: [data.topic] for c in CLUSTERS}, spark=sections[mode]
        )
        return _run(config, server_pids[mode], data.records)

    try:
        for config in small_configs.values():  # empty topic: pins every position, starts no Spark (no server)
            _run(config, None, 0)
        produce_small()
        first = small("managed")  # starts the managed server
        status = local_server_status()
        assert status.server is not None
        server_pids["managed"] = status.server.pid
        _progress(f"local: the managed server's first run (starts it): {first['wall_s']:.1f}s")
        managed_pid = status.server.pid

        def warm_small() -> float:
            produce_small()
            return float(small("explicit")["wall_s"] + small("managed")["wall_s"])

        def warm_e2e() -> float:
            return float(e2e("explicit")["wall_s"] + e2e("managed")["wall_s"])

        # Both servers until the managed one's JIT has settled (the explicit one is older, or as young): a young
        # server costs several times the CPU per run of a settled one (bench/connect.py, WARM_SMALL_RUNS).
        least = 3 if settings.quick else WARM_SMALL_RUNS
        most = least if settings.quick else WARM_MOST_SMALL_RUNS
        warm = warm_until_steady(warm_small, managed_pid, least=least, most=most, window=5)
        most_e2e = 1 if settings.quick else WARM_MOST_E2E_RUNS
        warm_big = warm_until_steady(warm_e2e, managed_pid, least=1, most=most_e2e, window=2)
        _progress(
            f"local: both servers warmed, small: {warm_up_text(warm)}; {data.records:,}: {warm_up_text(warm_big)}"
        )
        runs: dict[str, dict[str, list[dict[str, Any]]]] = {m: {"small": [], "e2e": []} for m in MODES}
        for rep in range(settings.repeats + 1):
            order = MODES[rep % 3 :] + MODES[: rep % 3]
            produce_small()
            for mode in order:
                run = small(mode)
                if rep:  # the first repeat: the in-process pipeline's backlog, the OS caches
                    runs[mode]["small"].append(run)
                    _progress(f"local small {mode} #{rep}: {run['wall_s']:.2f}s")
            if not rep:
                continue
            for mode in order:
                runs[mode]["e2e"].append(e2e(mode))
                _progress(f"local {data.records:,} {mode} #{rep}: {runs[mode]['e2e'][-1]['wall_s']:.1f}s")
    finally:
        stop_local_server()
    managed, explicit_wall = (median_of(runs[m]["small"], "wall_s") for m in ("managed", "explicit"))
    no_jvm = not any(r["java_started"] for size in runs["managed"].values() for r in size)
    ratio = managed / explicit_wall if managed and explicit_wall else None
    return {
        "records": data.records,
        "small_records": SMALL_RECORDS,
        "runs": runs,
        "cpu_s": {m: {size: _cpu(rs) for size, rs in sizes.items()} for m, sizes in runs.items()},
        "managed_first_run": first,
        "warm_up_small": warm,
        "warm_up_e2e": warm_big,
        "managed_no_jvm": no_jvm,
        "small_managed_vs_explicit": ratio,
        "target": TARGET,
        "passed": bool(ratio is not None and ratio <= TARGET and no_jvm),
    }


def _cpu(runs: list[dict[str, Any]]) -> float | None:
    """The median CPU of runs: the run's process, the JVM it started, and the server's during the run."""
    from bench.suite import median_of

    totals = [{"cpu": r["driver_cpu_s"] + (r["jvm_cpu_s"] or 0.0) + (r["server_cpu_s"] or 0.0)} for r in runs]
    return median_of(totals, "cpu")


def rows(k: dict[str, Any]) -> tuple[list[list[Any]], list[list[Any]]]:
    """The report's rows (mode, size, runs, wall, CPU, JVM started) and target rows for benchmark 8c."""
    from bench.suite import median_of

    table: list[list[Any]] = []
    for size, label in (("small", f"{k['small_records']:,}"), ("e2e", f"{k['records']:,}")):
        for mode in MODES:
            measured: list[dict[str, Any]] = k["runs"][mode][size]
            jvm = "yes" if any(r["java_started"] for r in measured) else "no"
            wall = median_of(measured, "wall_s")
            table.append([f"{label}: {mode}", len(measured), wall, k["cpu_s"][mode][size], jvm])
    first = k["managed_first_run"]
    table.append([f"{k['small_records']:,}: managed, first run (starts it)", 1, first["wall_s"], None, "server"])
    ratio = k["small_managed_vs_explicit"]
    jvm = "no JVM" if k["managed_no_jvm"] else "JVM STARTED"
    targets = [
        [
            f"8c {k['small_records']:,} via the managed local server / explicit server, wall",
            f"{ratio:.2f}x ({jvm})" if ratio else "-",
            f"<= {k['target']}x, no JVM",
            "PASS" if k["passed"] else "MISS",
        ]
    ]
    for size, label in (("small", f"{k['small_records']:,}"), ("e2e", f"{k['records']:,}")):
        own_jvm, managed, explicit = (
            median_of(k["runs"][m][size], "wall_s") for m in ("in-process", "managed", "explicit")
        )
        if own_jvm and managed:
            ratio_text = f"{own_jvm / managed:.1f}x ({own_jvm:.1f}s / {managed:.1f}s)"
            targets.append([f"8c {label}: in-process / managed local server, wall", ratio_text, "(report)", "-"])
        if size == "e2e" and managed and explicit:
            ratio_text = f"{managed / explicit:.2f}x ({managed:.1f}s / {explicit:.1f}s)"
            targets.append([f"8c {label}: managed local server / explicit server, wall", ratio_text, "(report)", "-"])
    return table, targets
