"""The six benchmarks. Each takes the environment and the settings and returns plain data (for the JSON report);
:mod:`bench.report` turns that into the printed tables.

Every measured command runs in a fresh process, alternating ours and the baseline where both exist
(ours-baseline, then baseline-ours, ...), so slow drifts of a shared machine hit both alike.
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.env import CLUSTERS, BenchEnv, DataSet, fresh_dir, write_project
from bench.measure import Measured, run_measured
from bench.runs import PYTHON, run_baseline, run_ceiling, run_ours, run_plan

if TYPE_CHECKING:
    from collections.abc import Callable

SCALE_PREFIX = "scale"
STATE_PARTITIONS = 2


@dataclass(frozen=True)
class Settings:
    """What to run and how big. ``defaults(quick)`` gives the two modes; the CLI flags override fields."""

    quick: bool
    records: int
    partitions: int
    value_bytes: int
    repeats: int
    growth_sizes: tuple[int, ...]
    growth_repeats: int
    scale_topics: tuple[int, ...]
    scale_partitions: int
    idle_repeats: int
    state_runs: int
    state_checkpoints: tuple[int, ...]
    s3_repeats: int = 2
    connect_sizes: tuple[int, ...] = (1_000_000, 10_000_000)
    only: frozenset[str] = field(default_factory=frozenset)
    # ``--only flink``: benchmark 8 runs its 1M comparison (ours via Connect, the Flink peer, the landing ceiling)
    # and nothing else.
    connect_e2e_only: bool = False

    @classmethod
    def defaults(cls, quick: bool) -> Settings:
        """Return the default settings, or the quick ones."""
        full = cls(
            quick=False,
            records=1_000_000,
            partitions=8,
            value_bytes=200,
            repeats=3,
            growth_sizes=(250_000, 1_000_000, 4_000_000),
            growth_repeats=1,
            scale_topics=(5, 50),
            scale_partitions=100,
            idle_repeats=5,
            state_runs=200,
            state_checkpoints=(1, 50, 100, 200),
        )
        if not quick:
            return full
        return replace(
            full,
            quick=True,
            records=200_000,
            # One run of each variant: at this size each run is ~20 s of mostly fixed cost, and three minutes
            # do not hold two pairs. The default mode gives medians.
            repeats=1,
            growth_sizes=(200_000, 400_000),
            scale_topics=(2, 10),
            idle_repeats=3,
            state_runs=10,
            state_checkpoints=(1, 4, 7, 10),
            s3_repeats=1,
            connect_sizes=(200_000, 400_000),
        )

    def wants(self, name: str) -> bool:
        """Tell whether the benchmark named ``name`` is selected."""
        return not self.only or name in self.only

    def data_set(self, records: int | None = None) -> DataSet:
        """Return the end-to-end data set (``records`` per run, default the settings')."""
        return DataSet(records or self.records, self.partitions, self.value_bytes)


def figures(m: Measured, *, records: int = 0, size: int = 0) -> dict[str, Any]:
    """One measured run as plain data: wall, throughput, memory, CPU and the phases it reported."""
    return {
        "wall_s": m.wall_s,
        "records": records,
        "bytes": size,
        "records_per_s": records / m.wall_s if records else None,
        "mb_per_s": size / 1e6 / m.wall_s if size else None,
        "driver_peak_mb": m.driver_peak_mb,
        "jvm_peak_mb": m.jvm_peak_mb,
        "driver_cpu_s": m.driver_cpu_s,
        "jvm_cpu_s": m.jvm_cpu_s,
        "java_started": m.java_started,
        **m.extra,
    }


def median_of(runs: list[dict[str, Any]], key: str) -> float | None:
    """Return the median of ``key`` over runs that report it, or None."""
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None


def _progress(text: str) -> None:
    print(f"  .. {text}", file=sys.stderr, flush=True)


def _topics(data: DataSet) -> dict[str, list[str]]:
    return {c: [data.topic] for c in CLUSTERS}


def ours_once(env: BenchEnv, data: DataSet, label: str) -> dict[str, Any]:
    """One of our runs from empty state to committed, in a fresh CLI process."""
    folder = fresh_dir(label)
    measured, summary = run_ours(write_project(folder, env, _topics(data)))
    if summary["status"] != "committed" or summary["records"] != data.records:
        raise RuntimeError(f"our run read {summary['records']} records ({summary['status']}), not {data.records}")
    return {
        **figures(measured, records=summary["records"], size=summary["bytes"]),
        "summary_plan_s": summary["plan_seconds"],
        "summary_spark_s": summary["spark_seconds"],
        "summary_commit_s": summary["commit_seconds"],
        "summary_total_s": summary["total_seconds"],
    }


# ---------------------------------------------------------------------------------------------- benchmarks


def bench_e2e(env: BenchEnv, settings: Settings) -> dict[str, Any]:
    """1. One ``dynamic-kafka run`` against the hand-written PySpark job, same ranges, alternating."""
    data = settings.data_set()
    ours: list[dict[str, Any]] = []
    baseline: list[dict[str, Any]] = []
    # Unmeasured: the brokers serve the data set once, so that the first measured run (always ours) does not pay
    # for their cold fetch path alone (seen: the first run's read + write ~4 s slower than the next ones).
    run_ceiling(env, data.topic, fresh_dir("e2e-warm-up"))
    for rep in range(settings.repeats):
        order = ("ours", "baseline") if rep % 2 == 0 else ("baseline", "ours")
        for variant in order:
            if variant == "ours":
                ours.append(ours_once(env, data, "e2e-ours"))
                _progress(f"e2e ours #{rep + 1}: {ours[-1]['wall_s']:.1f}s")
            else:
                measured = run_baseline(env, data.topic, fresh_dir("e2e-baseline"))
                size = ours[-1]["bytes"] if ours else 0
                baseline.append(figures(measured, records=data.records, size=size))
                _progress(f"e2e baseline #{rep + 1}: {baseline[-1]['wall_s']:.1f}s")
    size = ours[0]["bytes"]
    for run in baseline:  # the baseline counts nothing: it read what ours read
        run.update(bytes=size, mb_per_s=size / 1e6 / run["wall_s"])
    ratio = median_of(ours, "wall_s") / median_of(baseline, "wall_s")  # type: ignore[operator]
    cpu_ratio = _cpu(ours) / _cpu(baseline)
    return {
        "records": data.records,
        "bytes": size,
        "topic": data.topic,
        "ours": ours,
        "baseline": baseline,
        "wall_ratio": ratio,
        "cpu_ratio": cpu_ratio,
        "target": 1.10,
        "passed": ratio <= 1.10,
    }


def _cpu(runs: list[dict[str, Any]]) -> float:
    return statistics.median((r["driver_cpu_s"] or 0) + (r["jvm_cpu_s"] or 0) for r in runs)


def bench_ceiling(env: BenchEnv, settings: Settings, e2e: dict[str, Any] | None) -> dict[str, Any]:
    """2. The same ranges consumed by confluent-kafka in one Python process, values discarded."""
    data = settings.data_set()
    runs = []
    for rep in range(settings.repeats):
        measured = run_ceiling(env, data.topic, fresh_dir("ceiling"))
        if measured.extra["records"] != data.records:
            raise RuntimeError(f"the ceiling consumer read {measured.extra['records']} records, not {data.records}")
        run = figures(measured, records=data.records, size=int(measured.extra["bytes"]))
        run["consume_records_per_s"] = data.records / measured.extra["consume_s"]
        runs.append(run)
        _progress(f"ceiling #{rep + 1}: {measured.extra['consume_s']:.1f}s consuming")
    ceiling = median_of(runs, "consume_records_per_s")
    ours = median_of(e2e["ours"], "records_per_s") if e2e else None
    return {
        "records": data.records,
        "runs": runs,
        "ceiling_records_per_s": ceiling,
        "ours_records_per_s": ours,
        "fraction": ours / ceiling if ours and ceiling else None,
    }


def bench_idle(env: BenchEnv, settings: Settings) -> dict[str, Any]:
    """3. A run with nothing new to read: the state is at the latest offsets of a topic full of records."""
    data = settings.data_set()
    folder = fresh_dir("idle")
    config = write_project(folder, env, _topics(data), pipeline={"starting_offsets": "latest"})
    _, first = run_ours(config)  # no state yet: positions at latest are committed, nothing read
    if first["status"] != "empty":
        raise RuntimeError(f"the first idle run was {first['status']}, not empty")
    runs = []
    for _ in range(settings.idle_repeats):
        measured, summary = run_ours(config)
        runs.append(
            {
                **figures(measured),
                "status": summary["status"],
                "spark_started": summary["spark_started"],
                "summary_total_s": summary["total_seconds"],
            }
        )
    wall = median_of(runs, "wall_s")
    no_jvm = not any(r["spark_started"] or r["java_started"] for r in runs)
    all_empty = all(r["status"] == "empty" for r in runs)
    _progress(f"idle: {wall:.2f}s median")
    return {
        "runs": runs,
        "wall_s": wall,
        "no_jvm": no_jvm,
        "all_empty": all_empty,
        "target_s": 2.0,
        "passed": bool(wall is not None and wall < 2.0 and no_jvm and all_empty),
    }


def bench_scale(env: BenchEnv, settings: Settings) -> dict[str, Any]:
    """4. ``dynamic-kafka plan`` over thousands of (empty) partitions, without and with committed state."""
    names = [f"{SCALE_PREFIX}-{i:02d}" for i in range(max(settings.scale_topics))]
    created = env.ensure_topics(names, settings.scale_partitions)
    points: list[dict[str, Any]] = []
    for count in settings.scale_topics:
        partitions = count * settings.scale_partitions * len(CLUSTERS)
        folder = fresh_dir(f"scale-{partitions}")
        config = write_project(folder, env, {c: names[:count] for c in CLUSTERS})
        cold = [_plan_once(config, partitions) for _ in range(settings.repeats)]
        measured, summary = run_ours(config)  # empty topics: commits every position, starts no JVM
        if summary["partitions"] != partitions or summary["spark_started"]:
            raise RuntimeError(f"the scale run recorded {summary['partitions']} partitions, not {partitions}")
        warm = [_plan_once(config, partitions) for _ in range(settings.repeats)]
        points.append(
            {
                "partitions": partitions,
                "plan_no_state": cold,
                "plan_no_state_s": median_of(cold, "wall_s"),
                "run": {**figures(measured), "summary_plan_s": summary["plan_seconds"]},
                "plan_with_state": warm,
                "plan_with_state_s": median_of(warm, "wall_s"),
            }
        )
        _progress(
            f"scale {partitions}: plan {points[-1]['plan_no_state_s']:.2f}s / {points[-1]['plan_with_state_s']:.2f}s"
        )
    largest = points[-1]
    worst = max(largest["plan_no_state_s"], largest["plan_with_state_s"])
    return {
        "points": points,
        "topics_created_s": created,
        "brokers": env.broker_memory(),
        "target_s": 3.0,
        "passed": worst < 3.0,
    }


def _plan_once(config: Path, partitions: int) -> dict[str, Any]:
    measured, splits = run_plan(config)
    if splits != partitions:
        raise RuntimeError(f"the plan lists {splits} splits, not {partitions}")
    return figures(measured)


def bench_growth(env: BenchEnv, settings: Settings, e2e: dict[str, Any] | None) -> dict[str, Any]:
    """5. Our run at growing record counts: time per record and driver memory."""
    points = []
    for records in settings.growth_sizes:
        data = settings.data_set(records)
        if e2e and records == e2e["records"]:
            runs = e2e["ours"]
        else:
            env.ensure_data_set(data)
            repeats = settings.growth_repeats
            runs = [ours_once(env, data, f"growth-{records}") for _ in range(repeats)]
        wall = median_of(runs, "wall_s")
        read_write = median_of(runs, "read_write_s")
        points.append(
            {
                "records": records,
                "runs": runs,
                "wall_s": wall,
                "us_per_record": 1e6 * wall / records if wall else None,
                "read_write_us_per_record": 1e6 * read_write / records if read_write else None,
                "driver_peak_mb": median_of(runs, "driver_peak_mb"),
                "jvm_peak_mb": median_of(runs, "jvm_peak_mb"),
            }
        )
        _progress(f"growth {records}: {wall:.1f}s")
    first, last = points[0], points[-1]
    flat_time = last["us_per_record"] <= first["us_per_record"] * 1.10
    flat_memory = last["driver_peak_mb"] <= first["driver_peak_mb"] * 1.10 + 16
    return {"points": points, "time_flat_or_falling": flat_time, "driver_memory_flat": flat_memory}


def bench_state(env: BenchEnv, settings: Settings) -> dict[str, Any]:
    """6. Many small runs in one process; planning time and state bytes read per load by run count."""
    topic = f"state-growth-{settings.state_runs}"
    for c in CLUSTERS:
        env.delete_topics(c, list(env.offsets(c, [topic])))
        env.create_topics(c, [topic], STATE_PARTITIONS)
    folder = fresh_dir("state-growth")
    config = write_project(folder, env, {c: [topic] for c in CLUSTERS})
    spec = {
        "config": str(config),
        "bootstrap": {c: env.bootstrap(c) for c in CLUSTERS},
        "topic": topic,
        "partitions": STATE_PARTITIONS,
        "records_per_run": 3,
        "runs": settings.state_runs,
        "checkpoints": [c for c in settings.state_checkpoints if c <= settings.state_runs],
    }
    spec_path = folder / "spec.json"
    spec_path.write_text(json.dumps(spec))
    measured = run_measured([PYTHON, "-m", "bench.state_growth", str(spec_path)], timeout_s=3600).check()
    result = json.loads(measured.stdout.strip().splitlines()[-1])
    for c in CLUSTERS:
        env.delete_topics(c, [topic])
    points = result["checkpoints"]
    # The first checkpoint is a table one run old; the log replayed on open then saws between two checkpoints
    # (up to checkpoint_interval JSON entries), so "flat" compares the last figure with the second one.
    reference, last = points[min(1, len(points) - 1)], points[-1]
    bytes_flat = last["load_bytes"] <= reference["load_bytes"] * 1.5
    plan_flat = last["plan_s"] <= reference["plan_s"] * 1.5 + 0.05
    _progress(f"state growth: {len(result['runs'])} runs in {measured.wall_s:.0f}s")
    return {
        "runs": settings.state_runs,
        "process": figures(measured),
        "checkpoints": points,
        "run_s_median": statistics.median(r["run_s"] for r in result["runs"]),
        "run_s_first_10": statistics.median(r["run_s"] for r in result["runs"][:10]),
        "run_s_last_10": statistics.median(r["run_s"] for r in result["runs"][-10:]),
        "load_bytes_flat": bytes_flat,
        "plan_time_flat": plan_flat,
        "passed": bytes_flat and plan_flat,
    }


def bench_s3(env: BenchEnv, settings: Settings) -> dict[str, Any]:
    """7. The end-to-end run with sink and state on S3 (the local S3 server on loopback) beside the same run to
    local disk, alternating, each from empty state in a fresh CLI process.
    """
    from devtools.local_s3 import start_server, stop_server
    from devtools.testing.clusters import distinct_free_ports

    data = settings.data_set()
    base = fresh_dir("local-s3")
    (port,) = distinct_free_ports(1)
    server = start_server(port=port, base_dir=base, buckets=["bench"])
    credentials = server.environment()
    storage = {
        "endpoint": server.endpoint,
        "region": credentials["AWS_REGION"],
        "path_style": True,
        "access_key_id": credentials["AWS_ACCESS_KEY_ID"],
        "secret_access_key": credentials["AWS_SECRET_ACCESS_KEY"],
    }
    local: list[dict[str, Any]] = []
    s3: list[dict[str, Any]] = []
    server_peak_mb = 0.0
    try:
        for rep in range(settings.s3_repeats):
            order = ("local", "s3") if rep % 2 == 0 else ("s3", "local")
            for variant in order:
                folder = fresh_dir(f"s3-{variant}")
                pipeline = None
                if variant == "s3":
                    pipeline = {"sink": {"path": f"s3://bench/run-{rep}/sink"}, "storage": storage}
                measured, summary = run_ours(write_project(folder, env, _topics(data), pipeline=pipeline))
                if summary["status"] != "committed" or summary["records"] != data.records:
                    raise RuntimeError(f"{variant} run read {summary['records']} records, not {data.records}")
                (s3 if variant == "s3" else local).append(
                    {**figures(measured, records=summary["records"], size=summary["bytes"]), **measured.extra}
                )
                server_peak_mb = max(server_peak_mb, _rss_mb(server.pid or 0))
                _progress(f"s3 {variant} #{rep + 1}: {(s3 if variant == 's3' else local)[-1]['wall_s']:.1f}s")
    finally:
        stop_server(base_dir=base, purge=True)
    ratio = median_of(s3, "wall_s") / median_of(local, "wall_s")  # type: ignore[operator]
    return {
        "records": data.records,
        "local": local,
        "s3": s3,
        "wall_ratio": ratio,
        "server_rss_mb": server_peak_mb,
        "moto": server.moto_version,
    }


def _rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` now (the S3 server holds every object in memory, up to its spill size)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def bench_connect(env: BenchEnv, settings: Settings, e2e: dict[str, Any] | None) -> dict[str, Any]:
    """8. Warm Spark Connect (see :mod:`bench.connect`)."""
    from bench.connect import bench_connect as run

    return run(env, settings, e2e)


def bench_connect_sizes(env: BenchEnv, settings: Settings) -> dict[str, Any]:
    """8b. Growing runs through a warm Spark Connect server (see :mod:`bench.connect`)."""
    from bench.connect import bench_connect_sizes as run

    return run(env, settings)


def bench_local(env: BenchEnv, settings: Settings) -> dict[str, Any]:
    """8c. Local mode without a JVM per run (see :mod:`bench.local_mode`)."""
    from bench.local_mode import bench_local as run

    return run(env, settings)


def bench_publish(env: BenchEnv, settings: Settings) -> dict[str, Any]:
    """9. Publishing a Delta table: ours beside Spark's Kafka writer and a producer loop (see :mod:`bench.publish`)."""
    from bench.publish import bench_publish as run

    return run(env, settings)


def bench_dagster(env: BenchEnv, settings: Settings) -> dict[str, Any]:
    """10. A small run launched by Dagster's schedule beside the same run from the CLI (:mod:`bench.dagster_run`)."""
    from bench.dagster_run import bench_dagster as run

    return run(env, settings)


BENCHMARKS: dict[str, Callable[..., dict[str, Any]]] = {
    "e2e": bench_e2e,
    "ceiling": bench_ceiling,
    "idle": bench_idle,
    "scale": bench_scale,
    "growth": bench_growth,
    "state": bench_state,
    "s3": bench_s3,
    "connect": bench_connect,
    "connect10m": bench_connect_sizes,
    "local": bench_local,
    "publish": bench_publish,
    "dagster": bench_dagster,
}


def settings_dict(settings: Settings) -> dict[str, Any]:
    """Return the settings as plain data for the JSON results."""
    data = asdict(settings)
    data["only"] = sorted(settings.only)
    return data
