"""Step 1 of every run: finishing the run a crash left planned, with exactly its plan (:func:`recover`).

A planned run whose owner still holds a fresh lease is refused, not recovered; a run every table holds has only
its offsets committed; a fence of it is an interrupted abandon, which is finished; otherwise the plan is checked
(the settings it was planned with, its ranges still on the brokers) and executed again by the run protocol
(:mod:`dynamic_kafka.protocol.run`), or given up by policy (:mod:`dynamic_kafka.protocol.abandon`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from dynamic_kafka.config.moved_keys import MOVED
from dynamic_kafka.errors import (
    ClusterUnreachableError,
    ConfigError,
    DataLossError,
    KafkaClientError,
    TopicRecreatedError,
)
from dynamic_kafka.faults import CrashPoint, crash_point
from dynamic_kafka.kafka.group_commit import commit_consumer_group
from dynamic_kafka.model.plan import LostRange
from dynamic_kafka.model.summary import RunSummary
from dynamic_kafka.plan.planner import FORMAT_PIN_PREFIX, config_pins
from dynamic_kafka.protocol.abandon import give_up, holds_fence, refuse_live_owner, run_txns
from dynamic_kafka.protocol.prepare import PreparedWrite, prepare_write
from dynamic_kafka.sink.per_stream import landed

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from dynamic_kafka.config.models import PipelineConfig
    from dynamic_kafka.model.plan import Plan, Split
    from dynamic_kafka.model.snapshots import StateSnapshot
    from dynamic_kafka.progress import Tracker
    from dynamic_kafka.protocol.context import PipelineContext
    from dynamic_kafka.protocol.guard import WriterGuard
    from dynamic_kafka.sink.per_stream import SinkTable
    from dynamic_kafka.state.owner import RunOwner

logger = logging.getLogger(__name__)

__all__ = ["check_config", "recover"]

_INTERRUPTED_ABANDON = (
    "abandoned: its transaction is fenced in the sink by an abandon that stopped before recording it (the sink's "
    "history has the reason, commitInfo.dynamicKafkaFence)"
)


def recover(
    context: PipelineContext,
    guard: WriterGuard,
    state: StateSnapshot,
    *,
    owner: RunOwner,
    progress: Tracker,
    execute: Callable[[PreparedWrite, Sequence[Split]], object],
) -> int | None:
    """Finishes the run a crash left planned, with exactly its plan.

    A planned run whose owner still holds a fresh lease is alive (on another host, or in a process using
    another lock folder) and is refused; an expired lease, or an owner provably gone from this host, means a
    crash. The recovering run first takes the lease over (one commit at the exact version read: of two
    recovering processes one wins).

    Before executing the plan again it is checked: the config must be the one it was planned with (checked
    before the lease is taken over, so a refusal writes nothing), and a fresh snapshot of its clusters must
    still hold its ranges under the same topic ids. A range deleted by retention or truncated is decided by
    ``on_data_loss`` and a recreated topic by ``on_topic_recreated``: ``fail`` raises, ``skip`` / ``reset``
    abandons the run (fenced first, see :func:`~dynamic_kafka.protocol.abandon.give_up`; its offsets are not
    committed, the history says why) so the next plan applies the policy to the committed offsets.

    Args:
        context: the pipeline's collaborators.
        guard: the run's writer guard (entered): its deadline, its lease's end and renewal, its clock.
        state: the state read, whose head is the planned run.
        owner: this process, as the lease taken over names it.
        progress: the run's progress.
        execute: the run protocol's read, write and commit of the prepared plan, reading only the ranges given
            (those of the tables lacking the run).

    Returns:
        The recovered run's run_seq, or None when its plan could no longer be executed and was abandoned by
        policy (the caller then plans afresh).

    Raises:
        RunInProgressError: the planned run's owner holds a fresh lease, or another process took it over first.
        ConfigError: the config's semantic settings differ from those the run was planned with.
        DataLossError: part of a range is gone and ``on_data_loss: fail``.
        TopicRecreatedError: a topic of the plan was recreated and ``on_topic_recreated: fail``.
        ClusterUnreachableError: a cluster of the plan cannot be queried.
    """
    pipeline, store = context.pipeline, context.store
    head = state.last_run
    assert head is not None
    assert state.table_version is not None
    plan = head.plan
    crashed = refuse_live_owner(pipeline.id, head, guard.now())
    # The sink's own txn, not the dead-letter table's: the dead letters are written first, so only the sink
    # holding the run means the whole run is in. A fence there means an abandon was interrupted after it.
    # Each table of the run: the run is in once every table holds it, and a fence in any of them is an
    # interrupted abandon.
    txns = run_txns(pipeline, plan)
    lacking = [table for table, txn in txns if txn != plan.run_seq]
    in_sink = not lacking
    fenced = holds_fence(pipeline, plan, [table for table, txn in txns if txn == plan.run_seq])
    logger.warning(
        "pipeline %s: run %d was planned but not committed (owner %s); %s",
        pipeline.id,
        plan.run_seq,
        crashed.describe() if crashed is not None else "unknown",
        "it is fenced, finishing its abandon"
        if fenced
        else "its data is in the sink, committing its offsets"
        if in_sink
        else "executing it again" + _for_streams(lacking),
    )
    if not in_sink and not fenced:
        check_config(context, plan)
    version = store.lease(
        plan,
        owner=owner.text(),
        lease_expires_at=guard.lease_end(),
        expected_version=state.table_version,
    )
    crash_point(CrashPoint.RECOVERING)
    if fenced:
        give_up(pipeline, store, plan, _INTERRUPTED_ABANDON, version)
        return None
    if in_sink:
        found, stream_tables = landed(pipeline, plan.read_splits, plan.run_seq)
        summary = RunSummary.found_landed(plan, found, stream_tables)
        store.commit_run(plan, summary=summary, expected_version=version)
        commit_consumer_group(pipeline.consumer_group, plan, context.connections(plan))
        return plan.run_seq
    # Only the ranges still to be written must be on the brokers: a landed table's ranges may be gone by now.
    pending = [s for table in lacking for s in table.own(plan.read_splits)]
    void = _stale_plan_reason(context, plan, pending)
    if void is not None:
        give_up(pipeline, store, plan, void, version)
        return None
    prepared = prepare_write(context, plan, guard.deadline, written=True)
    guard.keep_lease(version, plan)
    progress.stage(f"recovering run {plan.run_seq}", planned_offsets=plan.planned_records)
    execute(prepared, pending)
    return plan.run_seq


def check_config(context: PipelineContext, plan: Plan) -> None:
    """Refuses to execute a planned run again under other semantic settings than it was planned with: a
    setting pinned in the plan whose value now hashes differently, or a pinned Avro ``schema_file`` whose
    contents changed. Settings a plan did not pin (written by an older version) are not checked.
    """
    pipeline = context.pipeline
    now = config_pins(pipeline, _decided_streams(plan))
    changed = [_pin_label(k) for k in sorted(plan.config_pins) if plan.config_pins[k] != now.get(k)]
    changed += _edited_schema_files(pipeline, plan)
    if changed:
        raise ConfigError(
            f"pipeline {pipeline.id!r}: run {plan.run_seq} was planned (and crashed) with other settings "
            f"than the config has now: {', '.join(changed)} changed. Executing it again would write its records "
            "differently from what it planned; nothing was written.",
            hint="Restore the settings until the run has finished, or give the run up with "
            f"`{_abandon_command(context, plan)}` (its offsets are not committed; the next run plans them again "
            "under the new settings).",
        )


def _stale_plan_reason(context: PipelineContext, plan: Plan, splits: Sequence[Split] | None = None) -> str | None:
    """Why ``plan`` can no longer be executed as planned, when its policy says to abandon it; None when it can.
    ``splits``: the ranges still to be read (default: all of the plan's).

    Raises:
        DataLossError: part of a range was deleted or truncated and ``on_data_loss: fail``.
        TopicRecreatedError: a topic was deleted or recreated and ``on_topic_recreated: fail``.
        ClusterUnreachableError: a cluster of the plan cannot be reached.
    """
    pipeline = context.pipeline
    if plan.is_empty:
        return None
    try:
        brokers = context.plan_snapshot(plan)
    except KafkaClientError as e:
        raise ClusterUnreachableError(
            f"run {plan.run_seq} of pipeline {pipeline.id!r} was planned (and crashed) reading this cluster, "
            f"which cannot be queried now ({e}); the run cannot be finished and nothing was written.",
            cluster_id=e.cluster_id,
            hint="Restore access to the cluster (or its entry in the metadata service), or give the run up "
            f"with `{_abandon_command(context, plan)}`.",
        ) from e
    losses: list[LostRange] = []
    truncated: list[LostRange] = []
    for s in plan.read_splits if splits is None else splits:
        topic = brokers.clusters[s.cluster_id].topics.get(s.topic)
        offsets = topic.partitions.get(s.partition) if topic is not None and topic.exists else None
        if topic is None or offsets is None or (s.topic_id and topic.topic_id and s.topic_id != topic.topic_id):
            why = (
                f"topic {s.topic!r} on cluster {s.cluster_id!r} was deleted or recreated since run "
                f"{plan.run_seq} was planned"
            )
            if pipeline.on_topic_recreated == "fail":
                raise TopicRecreatedError(s.cluster_id, s.topic, why)
            return why
        if s.start_offset < offsets.earliest:
            losses.append(LostRange(**s.key.model_dump(), from_offset=s.start_offset, to_offset=offsets.earliest))
        elif s.stop_offset > offsets.latest:
            truncated.append(LostRange(**s.key.model_dump(), from_offset=offsets.latest, to_offset=s.stop_offset))
    if not (losses or truncated):
        return None
    if pipeline.on_data_loss == "fail":
        raise DataLossError(losses, truncated=truncated)
    return "part of its ranges is gone from the brokers: " + "; ".join(
        [str(lost) for lost in losses]
        + [f"{t.cluster_id}/{t.topic}[{t.partition}] truncated to {t.from_offset}" for t in truncated]
    )


def _for_streams(tables: Sequence[SinkTable]) -> str:
    """`` for the tables of streams a, b`` naming stream tables, else nothing (the one sink)."""
    streams = [table.stream for table in tables if table.stream is not None]
    return f" for the tables of streams {', '.join(streams)}" if streams else ""


def _decided_streams(plan: Plan) -> set[str]:
    """The streams whose formats decide what ``plan`` writes: its ranges' and its archive's."""
    streams = {s.stream_id for s in plan.read_splits}
    return streams if plan.bootstrap is None else {*streams, plan.bootstrap.stream}


def _pin_label(key: str) -> str:
    """How a config pin is named to the user: the setting's key, or a stream's resolved value format. Pins keep
    the flat names the settings had when plans first pinned them (config_pins): a moved one is named where it
    is written now.
    """
    if key.startswith(FORMAT_PIN_PREFIX):
        return f"the value format of stream {key.removeprefix(FORMAT_PIN_PREFIX)!r}"
    if key in MOVED:
        section, name = MOVED[key]
        return f"{section}.{name}"
    return key


def _edited_schema_files(pipeline: PipelineConfig, plan: Plan) -> list[str]:
    """The pinned ``schema_file`` contents that differ now (or cannot be read), named by stream and path."""
    from dynamic_kafka.decoding.registry_formats import schema_digest

    edited: list[str] = []
    files = {(p.stream_id, p.schema_file_sha256) for p in plan.decoding if p.schema_file_sha256 is not None}
    for stream_id, pinned in sorted(files):
        path = pipeline.value_format_of(stream_id).schema_file
        if path is None:
            continue  # no file now: the stream's format pin names that change
        try:
            digest = schema_digest(path.read_text(encoding="utf-8"))
        except OSError as e:
            edited.append(f"schema_file {str(path)!r} of stream {stream_id!r} (unreadable: {e.strerror})")
            continue
        if digest != pinned:
            edited.append(f"the contents of schema_file {str(path)!r} of stream {stream_id!r}")
    return edited


def _abandon_command(context: PipelineContext, plan: Plan) -> str:
    config = str(context.project.source) if context.project.source else "dynamic_kafka.yaml"
    return (
        f"dynamic-kafka abandon --config {config} --pipeline {context.pipeline.id} --run-seq {plan.run_seq} "
        "--reason '...'"
    )
