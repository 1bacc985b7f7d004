"""What a run reports: the run summary printed by the CLI, stored in the state and shown by Dagster."""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Literal, Protocol, TypedDict

from pydantic import Field

from dynamic_kafka.frozen import FrozenModel, replaced
from dynamic_kafka.model.client_statistics import ClusterClientStatistics
from dynamic_kafka.model.plan import Finding, Plan, TopicPartition

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

SummaryStatus = Literal["committed", "empty", "abandoned", "reset", "replayed", "realigned"]


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
    def sink_records(self) -> int:
        """Rows appended to the sink (a run) or inserted by a MERGE (a backfill)."""
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
        """The smallest event time read (the ``event_time`` expression's, else the Kafka timestamp)."""
        ...

    @property
    def max_event_time(self) -> datetime | None:
        """The largest event time read, likewise."""
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


class RealignedPositions(FrozenModel):
    """What ``realign`` found: the state's and the sink's positions when it realigned the state with its sink."""

    state_run_seq: int = Field(description="The state's last run before the realign.")
    sink_txn: int = Field(description="The highest run transaction the sink held (the realign's own run_seq).")
    state_backfill: int = Field(0, description="The state's backfill sequence before the realign.")
    sink_backfill: int = Field(0, description="The highest backfill transaction the sink held.")
    frontier_partitions: int = Field(0, description="Partitions whose backfill frontier the realign raised.")


class PartitionCount(FrozenModel):
    """One planned range of a run, counted: its offsets, the records Kafka returned for it, and where they went."""

    cluster_id: str
    topic: str
    partition: int
    planned: int = Field(description="Offsets in the planned range [start, stop).")
    read: int = Field(description="Records the Spark read returned with an offset in the range.")
    landed: int = Field(description="Rows of the run in the sink and the dead-letter table in the range.")
    deduplicated: int = Field(
        0, description="Records read but not landed because their coordinates were landed before (a backfill)."
    )

    @property
    def skipped(self) -> int:
        """Offsets Kafka returned no record for: transaction markers, aborted records, compacted records."""
        return self.planned - self.read

    @property
    def missing(self) -> int:
        """Records read that neither landed nor were landed before (negative: more landed than read)."""
        return self.read - self.landed - self.deduplicated

    @property
    def matches(self) -> bool:
        """Every record read is accounted for, and Kafka returned no more records than the range has offsets."""
        return self.missing == 0 and self.skipped >= 0

    def __str__(self) -> str:
        return (
            f"{self.cluster_id}/{self.topic}[{self.partition}]: planned {self.planned}, read {self.read}, landed "
            f"{self.landed}, deduplicated {self.deduplicated}, skipped by Kafka {self.skipped}"
        )


class Completeness(FrozenModel):
    """A run's records accounted for per planned range: what Kafka returned is what landed (sink rows and dead
    letters) plus what was landed before; the rest of the offsets are what Kafka legitimately skips (transaction
    markers, aborted records under read_committed, compacted records), reported, not an error.
    """

    partitions: tuple[PartitionCount, ...] = Field(description="Every range the run read, counted.")
    seconds: float = Field(0.0, description="What counting the landed rows took (the read's counts are free).")

    @classmethod
    def compare(
        cls,
        planned: Mapping[TopicPartition, int],
        read: Mapping[TopicPartition, int],
        landed: Mapping[TopicPartition, int],
        landed_before: Mapping[TopicPartition, int],
        *,
        seconds: float = 0.0,
    ) -> Completeness:
        """The counts per planned range. A record read but not landed by the run counts as deduplicated only as
        far as rows at its range's coordinates were landed before (``landed_before``: rows of other runs or of
        backfills, looked for only where a backfill may have landed some); beyond that it is missing.

        Example:
            >>> key = TopicPartition(cluster_id="east", topic="orders", partition=0)
            >>> counted = Completeness.compare({key: 10}, {key: 7}, {key: 7}, {})
            >>> (counted.matches, counted.skipped)
            (True, 3)
        """
        counts = []
        for key in sorted(planned, key=str):
            got, put, before = read.get(key, 0), landed.get(key, 0), landed_before.get(key, 0)
            counts.append(
                PartitionCount(
                    cluster_id=key.cluster_id,
                    topic=key.topic,
                    partition=key.partition,
                    planned=planned[key],
                    read=got,
                    landed=put,
                    deduplicated=min(max(0, got - put), before),
                )
            )
        return cls(partitions=tuple(counts), seconds=seconds)

    @property
    def mismatches(self) -> tuple[PartitionCount, ...]:
        """The ranges whose records are not accounted for."""
        return tuple(p for p in self.partitions if not p.matches)

    @property
    def matches(self) -> bool:
        """Every range's records are accounted for."""
        return not self.mismatches

    @property
    def planned(self) -> int:
        """Offsets planned, all ranges."""
        return sum(p.planned for p in self.partitions)

    @property
    def read(self) -> int:
        """Records Kafka returned, all ranges."""
        return sum(p.read for p in self.partitions)

    @property
    def landed(self) -> int:
        """Rows the run landed (sink and dead letters), all ranges."""
        return sum(p.landed for p in self.partitions)

    @property
    def deduplicated(self) -> int:
        """Records landed before, all ranges."""
        return sum(p.deduplicated for p in self.partitions)

    @property
    def skipped(self) -> int:
        """Offsets Kafka returned no record for, all ranges."""
        return sum(p.skipped for p in self.partitions)


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
        "recorded in the run history, which read nothing from Kafka; 'realigned' for a ``realign`` (``realign``)."
    )
    reason: str | None = Field(None, description="Why an abandoned run was abandoned, or why offsets were reset.")
    requested_by: str | None = Field(
        None, description="Who made an operation (reset, replay): the user and the process (host, pid)."
    )
    offset_changes: tuple[OffsetChange, ...] = Field((), description="The offsets an ``offsets reset`` moved.")
    replay: DeadLetterReplay | None = Field(None, description="What a ``dead-letters replay`` did.")
    realign: RealignedPositions | None = Field(None, description="What a ``realign`` found (the positions it moved).")
    recovered_run_seq: int | None = Field(None, description="A half-done earlier run this invocation finished.")
    records: int = 0
    bytes: int = 0
    dead_letters: int = 0
    sink_records: int = Field(
        0,
        description="Rows written to the sink: a run's appended rows (records minus dead letters), a backfill's rows "
        "its MERGE inserted (records read that were in the sink already are not inserted again).",
    )
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
    min_event_time: datetime | None = Field(
        None, description="The smallest event time read: the ``event_time`` expression's, else the Kafka timestamp."
    )
    max_event_time: datetime | None = Field(None, description="The largest event time read, likewise.")
    event_time: str | None = Field(
        None, description="The ``event_time`` expression the event times measure; None: the Kafka timestamp."
    )
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
    completeness: Completeness | None = Field(
        None,
        description="The run's records accounted for per planned range (None: not measured: nothing read, an "
        "operation, a run found landed by an earlier attempt, or more ranges than are counted).",
    )
    client_statistics: tuple[ClusterClientStatistics, ...] = Field(
        (),
        description="Per cluster, librdkafka's statistics of the clients this process used during the run (offset "
        "lookups, metadata, the group commit; not Spark's consumers), when ``register.consumer.metrics`` is on.",
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
    def found_landed(cls, plan: Plan, landed: Written, stream_tables: tuple[StreamTable, ...]) -> RunSummary:
        """The summary of a planned run its recovery found in the sink: committed, with what the tables' logs say
        it landed (``landed``: records, dead letters, the sink version; per table ``stream_tables``).
        """
        return cls(
            **_from_plan(plan, 0),
            status="committed",
            recovered_run_seq=plan.run_seq,
            records=landed.records,
            dead_letters=landed.dead_letters,
            sink_version=landed.sink_version,
            stream_tables=stream_tables,
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
        completeness: Completeness | None = None,
        stream_tables: tuple[StreamTable, ...] = (),
        plan_seconds: float = 0.0,
        spark_seconds: float = 0.0,
        total_seconds: float = 0.0,
    ) -> RunSummary:
        """The summary of a run (or backfill) that wrote ``plan``'s records, ``written`` saying what landed (per
        table of a table per stream: ``stream_tables``).
        """
        return cls(
            **_from_plan(plan, lag_after),
            status="committed",
            recovered_run_seq=recovered_run_seq,
            records=written.records,
            bytes=written.bytes,
            dead_letters=written.dead_letters,
            sink_records=written.sink_records,
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
            completeness=completeness,
            stream_tables=stream_tables,
            plan_seconds=plan_seconds,
            spark_seconds=spark_seconds,
            total_seconds=total_seconds,
        )

    @classmethod
    def realigned(cls, pipeline_id: str, realignment: RealignedPositions) -> RunSummary:
        """The history entry of a ``realign``: run ``sink_txn``, committed and empty, reading nothing."""
        return cls(pipeline_id=pipeline_id, run_seq=realignment.sink_txn, status="realigned", realign=realignment)

    @classmethod
    def stored(cls, summary_json: str, *, pipeline_id: str) -> RunSummary:
        """A summary as the state stores it. A realign of an earlier version stored a document of its own shape
        (``{"realigned": true, ...}``, without the pipeline): it is read as the ``realigned`` summary it stands for.
        """
        document = json.loads(summary_json)
        if isinstance(document, dict) and document.get("realigned") is True and "pipeline_id" not in document:
            realignment = RealignedPositions(
                state_run_seq=int(document.get("state_run_seq") or 0),
                sink_txn=int(document.get("sink_txn") or 0),
                state_backfill=int(document.get("state_backfill") or 0),
                sink_backfill=int(document.get("sink_backfill") or 0),
            )
            return cls.realigned(pipeline_id, realignment)
        return cls.model_validate(document)

    @classmethod
    def combined(cls, summaries: Sequence[RunSummary]) -> RunSummary:
        """One summary for the windows of one run: counts summed, per-topic counts merged, event times widened."""
        first = summaries[0]
        if len(summaries) == 1:
            return first
        topics: dict[tuple[str, str], tuple[int, int]] = {}
        for s in summaries:
            for t in s.topics:
                records, size = topics.get((t.cluster_id, t.topic), (0, 0))
                topics[(t.cluster_id, t.topic)] = (records + t.records, size + t.bytes)
        starts = [s.min_event_time for s in summaries if s.min_event_time is not None]
        ends = [s.max_event_time for s in summaries if s.max_event_time is not None]
        versions = [s.sink_version for s in summaries if s.sink_version is not None]
        return replaced(
            first,
            status="committed" if any(s.status == "committed" for s in summaries) else "empty",
            records=sum(s.records for s in summaries),
            bytes=sum(s.bytes for s in summaries),
            dead_letters=sum(s.dead_letters for s in summaries),
            sink_records=sum(s.sink_records for s in summaries),
            topics=tuple(
                TopicStats(cluster_id=c, topic=t, records=r, bytes=b) for (c, t), (r, b) in sorted(topics.items())
            ),
            clusters=tuple(sorted({c for s in summaries for c in s.clusters})),
            findings=tuple(f for s in summaries for f in s.findings),
            spark_started=any(s.spark_started for s in summaries),
            min_event_time=min(starts) if starts else None,
            max_event_time=max(ends) if ends else None,
            sink_version=max(versions) if versions else None,
            plan_seconds=sum(s.plan_seconds for s in summaries),
            spark_seconds=sum(s.spark_seconds for s in summaries),
            total_seconds=sum(s.total_seconds for s in summaries),
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
        return replaced(self, **{k: v for k, v in given.items() if v is not None})

    def in_table(self, part: StreamTable | None, findings: tuple[Finding, ...]) -> RunSummary:
        """This run as one stream's table saw it: its rows and dead letters there (``part``; None: it landed none
        there) and the ``findings`` on that table's topics.
        """
        return replaced(
            self,
            records=part.records if part is not None else 0,
            dead_letters=part.dead_letters if part is not None else 0,
            findings=findings,
            stream_tables=(part,) if part is not None else (),
        )

    def with_client_statistics(self, statistics: tuple[ClusterClientStatistics, ...]) -> RunSummary:
        """This summary with the statistics of the clients the run used."""
        return replaced(self, client_statistics=statistics)


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
    event_time: str | None


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
        event_time=plan.event_time,
    )
