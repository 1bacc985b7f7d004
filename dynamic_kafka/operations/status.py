"""A pipeline's status: per partition the committed next offset, the broker's latest offset and the lag, plus the
last run and the warnings of recent runs (data-loss gaps, unread ranges of removed clusters, skipped clusters),
and the verdicts an orchestrator's health checks show (:func:`data_loss_verdict`, :func:`lag_limit_verdict`, ...).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from dynamic_kafka import clock as wall_clock
from dynamic_kafka.frozen import FrozenModel, replaced
from dynamic_kafka.kafka import run_requests, status_requests, take_broker_snapshot
from dynamic_kafka.model.plan import Finding, LostRange, TopicPartition
from dynamic_kafka.model.snapshots import PartitionStatus, RunStatus
from dynamic_kafka.model.summary import RunSummary
from dynamic_kafka.model.text import table as text_table
from dynamic_kafka.sink.per_stream import known_tables
from dynamic_kafka.sink.tables import open_delta_rs

if TYPE_CHECKING:
    from dynamic_kafka.kafka.snapshot import ClusterRequest
    from dynamic_kafka.model.snapshots import StateSnapshot
    from dynamic_kafka.protocol.context import PipelineContext


class PartitionLag(BaseModel):
    """One partition's position and lag."""

    model_config = ConfigDict(frozen=True)

    cluster_id: str
    topic: str
    partition: int
    status: PartitionStatus
    next_offset: int
    latest_offset: int | None
    lag: int | None
    removed_at: datetime | None = None
    earliest_offset: int | None = Field(None, description="The broker's earliest offset (None: not answered).")
    topic_id: str | None = Field(None, description="The topic id the committed offset belongs to.")
    updated_run_seq: int = Field(0, description="The last run that moved this partition's offset.")
    reset: bool = Field(
        False,
        description="The last run that moved this offset was an ``offsets reset`` (not a read): the next run "
        "starts there.",
    )


class StreamTableStatus(FrozenModel):
    """One stream's own table (a ``sink.path`` with ``{stream}``): where it is, the last run it holds, its lag."""

    stream_id: str
    table: str = Field(description="The stream's table.")
    exists: bool = Field(description="Whether the table exists (a stream's first landing run creates it).")
    last_run_seq: int | None = Field(None, description="The last run whose transaction the table holds.")
    version: int | None = Field(None, description="The table's latest Delta version.")
    lag: int = Field(0, description="Records pending on the stream's active partitions (the status's lag, summed).")
    partitions: tuple[TopicPartition, ...] = Field((), description="The partitions whose records land in the table.")


class PipelineStatus(BaseModel):
    """What ``dynamic-kafka status`` shows."""

    model_config = ConfigDict(frozen=True)

    pipeline_id: str
    never_ran: bool = Field(
        False,
        description="No run was ever planned: nothing is committed, so there is no lag yet. The brokers of the "
        "streams the pipeline subscribes to are still asked, so an unreachable one shows in unreachable_clusters.",
    )
    partitions: tuple[PartitionLag, ...]
    total_lag: int
    unreachable_clusters: tuple[str, ...]
    lag_unknown_clusters: tuple[str, ...] = Field(
        (),
        description="Clusters whose lag ``total_lag`` cannot include: unreachable now, or skipped by the last run "
        "(a cluster never read has no state to ask about).",
    )
    last_run: RunSummary | None
    last_run_status: RunStatus | None
    warnings: tuple[Finding, ...]
    tables: tuple[StreamTableStatus, ...] = Field(
        (), description="A table per stream: each stream table the state knows (empty for one sink)."
    )

    def of_table(self, stream_id: str) -> PipelineStatus:
        """This status as one stream's table sees it (a table per stream), for the checks of that table: its
        partitions and their lag, the last run's part in it (its rows and dead letters there, the findings on its
        topics) and the warnings on its topics. A cluster whose lag is unknown stays unknown (it cannot be told
        which table's records it holds). A stream the status has no table of gets an empty status.
        """
        table = next((t for t in self.tables if t.stream_id == stream_id), None)
        keys = set(table.partitions) if table is not None else set()
        topics = {(k.cluster_id, k.topic) for k in keys}

        def on_table(finding: Finding) -> bool:
            return finding.topic is None or (finding.cluster_id, finding.topic) in topics

        rows = tuple(r for r in self.partitions if (r.cluster_id, r.topic) in topics)
        last = self.last_run
        if last is not None:
            part = next((t for t in last.stream_tables if t.stream_id == stream_id), None)
            last = last.in_table(part, tuple(f for f in last.findings if on_table(f)))
        return replaced(
            self,
            partitions=rows,
            total_lag=table.lag if table is not None else 0,
            last_run=last,
            warnings=tuple(f for f in self.warnings if on_table(f)),
            tables=(table,) if table is not None else (),
        )

    def offsets_text(self) -> str:
        """The offsets table, for people."""
        if self.never_ran:
            return f"pipeline {self.pipeline_id} has never run: no offsets are committed yet"
        lines = text_table(
            ["cluster", "topic", "topic id", ">part", ">next", ">earliest", ">latest", ">lag", "state", "last run"],
            (
                (
                    p.cluster_id,
                    p.topic,
                    p.topic_id or "-",
                    p.partition,
                    p.next_offset,
                    *("?" if v is None else v for v in (p.earliest_offset, p.latest_offset, p.lag)),
                    "reset" if p.reset else p.status,
                    p.updated_run_seq,
                )
                for p in self.partitions
            ),
        )
        return f"pipeline {self.pipeline_id}:\n" + "\n".join(lines)


def pipeline_status(context: PipelineContext, *, history: int = 20, timeout_s: float | None = None) -> PipelineStatus:
    """Reads the state and asks every cluster in it for its latest offsets (best effort: an unreachable cluster
    shows no lag rather than failing the report). A pipeline that never ran has no cluster in its state: then the
    clusters of the streams it subscribes to are asked, so that brokers it cannot reach are reported all the same.
    ``timeout_s`` bounds each broker call (default: the pipeline's ``kafka_timeout_seconds``).
    """
    state = context.store.load()
    runs = context.store.run_history(limit=history)
    resets = {run.run_seq for run in runs if run.summary_status == "reset"}
    never_ran = state.last_run is None and not state.partitions
    requests = report_requests(context, state)
    brokers = take_broker_snapshot(
        requests,
        isolation_level=context.pipeline.isolation_level,
        now=wall_clock.utc_now(),
        timeout_s=timeout_s if timeout_s is not None else context.pipeline.kafka_timeout_seconds,
    )
    rows = []
    for key, row in sorted(state.partitions.items(), key=lambda kv: str(kv[0])):
        answered = brokers.clusters.get(key.cluster_id)
        topic = answered.topics.get(key.topic) if answered and answered.reachable else None
        offsets = topic.partitions.get(key.partition) if topic else None
        latest = offsets.latest if offsets else None
        earliest = offsets.earliest if offsets else None
        rows.append(
            PartitionLag(
                cluster_id=key.cluster_id,
                topic=key.topic,
                partition=key.partition,
                status=row.status,
                next_offset=row.next_offset,
                latest_offset=latest,
                lag=None if latest is None else max(0, latest - row.next_offset),
                removed_at=row.removed_at,
                earliest_offset=earliest,
                topic_id=row.topic_id,
                updated_run_seq=row.updated_run_seq,
                reset=row.updated_run_seq in resets,
            )
        )
    warnings = tuple(f for run in runs for f in run.plan.findings if f.is_warning)
    last = state.last_run
    last_run = last.summary if last else None
    unreachable = tuple(c for c, s in sorted(brokers.clusters.items()) if not s.reachable)
    skipped = last_run.skipped_clusters if last_run else ()
    return PipelineStatus(
        pipeline_id=context.pipeline.id,
        never_ran=never_ran,
        partitions=tuple(rows),
        total_lag=sum(r.lag or 0 for r in rows if r.status == "active"),
        unreachable_clusters=unreachable,
        lag_unknown_clusters=tuple(sorted({*unreachable, *skipped})),
        last_run=last_run,
        last_run_status=last.status if last else None,
        warnings=warnings,
        tables=_stream_tables(context, state, rows),
    )


def report_requests(context: PipelineContext, state: StateSnapshot) -> list[ClusterRequest]:
    """What a report asks the brokers, best effort: the clusters and topics of the state, or, for a pipeline that
    never ran, those of the streams it subscribes to (so brokers it cannot reach are reported all the same).
    """
    if state.last_run is None and not state.partitions:
        first_run = run_requests(context.pipeline, context.resolve(), state, context.service)
        return [r.best_effort() for r in first_run]
    return status_requests(state, context.service)


def _stream_tables(
    context: PipelineContext, state: StateSnapshot, rows: list[PartitionLag]
) -> tuple[StreamTableStatus, ...]:
    """Each stream's table the state knows (none for one sink: the report's own fields are its), with its last
    run (from its log, JVM-free) and its streams' lag.
    """
    pipeline = context.pipeline
    lag: dict[str, int] = {}
    for row in rows:
        key = TopicPartition(cluster_id=row.cluster_id, topic=row.topic, partition=row.partition)
        streams = state.partitions[key].stream_ids
        if streams and row.status == "active":
            lag[streams[0]] = lag.get(streams[0], 0) + (row.lag or 0)
    partitions: dict[str, list[TopicPartition]] = {}
    for key in sorted(state.partitions, key=str):
        if state.partitions[key].stream_ids:
            partitions.setdefault(state.partitions[key].stream_ids[0], []).append(key)
    tables = []
    for table in known_tables(pipeline, state):
        if table.stream is None:
            continue
        opened = open_delta_rs(table.sink, doing=f"reading the Delta log of {table.sink}")
        tables.append(
            StreamTableStatus(
                stream_id=table.stream,
                table=str(table.sink),
                exists=opened is not None,
                last_run_seq=opened.transaction_version(pipeline.id) if opened is not None else None,
                version=opened.version() if opened is not None else None,
                lag=lag.get(table.stream, 0),
                partitions=tuple(partitions.get(table.stream, ())),
            )
        )
    return tuple(tables)


VerdictName = Literal[
    "lag",
    "data_loss",
    "dead_letters",
    "completeness",
    "freshness",
    "idle_partitions",
    "stuck_transactions",
    "event_time_lag",
]


class HealthVerdict(FrozenModel):
    """One check's verdict on a pipeline: the checks after a run (``lag``, ``data_loss``, ``dead_letters``,
    ``completeness``: what an orchestrator's checks show) and the checks between runs (``dynamic-kafka health``).
    """

    name: VerdictName
    passed: bool
    severity: Literal["error", "warning"] = Field(
        description="What a failure means: 'error', data is missing; 'warning', it is late or kept aside."
    )
    description: str = Field(description="What is wrong, or a one-line all-clear.")
    problems: tuple[str, ...] = Field((), description="What is wrong, one sentence each; empty when passed.")
    lost_ranges: tuple[LostRange, ...] = Field((), description="The ranges the last run skipped as lost.")


def data_loss_verdict(status: PipelineStatus) -> HealthVerdict:
    """Fails (severity ``error``: records are missing from the sink) when the last run skipped lost ranges."""
    last = status.last_run
    lost = tuple(r for f in (last.findings if last else ()) if (r := f.lost_range) is not None)
    problems = (
        (f"the last run (run_seq {last.run_seq}) skipped lost records: {len(lost)} range(s)",)
        if lost and last is not None
        else ()
    )
    return HealthVerdict(
        name="data_loss",
        passed=not problems,
        severity="error",
        problems=problems,
        lost_ranges=lost,
        description="; ".join(problems) or "no data loss in the last run",
    )


def lag_limit_verdict(status: PipelineStatus, max_lag_records: int | None) -> HealthVerdict:
    """The ``lag`` check's verdict: is the pipeline within ``max_lag_records`` of the brokers.

    It fails (severity ``warning``: the data is late, not lost) when the lag exceeds ``max_lag_records``, or cannot
    be known on some cluster while a limit is set. Without a limit it always passes and reports the lag.
    """
    problems = []
    if max_lag_records is not None and status.total_lag > max_lag_records:
        problems.append(f"lag {status.total_lag} records exceeds max_lag_records {max_lag_records}")
    if max_lag_records is not None and status.lag_unknown_clusters:
        problems.append(
            f"lag unknown on cluster(s) {', '.join(status.lag_unknown_clusters)}, unreachable or skipped by the last "
            f"run (known lag {status.total_lag} records)"
        )
    return HealthVerdict(
        name="lag",
        passed=not problems,
        severity="warning",
        problems=tuple(problems),
        lost_ranges=(),
        description="; ".join(problems) or f"lag {status.total_lag} records",
    )


def dead_letter_verdict(status: PipelineStatus, max_dead_letters: int) -> HealthVerdict:
    """The ``dead_letters`` check's verdict: did the last run dead-letter at most ``max_dead_letters`` records.

    It fails with severity ``warning``, since the records are kept (in the dead-letter table), not lost.
    """
    last = status.last_run
    count = last.dead_letters if last is not None else 0
    problems = (
        (
            f"the last run (run_seq {last.run_seq}) sent {count} record(s) to the dead-letter table, "
            f"over {max_dead_letters}",
        )
        if last is not None and count > max_dead_letters
        else ()
    )
    return HealthVerdict(
        name="dead_letters",
        passed=not problems,
        severity="warning",
        problems=problems,
        lost_ranges=(),
        description="; ".join(problems) or f"{count} dead letter(s) in the last run (limit {max_dead_letters})",
    )


def completeness_verdict(status: PipelineStatus) -> HealthVerdict:
    """The ``completeness`` check's verdict: did the last run account for every record it read.

    It fails with severity ``error`` when a planned range's records read differ from its rows landed (sink and
    dead letters) plus those landed before (a backfill), naming each such range with its counts. Offsets Kafka
    returned no record for (transaction markers, aborted records, compacted records) are reported as skipped, not
    as a failure. A last run that read nothing, an operation, or a run whose counts were not taken passes, saying so.
    """
    last = status.last_run
    counted = last.completeness if last is not None else None
    if last is None or counted is None:
        why = "no run yet" if last is None else f"the last run (run_seq {last.run_seq}, {last.status}) was not counted"
        return HealthVerdict(
            name="completeness", passed=True, severity="error", problems=(), lost_ranges=(), description=why
        )
    problems = tuple(f"run_seq {last.run_seq} does not account for its records: {p}" for p in counted.mismatches)
    totals = (
        f"run_seq {last.run_seq}: planned {counted.planned} offsets in {len(counted.partitions)} range(s), read "
        f"{counted.read}, landed {counted.landed}, deduplicated {counted.deduplicated}, skipped by Kafka "
        f"{counted.skipped} (transaction markers, aborted or compacted records)"
    )
    return HealthVerdict(
        name="completeness",
        passed=not problems,
        severity="error",
        problems=problems,
        lost_ranges=(),
        description="; ".join(problems) or totals,
    )
