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


class RunSummary(BaseModel):
    """One run, as it finished."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    pipeline_id: str
    run_seq: int
    status: Literal["committed", "empty", "abandoned"] = Field(
        description="'committed'; 'empty' when there was nothing to read; 'abandoned' for a planned run that could "
        "not complete and was given up without committing its offsets (``reason`` says why)."
    )
    reason: str | None = Field(None, description="Why an abandoned run was abandoned.")
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
