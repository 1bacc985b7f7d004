"""``dead-letters replay``: decode a pipeline's dead letters again under the current config and land the ones that
decode now in the sink, exactly once (see :mod:`dynamic_kafka.sink.redecode` for how the two tables are written).
With a table per stream (``sink.path: data/{stream}``), each stream's dead letters go back into that stream's
table, one stream after the other, each pair of tables written as one pipeline's are: a replay interrupted between
two streams leaves the ones after it untouched, and the next replay finishes them.

Guarded like a backfill, never beside a run: the pipeline's run lock is held for the whole replay (a run or
backfill on this machine refuses it, and it refuses them), the state's backfill lease is taken before anything is
written (runs on other hosts do not plan while it is fresh) and checked before each write, and a planned run
(in flight, or crashed and waiting for its recovery) refuses it.

Each replay takes the next replay number (one past the highest ``<pipeline>/replay`` transaction either table
holds) as the Delta transaction of its two writes, and is recorded in the run history as a run of its own (summary
status ``replayed``: who, when, and how many dead letters were replayed, were found landed already, still do not
decode, or conflict), after both writes. A replay interrupted before that record leaves its writes in the tables'
Delta history (``DESCRIBE HISTORY`` shows the transaction); the next replay finishes its work and is recorded.

Example:
    >>> report = replay_dead_letters(context, run_seq=None, yes=True)  # doctest: +SKIP
    >>> report.replay.replayed  # doctest: +SKIP
    12
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from pydantic import Field

from dynamic_kafka.errors import MetadataServiceError
from dynamic_kafka.frozen import FrozenModel, replaced
from dynamic_kafka.model.summary import DeadLetterReplay, RunSummary
from dynamic_kafka.operations.offsets_reset import requester
from dynamic_kafka.protocol.guard import WriterGuard
from dynamic_kafka.sink.per_stream import known_tables
from dynamic_kafka.sink.redecode import ReplayCounts, replay, replay_app_id
from dynamic_kafka.sink.tables import committed_txn_versions, table_exists
from dynamic_kafka.state.owner import RunOwner

if TYPE_CHECKING:
    from collections.abc import Iterable

    from dynamic_kafka.metadata.models import ClusterMetadata
    from dynamic_kafka.protocol.context import PipelineContext
    from dynamic_kafka.spark.deadline import RunDeadline

logger = logging.getLogger(__name__)


class ReplayReport(FrozenModel):
    """What ``dead-letters replay`` found and did (or, without ``yes``, would do)."""

    pipeline_id: str
    dead_letters: int = Field(description="The dead letters looked at (of ``replay.run_seq``, or all).")
    replay: DeadLetterReplay
    applied: bool = Field(description="Whether the tables were written (``--yes``) or the replay only counted.")
    requested_by: str
    history_run_seq: int | None = Field(None, description="The run of the history that records the replay.")
    state_version: int | None = None

    def recorded(self, history_run_seq: int, state_version: int) -> ReplayReport:
        """This report once the history recorded the replay as run ``history_run_seq``, in ``state_version``."""
        return replaced(self, history_run_seq=history_run_seq, state_version=state_version)

    def text(self) -> str:
        """What the replay found and did, for people."""
        which = f"of run {self.replay.run_seq}" if self.replay.run_seq is not None else "in all"
        if not self.dead_letters:
            return f"pipeline {self.pipeline_id}: no dead letters {which}; nothing to replay."
        r = self.replay
        verb = "replayed" if self.applied else "a replay would land"
        lines = [
            f"pipeline {self.pipeline_id}: {self.dead_letters} dead letter(s) {which} decoded again under the "
            f"current config:",
            f"  {verb} {r.replayed} into the sink"
            + (f" (replay {r.replay_seq}" if self.applied else "")
            + (f", sink version {r.sink_version})" if self.applied and r.sink_version is not None else "")
            + (")" if self.applied and r.sink_version is None else ""),
        ]
        if r.already_landed:
            lines.append(
                f"  {r.already_landed} were in the sink already (an interrupted replay): removed, not landed twice"
            )
        if r.still_undecodable:
            lines.append(f"  {r.still_undecodable} still do not decode: kept, with their new error")
        if r.conflicting:
            lines.append(f"  {r.conflicting} decode but the sink holds another record at their coordinates: kept")
        if self.applied:
            recorded = f"recorded as run {self.history_run_seq}" if self.history_run_seq else "nothing recorded"
            lines.append(f"  {recorded} (by {self.requested_by})")
        else:
            lines.append("  nothing changed; run again with --yes to replay.")
        return "\n".join(lines)


def replay_dead_letters(context: PipelineContext, *, run_seq: int | None, yes: bool) -> ReplayReport:
    """Replays the pipeline's dead letters (of run ``run_seq``, or all); with ``yes`` False, only counts what a
    replay would do (it reads the tables and decodes, and writes nothing).

    Raises:
        RunInProgressError: a run or backfill of the pipeline holds the run lock, is planned with a fresh lease, or
            holds the backfill lease; nothing was written.
        StateError: a crashed run is planned (run the pipeline or abandon the run first).
        LeaseLostError: the replay lost its lease before a write (retriable); replaying again finishes its work.
        SchemaIncompatibleError: a decoded column gives a sink column another type; nothing was written.
        SparkJobError: a Spark or Delta operation failed (retriable; replaying again is harmless).
    """
    # Counting only writes nothing: it is bounded by the deadline but takes neither the run lock nor the lease.
    guard = WriterGuard(context.store, context.pipeline, "replay", owner=RunOwner.current("replay"))
    with guard.entered(lock=yes):
        return _replay(context, run_seq, guard=guard if yes else None, deadline=guard.deadline)


def _replay(
    context: PipelineContext, run_seq: int | None, *, guard: WriterGuard | None, deadline: RunDeadline
) -> ReplayReport:
    pipeline, store = context.pipeline, context.store
    state = store.load()
    if state.last_run is not None and state.last_run.status == "planned":
        raise store.planned_error(state.last_run)
    tables = known_tables(pipeline, state)
    app_id = replay_app_id(pipeline.id)
    found = [committed_txn_versions(ref, [app_id])[app_id] for t in tables for ref in (t.sink, t.dead_letters)]
    # One number for the whole replay, above every table's: each table's writes are new transactions there.
    replay_seq = max((v for v in found if v is not None), default=0) + 1
    who = requester(guard.owner if guard is not None else RunOwner.current())
    lettered = [t.pipeline for t in tables if table_exists(t.dead_letters)]
    if not lettered:
        return _report(context, ReplayCounts(), run_seq, replay_seq, who)
    spark = context.spark()
    deadline.attach(spark)
    clusters = _clusters(context)
    if guard is None:
        counts = _summed(
            replay(spark, v, clusters, run_seq=run_seq, replay_seq=replay_seq, write=False) for v in lettered
        )
        return _report(context, counts, run_seq, replay_seq, who)
    guard.take_lease()
    counts = _summed(
        replay(
            spark,
            view,
            clusters,
            run_seq=run_seq,
            replay_seq=replay_seq,
            write=True,
            before_write=guard.before_write,
        )
        for view in lettered
    )
    version = guard.stop_lease()
    report = _report(context, counts, run_seq, replay_seq, who, applied=True)
    if counts.dead_letters:
        history = store.load().next_run_seq
        summary = RunSummary(
            pipeline_id=pipeline.id,
            run_seq=history,
            status="replayed",
            requested_by=who,
            # No new dead letters: what stays is counted in `replay` (a dead-letter check must not re-warn).
            records=counts.replayed,
            sink_version=counts.sink_version,
            replay=report.replay,
        )
        version = store.record_operation(summary, expected_version=version, owner=guard.owner.text())
        report = report.recorded(history, version)
    logger.warning(
        "pipeline %s: dead-letter replay %d by %s: %d replayed into the sink, %d found landed already, %d still "
        "undecodable, %d conflicting",
        pipeline.id,
        replay_seq,
        who,
        counts.replayed,
        counts.already_landed,
        counts.still_undecodable,
        counts.conflicting,
    )
    return report


def _summed(parts: Iterable[ReplayCounts]) -> ReplayCounts:
    """One replay's counts from its tables' (each stream's, in order; one part for a pipeline's one sink): counts
    summed, the versions the last written table's.
    """
    total = ReplayCounts()
    for part in parts:
        total = ReplayCounts(
            dead_letters=total.dead_letters + part.dead_letters,
            replayed=total.replayed + part.replayed,
            already_landed=total.already_landed + part.already_landed,
            still_undecodable=total.still_undecodable + part.still_undecodable,
            conflicting=total.conflicting + part.conflicting,
            sink_version=part.sink_version if part.sink_version is not None else total.sink_version,
            dead_letter_version=part.dead_letter_version
            if part.dead_letter_version is not None
            else total.dead_letter_version,
        )
    return total


def _report(
    context: PipelineContext,
    counts: ReplayCounts,
    run_seq: int | None,
    replay_seq: int,
    who: str,
    *,
    applied: bool = False,
) -> ReplayReport:
    done = DeadLetterReplay(
        replay_seq=replay_seq,
        run_seq=run_seq,
        replayed=counts.replayed,
        already_landed=counts.already_landed,
        still_undecodable=counts.still_undecodable,
        conflicting=counts.conflicting,
        sink_version=counts.sink_version,
        dead_letter_version=counts.dead_letter_version,
    )
    return ReplayReport(
        pipeline_id=context.pipeline.id,
        dead_letters=counts.dead_letters,
        replay=done,
        applied=applied,
        requested_by=who,
    )


def _clusters(context: PipelineContext) -> dict[str, ClusterMetadata]:
    """The clusters the metadata service knows now (for the registry of registry-format streams)."""
    try:
        return {c.cluster_id: c for c in context.resolve().clusters().values()}
    except MetadataServiceError as e:
        logger.info("pipeline %s: metadata not resolved for the replay (%s)", context.pipeline.id, e)
        return {}
