"""The printed report: a few plain-text tables built from the results (the JSON report holds every run)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bench.connect import CLIENT_GROWTH_TARGET, CLIENT_PEAK_TARGET_MB
from bench.dagster_run import rows as dagster_rows
from bench.local_mode import rows as local_mode_rows
from bench.suite import median_of

if TYPE_CHECKING:
    from collections.abc import Sequence

Cell = str | int | float | None


def table(title: str, header: Sequence[str], rows: Sequence[Sequence[Cell]]) -> str:
    """A table with a title; the first column is left-aligned, the others right-aligned."""
    text = [[_cell(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in text)) if text else len(h) for i, h in enumerate(header)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    rule = "-" * len(line(list(header)))
    return "\n".join([title, rule, line(list(header)), rule, *(line(r) for r in text), ""])


def _cell(value: Cell) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if value >= 1000:
            return f"{value:,.0f}"
        return f"{value:.2f}" if value < 100 else f"{value:.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    return value


def _cpu(runs: list[dict[str, Any]]) -> float | None:
    driver, jvm = median_of(runs, "driver_cpu_s"), median_of(runs, "jvm_cpu_s")
    return None if driver is None else driver + (jvm or 0.0)


def _row(label: str, runs: list[dict[str, Any]]) -> list[Cell]:
    return [
        label,
        len(runs),
        median_of(runs, "wall_s"),
        median_of(runs, "records_per_s"),
        median_of(runs, "mb_per_s"),
        median_of(runs, "driver_peak_mb"),
        median_of(runs, "jvm_peak_mb"),
        _cpu(runs),
    ]


def _verdict(passed: bool | None) -> str:
    return "-" if passed is None else ("PASS" if passed else "MISS")


def render(results: dict[str, Any]) -> str:
    """Every table for the benchmarks that ran."""
    b = results["benchmarks"]
    out = [_header(results)]
    rows: list[list[Cell]] = []
    targets: list[list[Cell]] = []
    if "e2e" in b:
        e = b["e2e"]
        rows.append(_row(f"1 end to end {e['records']:,}: ours (dynamic-kafka run)", e["ours"]))
        rows.append(_row(f"1 end to end {e['records']:,}: baseline (hand-written)", e["baseline"]))
        targets.append(["1 ours / baseline, wall (median)", f"{e['wall_ratio']:.2f}", "<= 1.10", _verdict(e["passed"])])
        targets.append(["1 ours / baseline, CPU (median)", f"{e['cpu_ratio']:.2f}", "-", "-"])
    if "ceiling" in b:
        c = b["ceiling"]
        runs = [{**r, "records_per_s": r["consume_records_per_s"]} for r in c["runs"]]
        rows.append(_row(f"2 ceiling {c['records']:,}: confluent-kafka consume", runs))
        fraction = c["fraction"]
        targets.append(["2 ours / ceiling, records/s", f"{fraction:.2f}" if fraction else "-", "(report)", "-"])
    if "idle" in b:
        i = b["idle"]
        rows.append(_row("3 nothing to do: ours", i["runs"]))
        jvm = "no JVM" if i["no_jvm"] else "JVM STARTED"
        targets.append(
            ["3 nothing to do, wall (median)", f"{i['wall_s']:.2f}s, {jvm}", "< 2 s, no JVM", _verdict(i["passed"])]
        )
    if "growth" in b:
        for p in b["growth"]["points"]:
            rows.append(_row(f"5 growth {p['records']:,}: ours", p["runs"]))
    if "scale" in b:
        for p in b["scale"]["points"]:
            rows.append(_row(f"4 plan {p['partitions']:,} partitions, no state", p["plan_no_state"]))
            rows.append(_row(f"4 plan {p['partitions']:,} partitions, with state", p["plan_with_state"]))
        s = b["scale"]
        last = s["points"][-1]
        worst = max(last["plan_no_state_s"], last["plan_with_state_s"])
        targets.append(
            [f"4 plan {last['partitions']:,} partitions, wall", f"{worst:.2f}s", "< 3 s", _verdict(s["passed"])]
        )
    if "s3" in b:
        o = b["s3"]
        rows.append(_row(f"7 end to end {o['records']:,}: local disk", o["local"]))
        rows.append(_row(f"7 end to end {o['records']:,}: S3 (local server)", o["s3"]))
        targets.append(["7 S3 / local disk, wall (median)", f"{o['wall_ratio']:.2f}", "(report)", "-"])
    if "connect" in b:
        _connect(b["connect"], rows, targets)
    if "publish" in b:
        p = b["publish"]
        for variant, label in (
            ("ours", "ours (exactly once)"),
            ("ours-executors", "ours from Spark's executors"),
            ("spark", "Spark's Kafka writer"),
            ("loop", "producer loop"),
        ):
            rows.append(_row(f"9 publish {p['rows']:,}: {label}", p["runs"][variant]))
        for pair, ratio in p["ratios"].items():
            targets.append([f"9 publish {pair}, wall (median)", f"{ratio:.2f}", "(report)", "-"])
    header = ["benchmark", "runs", "wall s", "records/s", "MB/s", "driver MB", "JVM MB", "CPU s"]
    if rows:
        out.append(table("Medians (wall: whole fresh process; MB: peak RSS; CPU: driver + JVM user+sys)", header, rows))
    if "local" in b:
        local_rows, local_targets = local_mode_rows(b["local"])
        header = ["mode", "runs", "wall s", "CPU s", "JVM started"]
        title = "8c Local mode: a JVM per run, the managed local server, an explicit server"
        title += " (medians; CPU: run + JVM + server)"
        out.append(table(title, header, local_rows))
        targets += local_targets
    if "dagster" in b:
        dagster_table, dagster_targets = dagster_rows(b["dagster"])
        n = f"{b['dagster']['records']:,}"
        header = ["phase", "empty: Dagster", "empty: CLI", f"{n}: Dagster", f"{n}: CLI"]
        title = "10 A small run launched by Dagster's schedule (daemon on PostgreSQL) and from the CLI"
        title += f" (medians, seconds; deployment start {b['dagster']['deployment_startup_s']:.0f}s)"
        out.append(table(title, header, dagster_table))
        targets += dagster_targets
    if "connect10m" in b:
        sized = b["connect10m"]
        columns = {
            "wall s": "wall_s",
            "us/record": "us_per_record",
            "Spark us/record": "spark_us_per_record",
            "server CPU us/record": "server_cpu_us_per_record",
            "client peak MB": "client_peak_mb",
            "server peak MB": "server_peak_rss_mb",
            "heap after GC MB": "server_heap_after_gc_mb",
        }
        sized_rows = [[f"{p['records']:,}", *(p[key] for key in columns.values())] for p in sized["points"]]
        title = "8b Growing runs through a warm Spark Connect server (one fresh process each)"
        out.append(table(title, ["records", *columns], sized_rows))
        targets.append(_wanted("8b time per record flat or falling (Connect)", sized["time_flat_or_falling"]))
        targets.append(_wanted("8b server memory bounded", sized["memory_bounded"]))
        if "client_peak_ratio" in sized:
            low, high = sized["points"][0], sized["points"][-1]
            measured = (
                f"{high['client_peak_mb']:.0f} MB at {high['records']:,} / {low['client_peak_mb']:.0f} MB at "
                f"{low['records']:,}: {sized['client_peak_ratio']:.2f}x"
            )
            wanted = f"<= {CLIENT_GROWTH_TARGET}x, < {CLIENT_PEAK_TARGET_MB} MB"
            targets.append(["8b client peak RSS", measured, wanted, _verdict(sized["client_bounded"])])
    if "growth" in b:
        g = b["growth"]
        grow = [
            [
                f"{p['records']:,}",
                p["wall_s"],
                p["us_per_record"],
                p["read_write_us_per_record"],
                p["driver_peak_mb"],
                p["jvm_peak_mb"],
            ]
            for p in g["points"]
        ]
        out.append(
            table(
                "5 Growth with data (ours, medians)",
                ["records", "wall s", "us/record", "read+write us/record", "driver MB", "JVM MB"],
                grow,
            )
        )
        targets.append(_wanted("5 time per record flat or falling", g["time_flat_or_falling"]))
        targets.append(_wanted("5 driver memory flat", g["driver_memory_flat"]))
    if "e2e" in b:
        out.append(_phases(b["e2e"]))
    if "scale" in b:
        s = b["scale"]
        scale_rows = [
            [
                f"{p['partitions']:,}",
                p["plan_no_state_s"],
                p["run"]["wall_s"],
                p["run"]["summary_plan_s"],
                p["plan_with_state_s"],
            ]
            for p in s["points"]
        ]
        out.append(
            table(
                "4 Planning at scale (empty topics; the run commits every position without a JVM)",
                ["partitions", "plan s (no state)", "run s (empty)", "run's plan s", "plan s (with state)"],
                scale_rows,
            )
        )
        brokers = ", ".join(
            f"{c}: peak RSS {m['peak_rss_mb']:.0f} MB, heap used {m['heap_used_mb']:.0f} MB"
            if m["peak_rss_mb"] and m["heap_used_mb"]
            else f"{c}: {m}"
            for c, m in s["brokers"].items()
        )
        out.append(f"  brokers after planning (-Xmx512m each): {brokers}\n")
    if "state" in b:
        st = b["state"]
        state_rows = [
            [
                p["runs"],
                p["run_s"],
                p["plan_s"],
                1000 * p["load_s"],
                p["load_bytes"],
                p["state_files"],
                p["log_entries"],
                p["sink_log_entries"],
            ]
            for p in st["checkpoints"]
        ]
        out.append(
            table(
                f"6 State growth ({st['runs']} runs in one process; plan/load best of 3)",
                ["after run", "run s", "plan s", "load ms", "load bytes", "state files", "state log", "sink log"],
                state_rows,
            )
        )
        out.append(
            f"  run wall: median {st['run_s_median']:.2f}s (first 10: {st['run_s_first_10']:.2f}s, "
            f"last 10: {st['run_s_last_10']:.2f}s)\n"
        )
        targets.append(
            ["6 bytes read per load flat", _yes(st["load_bytes_flat"]), "yes", _verdict(st["load_bytes_flat"])]
        )
        targets.append(["6 planning time flat", _yes(st["plan_time_flat"]), "yes", _verdict(st["plan_time_flat"])])
    out.append(table("Targets", ["target", "measured", "wanted", "result"], targets))
    for name, error in results.get("failed", {}).items():
        out.append(f"FAILED: benchmark {name}: {error.strip().splitlines()[-1] if error.strip() else '?'}")
    return "\n".join(out)


def _wanted(target: str, met: bool) -> list[Any]:
    """A target's row whose wanted answer is yes."""
    return [target, _yes(met), "yes", _verdict(met)]


def _yes(value: bool) -> str:
    return "yes" if value else "no"


def _phases(e2e: dict[str, Any]) -> str:
    ours, base = e2e["ours"], e2e["baseline"]
    rows: list[list[Cell]] = [
        [
            "Python start-up, config, plan (state written ahead)",
            median_of(ours, "startup_plan_s"),
            median_of(base, "import_s"),
        ],
        ["Spark session (JVM, jars, Delta)", median_of(ours, "spark_start_s"), median_of(base, "spark_start_s")],
        ["read Kafka + write Delta (one job)", median_of(ours, "read_write_s"), median_of(base, "job_s")],
        ["commit offsets to the state", median_of(ours, "commit_s"), None],
        ["exit (JVM shutdown)", median_of(ours, "exit_s"), None],
        ["whole process", median_of(ours, "wall_s"), median_of(base, "wall_s")],
    ]
    return table("1 Where the time goes (medians, seconds)", ["phase", "ours", "baseline"], rows)


def _header(results: dict[str, Any]) -> str:
    m = results["machine"]
    mode = "quick" if results["settings"]["quick"] else "default"
    return (
        f"dynamic-kafka benchmarks, {mode} mode, {results['started_at']} (commit {results['commit']})\n"
        f"machine: {m['cores']} cores, {m['memory_gb']:.0f} GB; load average {m['load_before'][0]:.1f} before, "
        f"{m['load_after'][0]:.1f} after; CPUs busy {100 * m['busy_before']:.0f}% just before the run "
        f"(other work included)\n"
        f"whole run: {results['total_wall_s']:.0f}s (setup {results['setup_s']:.0f}s: clusters, topics, data; "
        f"of it Spark's one-time jar record and class archive {results.get('spark_warm_up_s', 0.0):.0f}s)\n"
    )


def _connect(k: dict[str, Any], rows: list[list[Cell]], targets: list[list[Cell]]) -> None:
    """Benchmark 8's rows and targets: the parts that ran (``--only flink`` runs the 1M comparison alone)."""
    if "small" in k:
        rows.append(_row("8 small 10,000 (fresh process): Spark Connect", k["small"]["connect"]))
        rows.append(_row("8 small 10,000 (fresh process): local Spark", k["small"]["local"]))
    n = f"{k['e2e_records']:,}"
    rows.append(_row(f"8 end to end {n}: Spark Connect, a pipeline's repeated run", k["e2e_connect"]))
    rows.append(_row(f"8 end to end {n}: Spark Connect, a pipeline's first run", k["e2e_first_run"]))
    if k["e2e_baseline"]:
        rows.append(_row(f"8 end to end {n}: baseline (hand-written)", k["e2e_baseline"]))
    rows.append(_row(f"8 end to end {n}: Structured Streaming AvailableNow (Connect)", k["e2e_available_now"]))
    rows.append(_row(f"8 read {n}: Flink DKS, discard (one java process)", k["e2e_flink"]))
    rows.append(_row(f"8 end to end {n}: landing ceiling", k["landing_ceiling"]))
    if "small" in k:
        server_cpu = median_of(k["small"]["connect"], "server_cpu_s")
        jvm = "no JVM" if k["small_no_jvm"] else "JVM STARTED"
        targets.append(
            [
                "8 small run via Connect, wall",
                f"{k['small_connect_wall_s']:.2f}s ({jvm}; server CPU {server_cpu or 0:.2f}s)",
                f"<= {k['small_target_s']} s, no JVM",
                _verdict(k["small_passed"]),
            ]
        )
        if k.get("small_requests") is not None:
            kinds = ", ".join(f"{kind} {count:.0f}" for kind, count in k["small_requests_by_kind"].items())
            measured = f"{k['small_requests']:.0f} ({kinds})"
            targets.append(["8 small run via Connect: requests to the server", measured, "(report)", "-"])
            first = k["small_first_request_s"]
            measured = f"{k['small_import_before_request_s']:.2f}s (first request at {first or 0:.2f}s, probed)"
            targets.append(["8 small run via Connect: import time before the first request", measured, "(report)", "-"])
    ratio = k["e2e_vs_baseline"]
    if ratio is not None:
        targets.append([f"8 {n} via Connect / baseline, wall", f"{ratio:.2f}", "<= 0.6", _verdict(k["e2e_passed"])])
    for label, key, target, passed in (
        ("repeated run / landing ceiling", "e2e_vs_landing", k["landing_target"], k["landing_passed"]),
        ("first run / landing ceiling", "first_vs_landing", k["first_landing_target"], k["first_landing_passed"]),
        ("repeated run / Flink DKS read + discard", "e2e_vs_flink", k["flink_target"], k["flink_passed"]),
        ("first run / Flink DKS read + discard", "first_vs_flink", k["flink_target"], k["first_flink_passed"]),
    ):
        value = k[key]
        targets.append(
            [f"8 {n} via Connect, {label}, wall", f"{value:.2f}x" if value else "-", f"<= {target}x", _verdict(passed)]
        )
    for label, key in (
        ("AvailableNow / landing ceiling", "available_now_vs_landing"),
        ("repeated run via Connect / AvailableNow", "e2e_vs_available_now"),
        ("repeated run / first run via Connect", "e2e_repeated_vs_first"),
    ):
        value = k.get(key)
        if value is not None:
            targets.append([f"8 {n} {label}, wall", f"{value:.2f}x", "(report)", "-"])
    cpu = k.get("e2e_cpu_vs_flink")
    if cpu is not None:
        measured = f"{cpu:.2f}x ({k['e2e_cpu_s']:.1f}s / {k['flink_cpu_s']:.1f}s)"
        targets.append([f"8 {n} CPU: ours (run + server) / Flink DKS", measured, "(report)", "-"])
    if "soak_runs" not in k:
        return
    targets.append(
        [
            f"8 {k['soak_runs']} runs: last {k['soak_window']} / first {k['soak_window']}",
            f"{k['soak_last_s']:.2f}s / {k['soak_first_s']:.2f}s",
            "within 20%",
            _verdict(k["soak_passed"]),
        ]
    )
    rss = ", ".join(f"{p['runs']}: {p['server_rss_mb']:.0f}" for p in k["soak_server_rss"])
    targets.append([f"8 server RSS MB by runs ({rss})", "-", "flat", "-"])
    heap = ", ".join(
        f"{p['runs']}: {p['server_heap_after_gc_mb']:.0f}"
        for p in k["soak_server_rss"]
        if p.get("server_heap_after_gc_mb") is not None
    )
    if heap:
        targets.append([f"8 server heap after full GC, MB by runs ({heap})", "-", "flat", "-"])
