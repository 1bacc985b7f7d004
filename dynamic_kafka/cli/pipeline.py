"""The ``plan``, ``run``, ``status`` and ``abandon`` commands: one pipeline of a project config.

Each prints a readable report, or with ``--json`` one JSON document on stdout for machines. Failures print one
paragraph to stderr and exit non-zero (handled by the CLI dispatcher).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from dynamic_kafka.cli._args import add_config_argument
from dynamic_kafka.errors import ClusterUnreachableError
from dynamic_kafka.pipeline import Pipeline

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable

    from dynamic_kafka.model.plan import Finding, Plan
    from dynamic_kafka.model.summary import Completeness, RunSummary


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Registers ``plan``, ``run``, ``status`` and ``abandon``."""
    commands: list[tuple[str, str, Callable[[argparse.Namespace], int]]] = [
        ("plan", "show the splits the next run would read, reading and writing nothing", _plan),
        ("run", "execute one incremental run and print its summary", _run),
        ("status", "show per partition the committed offset, latest offset, lag, and the last run", _status),
        (
            "abandon",
            "give up a planned (crashed) run that cannot complete: its offsets are not committed, the state's "
            "history records it with the reason, and the next run plans afresh",
            _abandon,
        ),
    ]
    for name, help_text, handler in commands:
        parser = subparsers.add_parser(name, help=help_text, description=help_text)
        add_config_argument(parser)
        parser.add_argument("--pipeline", required=True, help="pipeline id from the config")
        parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
        if name == "abandon":
            parser.add_argument("--run-seq", type=int, required=True, help="the planned run to abandon")
            parser.add_argument("--reason", required=True, help="why (recorded in the state's run history)")
        parser.set_defaults(handler=handler)


def _pipeline(args: argparse.Namespace) -> Pipeline:
    return Pipeline.from_config(args.config, args.pipeline)


def _emit(args: argparse.Namespace, data: Any, text: Callable[[], str]) -> int:
    print(json.dumps(data, indent=2, default=str) if args.json else text())
    return 0


def _findings_text(findings: tuple[Finding, ...]) -> list[str]:
    return [f"  {'WARNING' if f.is_warning else 'note'}: {f.message}" for f in findings]


def _plan(args: argparse.Namespace) -> int:
    plan = _pipeline(args).plan()
    return _emit(args, plan.model_dump(mode="json"), lambda: format_plan(plan))


def format_plan(plan: Plan) -> str:
    """A plan as a table of splits."""
    lines = [f"pipeline {plan.pipeline_id}: run {plan.run_seq} would read {plan.planned_records} offsets"]
    lines.append(f"  {'cluster':<12} {'topic':<24} {'part':>4} {'start':>12} {'stop':>12} {'records':>10}  stream")
    for s in plan.splits:
        flag = " (draining)" if s.draining else ""
        lines.append(
            f"  {s.cluster_id:<12} {s.topic:<24} {s.partition:>4} {s.start_offset:>12} {s.stop_offset:>12} "
            f"{s.record_count:>10}  {s.stream_id}{flag}"
        )
    lines += [f"  marks removed: {k}" for k in plan.removals]
    lines += _findings_text(plan.findings)
    return "\n".join(lines)


def _run(args: argparse.Namespace) -> int:
    # One run per process: past its deadline, a run that does not stop ends the process (see max_run_seconds).
    summary = Pipeline.from_config(args.config, args.pipeline, hard_deadline=True).run()
    return _emit(args, summary.model_dump(mode="json"), lambda: format_summary(summary))


def format_summary(summary: RunSummary) -> str:
    """A run summary as a short report."""
    lines = [
        f"pipeline {summary.pipeline_id}: run {summary.run_seq} {summary.status}: {summary.records} records read: "
        f"{summary.sink_records} landed in the sink, {summary.dead_letters} dead-lettered, "
        f"{summary.bytes} bytes from {summary.splits} splits in {summary.total_seconds:.1f}s "
        f"(plan {summary.plan_seconds:.1f}s, spark {summary.spark_seconds:.1f}s, commit {summary.commit_seconds:.1f}s; "
        f"spark {'started' if summary.spark_started else 'not started'})"
    ]
    if summary.recovered_run_seq is not None:
        lines.append(f"  recovered run {summary.recovered_run_seq} first")
    lines += [f"  {t.cluster_id}/{t.topic}: {t.records} records, {t.bytes} bytes" for t in summary.topics]
    if summary.dead_letters:
        lines.append(f"  {summary.dead_letters} undecodable records went to the dead-letter table")
    if summary.deduplicated:
        lines.append(f"  {summary.deduplicated} records read were already in the sink from a backfill (not written)")
    if summary.lag_after:
        lines.append(f"  {summary.lag_after} records pending after this run{' (capped)' if summary.capped else ''}")
    lines += _completeness_text(summary.completeness)
    lines += _findings_text(summary.findings)
    return "\n".join(lines)


def _completeness_text(counted: Completeness | None) -> list[str]:
    """The run's completeness: one line of totals, then a line per range whose records are not accounted for."""
    if counted is None:
        return []
    verdict = "every record read landed" if counted.matches else f"{len(counted.mismatches)} range(s) do NOT match"
    lines = [
        f"  completeness: {verdict}: planned {counted.planned} offsets, read {counted.read}, landed {counted.landed} "
        f"(sink + dead letters), deduplicated {counted.deduplicated}, skipped by Kafka {counted.skipped} "
        "(transaction markers, aborted or compacted records)"
    ]
    return lines + [f"    mismatch {p}" for p in counted.mismatches]


def _status(args: argparse.Namespace) -> int:
    status = _pipeline(args).status()

    def text() -> str:
        if status.never_ran:
            return (
                f"pipeline {status.pipeline_id} has never run: no offsets are committed yet, so there is no lag to "
                "show; its first run (`dynamic-kafka run`) starts at its starting_offsets"
            )
        lines = [f"pipeline {status.pipeline_id}: total lag {status.total_lag}"]
        lines.append(f"  {'cluster':<12} {'topic':<24} {'part':>4} {'next':>12} {'latest':>12} {'lag':>10}  status")
        for p in status.partitions:
            latest = "?" if p.latest_offset is None else str(p.latest_offset)
            lag = "?" if p.lag is None else str(p.lag)
            lines.append(
                f"  {p.cluster_id:<12} {p.topic:<24} {p.partition:>4} {p.next_offset:>12} {latest:>12} {lag:>10}  "
                f"{p.status}"
            )
        if status.unreachable_clusters:
            lines.append(f"  unreachable: {', '.join(status.unreachable_clusters)}")
        for t in status.tables:
            landed = "not created yet" if not t.exists else f"last run {t.last_run_seq}, version {t.version}"
            lines.append(f"  table of stream {t.stream_id}: {t.table} ({landed}), lag {t.lag}")
        if status.last_run:
            lines.append(
                f"  last run: {status.last_run.run_seq} {status.last_run_status}, {status.last_run.records} records"
            )
        lines += _findings_text(status.warnings)
        return "\n".join(lines)

    _emit(args, status.model_dump(mode="json"), text)
    if status.unreachable_clusters:
        # The report above shows what is known; an exit code of 0 would tell a script the lag is known.
        names = ", ".join(status.unreachable_clusters)
        raise ClusterUnreachableError(
            "no answer from the brokers, so its lag is unknown (a status that cannot see the lag does not pass).",
            cluster_id=names,
            hint="Check that the brokers run and that the metadata's bootstrap_servers and properties for "
            f"{names} are right (`dynamic-kafka check` validates the files).",
        )
    return 0


def _abandon(args: argparse.Namespace) -> int:
    pipeline = _pipeline(args)
    reason = args.reason.strip()
    version = pipeline.abandon(args.run_seq, reason)
    data = {"pipeline_id": pipeline.id, "run_seq": args.run_seq, "status": "abandoned", "reason": reason}
    return _emit(
        args,
        {**data, "state_version": version},
        lambda: f"run {args.run_seq} of pipeline {pipeline.id} abandoned (offsets not committed): {reason}",
    )
