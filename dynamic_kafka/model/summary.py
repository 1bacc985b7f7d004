"""What a run reports: the run summary printed by the CLI, stored in the state and shown by Dagster."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Literal, Protocol, TypedDict

from pydantic import Field

from dynamic_kafka.frozen import FrozenModel
from dynamic_kafka.model.plan import Finding, Plan

if TYPE_CHECKING:
    from collections.abc import Mapping

SummaryStatus = Literal["committed", "empty", "abandoned", "reset", "replayed"]


class Written(Protocol):
    """What a run summary reads of a write (``dynamic_kafka.sink.WriteResult`` has it)."""

    @property
    def records(self) -> int:
        """Records read (a run: and landed)."""
        ...

    @property
    def bytes(self) -> int:
        """Their key plus value bytes."""
        ...

    @property
    def dead_letters(self) -> int:
        """Undecodable records landed in the dead-letter table."""
        ...

    @property
    def deduplicated(self) -> int:
        """Records read that a backfill had landed already."""
        ...

    @property
    def per_topic(self) -> Mapping[tuple[str, str], tuple[int, int]]:
        """(records, bytes) per planned (cluster_id, topic)."""
        ...

    @property
    def min_event_time(self) -> datetime | None:
        """The smallest Kafka timestamp read."""
        ...

    @property
    def max_event_time(self) -> datetime | None:
        """The largest Kafka timestamp read."""
        ...

    @property
    def sink_version(self) -> int | None:
        """The sink's Delta version holding the write."""
        ...


class TopicStats(FrozenModel):
    """Records and bytes (key + value) landed from one topic of one cluster in one run."""

    cluster_id: str
    topic: str
    records: int = 0
    bytes: int = 0


class DecodedSchema(FrozenModel):
    """A Schema Registry subject version whose records a run decoded (never a URL or credentials)."""

    stream_id: str
    cluster_id: str
    subject: str
    version: int
    schema_id: int
    records: int = 0


class GroupCommit(FrozenModel):
    """The consumer-group commit of one cluster after a run (monitoring only: a failure changes nothing else)."""

    cluster_id: str
    group: str
    committed: bool
    error: str | None = Field(None, description="Why it failed (no secret), when it did.")


class OffsetChange(FrozenModel):
    """One partition's committed next offset moved by ``offsets reset``: from where, to where, and the broker's
    offsets when it was decided.
    """

    cluster_id: str
    topic: str
    partition: int
    topic_id: str | None = None
    status: str = Field(description="The partition's state row status: 'active', or 'removed' (its kept offset).")
    from_offset: int = Field(description="The committed next offset before the reset.")
    to_offset: int = Field(description="The next offset after the reset: where the next run starts reading.")
    earliest: int = Field(description="The broker's earliest offset when the reset was decided.")
    latest: int = Field(description="The broker's latest offset when the reset was decided.")

    @property
    def read_again(self) -> int:
        """Offsets the next run reads again (a reset backwards); records already in the sink are not landed twice."""
        return max(0, self.from_offset - self.to_offset)

    @property
    def skipped(self) -> int:
        """Offsets no run will read (a reset forwards)."""
        return max(0, self.to_offset - self.from_offset)


class DeadLetterReplay(FrozenModel):
    """What one ``dead-letters replay`` did: dead letters decoded again under the config of the day."""

    replay_seq: int = Field(description="The replay's number: its Delta transaction version in both tables.")
    run_seq: int | None = Field(None, description="Only the dead letters of this run were replayed (None: all).")
    replayed: int = Field(0, description="Dead letters that decode now and were landed in the sink by this replay.")
    already_landed: int = Field(
        0, description="Dead letters an interrupted earlier replay had landed already: removed, not landed again."
    )
    still_undecodable: int = Field(0, description="Dead letters that still do not decode; kept, with the new error.")
    conflicting: int = Field(
        0,
        description="Dead letters that decode, but whose coordinates the sink holds with another record (a topic "
        "recreated since): kept, not landed.",
    )
    sink_version: int | None = None
    dead_letter_version: int | None = None


class StreamTable(FrozenModel):
    """What one run landed in one stream's own table (a ``sink.path`` with ``{stream}``)."""

    stream_id: str
    path: str = Field(description="The stream's table.")
    records: int = Field(0, description="Rows of the run in the table (with its dead letters).")
    dead_letters: int = 0
    sink_version: int | None = Field(None, description="The table's Delta version holding the run.")


class RunSummary(FrozenModel):
    """One run, as it finished."""

    pipeline_id: str
    run_seq: int
    status: SummaryStatus = Field(
        description="'committed'; 'empty' when there was nothing to read; 'abandoned' for a planned run that could "
        "not complete and was given up without committing its offsets (``reason`` says why); 'reset' for an "
        "``offsets reset`` (``offset_changes``), 'replayed' for a ``dead-letters replay`` (``replay``): operations "
        "recorded in the run history, which read nothing from Kafka."
    )
    reason: str | None = Field(None, description="Why an abandoned run was abandoned, or why offsets were reset.")
    requested_by: str | None = Field(
        None, description="Who made an operation (reset, replay): the user and the process (host, pid)."
    )
    offset_changes: tuple[OffsetChange, ...] = Field((), description="The offsets an ``offsets reset`` moved.")
    replay: DeadLetterReplay | None = Field(None, description="What a ``dead-letters replay`` did.")
    recovered_run_seq: int | None = Field(None, description="A half-done earlier run this invocation finished.")
    records: int = 0
    bytes: int = 0
    dead_letters: int = 0
    deduplicated: int = Field(
        0, description="Records read that a time-window backfill had already landed: not written again, not counted."
    )
    topics: tuple[TopicStats, ...] = ()
    schemas: tuple[DecodedSchema, ...] = Field(
        (), description="Registry subject versions the run decoded records of, with their record counts."
    )
    clusters: tuple[str, ...] = ()
    splits: int = Field(0, description="Splits read (non-empty ranges).")
    partitions: int = Field(0, description="Partitions whose position the run recorded.")
    planned_records: int = 0
    lag_after: int = Field(0, description="Records known to be pending after the run (caps, stopping offsets).")
    capped: bool = Field(False, description="A cap left records behind; the next run has work right away.")
    spark_started: bool = False
    min_event_time: datetime | None = None
    max_event_time: datetime | None = None
    sink_version: int | None = None
    stream_tables: tuple[StreamTable, ...] = Field(
        (), description="A table per stream: what the run landed in each stream's table (empty otherwise)."
    )
    skipped_clusters: tuple[str, ...] = ()
    findings: tuple[Finding, ...] = ()
    metadata_fingerprint: str = ""
    bootstrap_source: str | None = Field(
        None, description="The archive a bootstrap run landed (format and location); None for other runs."
    )
    bootstrap_records: int | None = Field(None, description="The archive rows a bootstrap run landed.")
    group_commits: tuple[GroupCommit, ...] = Field(
        (), description="Per cluster, whether the consumer group got the run's offsets (empty: no group)."
    )
    plan_seconds: float = 0.0
    spark_seconds: float = 0.0
    commit_seconds: float = 0.0
    total_seconds: float = 0.0

    @property
    def warnings(self) -> tuple[Finding, ...]:
        """Return the findings that are warnings."""
        return tuple(f for f in self.findings if f.is_warning)

    @classmethod
    def of_plan(
        cls,
        plan: Plan,
        status: SummaryStatus,
        *,
        lag_after: int = 0,
        recovered_run_seq: int | None = None,
        reason: str | None = None,
        plan_seconds: float = 0.0,
    ) -> RunSummary:
        """The summary of a run that wrote nothing itself: empty, abandoned, or recovered from a sink that held it."""
        return cls(
            **_from_plan(plan, lag_after),
            status=status,
            recovered_run_seq=recovered_run_seq,
            reason=reason,
            plan_seconds=plan_seconds,
        )

    @classmethod
    def committed(
        cls,
        plan: Plan,
        written: Written,
        *,
        lag_after: int = 0,
        recovered_run_seq: int | None = None,
        schemas: tuple[DecodedSchema, ...] = (),
        plan_seconds: float = 0.0,
        spark_seconds: float = 0.0,
        total_seconds: float = 0.0,
    ) -> RunSummary:
        """The summary of a run (or backfill) that wrote ``plan``'s records, ``written`` saying what landed."""
        return cls(
            **_from_plan(plan, lag_after),
            status="committed",
            recovered_run_seq=recovered_run_seq,
            records=written.records,
            bytes=written.bytes,
            dead_letters=written.dead_letters,
            deduplicated=written.deduplicated,
            topics=tuple(
                TopicStats(cluster_id=c, topic=t, records=r, bytes=b)
                for (c, t), (r, b) in sorted(written.per_topic.items())
            ),
            schemas=schemas,
            spark_started=True,
            min_event_time=written.min_event_time,
            max_event_time=written.max_event_time,
            sink_version=written.sink_version,
            plan_seconds=plan_seconds,
            spark_seconds=spark_seconds,
            total_seconds=total_seconds,
        )

    def timed(
        self,
        *,
        plan_seconds: float | None = None,
        commit_seconds: float | None = None,
        total_seconds: float | None = None,
        group_commits: tuple[GroupCommit, ...] | None = None,
    ) -> RunSummary:
        """This summary with the durations (and consumer-group commits) known once the run ended."""
        given = {
            "plan_seconds": plan_seconds,
            "commit_seconds": commit_seconds,
            "total_seconds": total_seconds,
            "group_commits": group_commits,
        }
        return self.model_copy(update={k: v for k, v in given.items() if v is not None})


class _PlanFields(TypedDict):
    pipeline_id: str
    run_seq: int
    clusters: tuple[str, ...]
    splits: int
    partitions: int
    planned_records: int
    lag_after: int
    capped: bool
    skipped_clusters: tuple[str, ...]
    findings: tuple[Finding, ...]
    metadata_fingerprint: str
    bootstrap_source: str | None
    bootstrap_records: int | None


def _from_plan(plan: Plan, lag_after: int) -> _PlanFields:
    """The summary fields that come from the plan alone."""
    read = plan.read_splits
    return _PlanFields(
        pipeline_id=plan.pipeline_id,
        run_seq=plan.run_seq,
        clusters=tuple(sorted({s.cluster_id for s in plan.splits})),
        splits=len(read),
        partitions=len(plan.splits),
        planned_records=plan.planned_records,
        lag_after=lag_after,
        capped=plan.capped,
        skipped_clusters=plan.skipped_clusters,
        findings=plan.findings,
        metadata_fingerprint=plan.metadata_fingerprint,
        bootstrap_source=f"{plan.bootstrap.format} {plan.bootstrap.location}" if plan.bootstrap else None,
        bootstrap_records=plan.bootstrap.rows if plan.bootstrap else None,
    )
