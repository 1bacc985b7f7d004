"""The ``plan``, ``run``, ``status`` and ``abandon`` commands: a pipeline of a project config (``plan``, ``run`` and
``status`` also every pipeline, with ``--all``).

Each prints a readable report, or with ``--json`` one JSON document on stdout for machines. Failures print one
paragraph to stderr and exit non-zero (handled by the CLI dispatcher).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from dynamic_kafka.cli._args import add_config_argument, examples
from dynamic_kafka.cli._pipelines import Outcome, add_pipeline_arguments, each_pipeline, one_pipeline
from dynamic_kafka.errors import ClusterUnreachableError
from dynamic_kafka.model.text import table

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable

    from dynamic_kafka.model.plan import Finding, Plan
    from dynamic_kafka.model.summary import Completeness, RunSummary
    from dynamic_kafka.operations.status import PipelineStatus
    from dynamic_kafka.pipeline import Pipeline

_EXAMPLES = {
    "plan": """\
examples:
  dynamic-kafka plan                          the config's only pipeline
  dynamic-kafka plan --pipeline orders --json
  dynamic-kafka plan --all --config prod.yaml
""",
    "run": """\
examples:
  dynamic-kafka run                           the config's only pipeline
  dynamic-kafka run --pipeline orders
  dynamic-kafka run --all --json              every pipeline; one JSON array of summaries
""",
    "status": """\
examples:
  dynamic-kafka status --pipeline orders
  dynamic-kafka status --all
""",
    "abandon": """\
example:
  dynamic-kafka abandon --pipeline orders --run-seq 42 --reason "topic deleted before the run could finish"
""",
}


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
        parser = subparsers.add_parser(name, help=help_text, description=help_text, **examples(_EXAMPLES[name]))
        add_config_argument(parser)
        add_pipeline_arguments(parser, every=name != "abandon")
        parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
        if name == "abandon":
            parser.add_argument("--run-seq", type=int, required=True, help="the planned run to abandon")
            parser.add_argument("--reason", required=True, help="why (recorded in the state's run history)")
        parser.set_defaults(handler=handler)


def _findings_text(findings: tuple[Finding, ...]) -> list[str]:
    return [f"  {'WARNING' if f.is_warning else 'note'}: {f.message}" for f in findings]


def _plan(args: argparse.Namespace) -> int:
    def plan(pipeline: Pipeline) -> Outcome:
        made = pipeline.plan()
        return Outcome(made.model_dump(mode="json"), lambda: format_plan(made))

    return each_pipeline(args, plan)


def format_plan(plan: Plan) -> str:
    """A plan as a table of splits."""
    lines = [f"pipeline {plan.pipeline_id}: run {plan.run_seq} would read {plan.planned_records} offsets"]
    lines += table(
        ["cluster", "topic", ">part", ">start", ">stop", ">records", "stream"],
        (
            (
                s.cluster_id,
                s.topic,
                s.partition,
                s.start_offset,
                s.stop_offset,
                s.record_count,
                f"{s.stream_id}{' (draining)' if s.draining else ''}",
            )
            for s in plan.splits
        ),
    )
    lines += [f"  marks removed: {k}" for k in plan.removals]
    lines += _findings_text(plan.findings)
    return "\n".join(lines)


def _run(args: argparse.Namespace) -> int:
    def run(pipeline: Pipeline) -> Outcome:
        summary = pipeline.run()
        return Outcome(summary.model_dump(mode="json"), lambda: format_summary(summary))

    # Runs one after another in this process: past its deadline, a run that does not stop ends the process (see
    # max_run_seconds), which a scheduler then retries.
    return each_pipeline(args, run, hard_deadline=True)


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
    return each_pipeline(args, _status_of)


def _status_of(pipeline: Pipeline) -> Outcome:
    status = pipeline.status()
    unreachable = None
    if status.unreachable_clusters:
        # The report shows what is known; an exit code of 0 would tell a script the lag is known.
        names = ", ".join(status.unreachable_clusters)
        unreachable = ClusterUnreachableError(
            "no answer from the brokers, so its lag is unknown (a status that cannot see the lag does not pass).",
            cluster_id=names,
            hint="Check that the brokers run and that the metadata's bootstrap_servers and properties for "
            f"{names} are right (`dynamic-kafka check` validates the files).",
        )
    return Outcome(status.model_dump(mode="json"), lambda: format_status(status), error=unreachable)


def format_status(status: PipelineStatus) -> str:
    """A pipeline's status for people: a table of partitions, then its tables and its last run."""
    if status.never_ran:
        return (
            f"pipeline {status.pipeline_id} has never run: no offsets are committed yet; its first run "
            "(`dynamic-kafka run`) starts at its starting_offsets"
        )
    lines = [f"pipeline {status.pipeline_id}: total lag {status.total_lag}"]
    lines += table(
        ["cluster", "topic", ">part", ">next", ">latest", ">lag", "status"],
        (
            (p.cluster_id, p.topic, p.partition, p.next_offset, _known(p.latest_offset), _known(p.lag), p.status)
            for p in status.partitions
        ),
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


def _known(value: int | None) -> str:
    return "?" if value is None else str(value)


def _abandon(args: argparse.Namespace) -> int:
    pipeline = one_pipeline(args)
    reason = args.reason.strip()
    version = pipeline.abandon(args.run_seq, reason)
    data = {"pipeline_id": pipeline.id, "run_seq": args.run_seq, "status": "abandoned", "reason": reason}
    print(
        json.dumps({**data, "state_version": version}, indent=2)
        if args.json
        else f"run {args.run_seq} of pipeline {pipeline.id} abandoned (offsets not committed): {reason}"
    )
    return 0
