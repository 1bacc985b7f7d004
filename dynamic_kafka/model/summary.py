"""What a run reports: the run summary printed by the CLI, stored in the state and shown by Dagster."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from dynamic_kafka.model.plan import Finding, Plan


class TopicStats(BaseModel):
    """Records and bytes (key + value) landed from one topic of one cluster in one run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cluster_id: str
    topic: str
    records: int = 0
    bytes: int = 0


class DecodedSchema(BaseModel):
    """A Schema Registry subject version whose records a run decoded (never a URL or credentials)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    stream_id: str
    cluster_id: str
    subject: str
    version: int
    schema_id: int
    records: int = 0


class GroupCommit(BaseModel):
    """The consumer-group commit of one cluster after a run (monitoring only: a failure changes nothing else)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cluster_id: str
    group: str
    committed: bool
    error: str | None = Field(None, description="Why it failed (no secret), when it did.")


class OffsetChange(BaseModel):
    """One partition's committed next offset moved by ``offsets reset``: from where, to where, and the broker's
    offsets when it was decided.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

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


class DeadLetterReplay(BaseModel):
    """What one ``dead-letters replay`` did: dead letters decoded again under the config of the day."""

    model_config = ConfigDict(frozen=True, extra="forbid")

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


class RunSummary(BaseModel):
    """One run, as it finished."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    pipeline_id: str
    run_seq: int
    status: Literal["committed", "empty", "abandoned", "reset", "replayed"] = Field(
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


def base_summary(plan: Plan, lag_after: int) -> dict[str, object]:
    """The summary fields that come from the plan alone."""
    read = plan.read_splits
    return {
        "pipeline_id": plan.pipeline_id,
        "run_seq": plan.run_seq,
        "clusters": tuple(sorted({s.cluster_id for s in plan.splits})),
        "splits": len(read),
        "partitions": len(plan.splits),
        "planned_records": plan.planned_records,
        "lag_after": lag_after,
        "capped": plan.capped,
        "skipped_clusters": plan.skipped_clusters,
        "findings": plan.findings,
        "metadata_fingerprint": plan.metadata_fingerprint,
        "bootstrap_source": f"{plan.bootstrap.format} {plan.bootstrap.location}" if plan.bootstrap else None,
        "bootstrap_records": plan.bootstrap.rows if plan.bootstrap else None,
    }
