"""Giving up a planned run: ``dynamic-kafka abandon`` (:func:`abandon_run`), and a run or recovery giving up its
own run by policy (:func:`give_up`).

The run is fenced first (:mod:`dynamic_kafka.sink.fence`): no late writer of it lands anything afterwards, and dead
letters it already landed are not landed again. What a planned head is in the sink and the state (its owner alive
or not, each table's transaction, its fence) is read here too: the recovery reads it the same way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dynamic_kafka.errors import RunInProgressError, StateError
from dynamic_kafka.faults import CrashPoint, crash_point
from dynamic_kafka.plan.planner import config_pins
from dynamic_kafka.protocol.realign import run_frontier
from dynamic_kafka.sink import committed_txn_version
from dynamic_kafka.sink.fence import fence_run, is_fence
from dynamic_kafka.sink.per_stream import run_tables
from dynamic_kafka.sink.staged_append import remove_run_folder
from dynamic_kafka.sink.tables import table_exists
from dynamic_kafka.state.owner import RunOwner

if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import datetime

    from dynamic_kafka.config.models import PipelineConfig
    from dynamic_kafka.model.plan import Plan, TopicPartition
    from dynamic_kafka.model.snapshots import RunRecord
    from dynamic_kafka.protocol.guard import WriterGuard
    from dynamic_kafka.sink.per_stream import SinkTable
    from dynamic_kafka.state.store import StateStore

__all__ = ["abandon_run", "give_up"]


def abandon_run(guard: WriterGuard, run_seq: int, reason: str) -> int:
    """Give up the planned (crashed) run ``run_seq``: its offsets are not committed, the history records why.

    For a run no policy settles (its cluster is gone for good, its config was changed on purpose). The next run
    plans those offsets afresh under the current config. The run is fenced first (see :func:`give_up`): no late
    writer of it lands anything afterwards, and dead letters it already landed are not landed again.

    Args:
        guard: the pipeline's writer guard: its store and pipeline, this process as the lease's owner, its clock.
        run_seq: the planned head run to abandon.
        reason: why; recorded in the run history for whoever looks next.

    Returns:
        The new state table version.

    Raises:
        StateError: no reason, the sink already holds the run (it is complete: a run commits it), or the run
            is not the planned head.
        RunInProgressError: the run's owner is alive (its lease is fresh), or another process took the run
            over meanwhile.
    """
    pipeline, store = guard.pipeline, guard.store
    reason = reason.strip()
    if not reason:
        raise StateError("abandon needs a --reason: it is recorded in the run history for whoever looks next.")
    state = store.load()
    head = state.last_run
    if head is None or head.status != "planned" or head.run_seq != run_seq:
        # Not the planned head: the store refuses it, naming what the state holds.
        return store.abandon_run(run_seq, reason=reason, expected_version=state.table_version)
    # A fence of this run there is an abandon that was interrupted: it may be finished. The run is complete once
    # every table holds it; a part of it landed (a stream's table) is kept by the abandon (give_up).
    txns = run_txns(pipeline, head.plan)
    fenced = holds_fence(pipeline, head.plan, [table for table, txn in txns if txn == run_seq])
    if txns and all(txn is not None and txn >= run_seq for _, txn in txns) and not fenced:
        raise complete_error(pipeline.id, run_seq)
    refuse_live_owner(pipeline.id, head, guard.now())
    assert state.table_version is not None  # a state with a planned head has a table
    # Taking the run over moves the state's version: an owner whose lease expired can no longer commit it.
    version = store.lease(
        head.plan,
        owner=guard.owner.text(),
        lease_expires_at=guard.lease_end(),
        expected_version=state.table_version,
    )
    return give_up(pipeline, store, head.plan, reason, version)


def give_up(pipeline: PipelineConfig, store: StateStore, plan: Plan, reason: str, version: int) -> int:
    """Abandons the planned run ``plan``, which this process holds (state ``version``), and returns the new
    state version.

    First its transaction is fenced (:mod:`dynamic_kafka.sink.fence`): in the sink, then in the dead-letter
    table, so no late writer of the run lands anything once the abandon is recorded. The sink goes first: a
    crash between the two leaves a fenced sink, which the next recovery reads as this abandon and finishes,
    never a fenced dead-letter table under a sink a recovery would still write. Then the dead letters the run
    landed before it crashed (its dead-letter transaction, final behind the fence) raise the backfill frontier
    in the abandon's own commit, so the next run, re-reading those offsets, does not land them again.

    Raises:
        StateError: the sink holds the run's data (a late writer of it landed first): the run is complete.
    """
    from dynamic_kafka.decoding.formats import can_fail

    tables = run_tables(pipeline, plan.read_splits)
    # A dead-letter table that is not there yet is created by its fence only if the run could have written
    # one: under the config's settings, or under the other settings it was planned with.
    may_have = (pipeline.on_decode_error == "dead_letter" and can_fail(pipeline)) or (
        bool(plan.config_pins) and plan.config_pins != config_pins(pipeline)
    )
    landed: dict[TopicPartition, int] = {}
    complete = 0
    for table in tables:
        sink, dead_letters = table.sink, table.dead_letters
        if fence_run(sink, "sink", pipeline.id, plan.run_seq, reason) == "landed":
            # A stream's table holding the run (a table per stream): its part stays, and its rows and dead
            # letters raise the frontier like a backfill's, so the next run re-reading them lands none again.
            complete += 1
            _raise_to(landed, run_frontier(sink, plan.run_seq))
            if table_exists(dead_letters):
                _raise_to(landed, run_frontier(dead_letters, plan.run_seq))
            continue
        remove_run_folder(sink, pipeline.id, plan.run_seq)  # a killed staged write's files
        crash_point(CrashPoint.AFTER_FENCE)
        if may_have or table_exists(dead_letters):
            if fence_run(dead_letters, "dead_letter", pipeline.id, plan.run_seq, reason) == "landed":
                _raise_to(landed, run_frontier(dead_letters, plan.run_seq))
            else:
                remove_run_folder(dead_letters, pipeline.id, plan.run_seq)
    if tables and complete == len(tables):
        raise complete_error(pipeline.id, plan.run_seq)
    return store.abandon_run(plan.run_seq, reason=reason, expected_version=version, landed=landed)


def complete_error(pipeline_id: str, run_seq: int) -> StateError:
    """What refusing to abandon a run every table holds says."""
    return StateError(
        f"run {run_seq} of pipeline {pipeline_id!r} is complete in the sink (it holds its "
        "transaction); abandoning it would leave its records landed without their offsets.",
        hint="Run the pipeline: the recovery commits the run's offsets.",
    )


def run_txns(pipeline: PipelineConfig, plan: Plan) -> list[tuple[SinkTable, int | None]]:
    """Per table of ``plan``'s run, the pipeline's last transaction there.

    The sink's own txn, not the dead-letter table's: the dead letters are written first, so only the sink
    holding the run means the whole run (its part of the run: a stream's table) is in.
    """
    return [(table, committed_txn_version(table.sink, pipeline.id)) for table in run_tables(pipeline, plan.read_splits)]


def holds_fence(pipeline: PipelineConfig, plan: Plan, holding: Sequence[SinkTable]) -> bool:
    """Whether a table of the run holds its fence (an abandon of it was interrupted after fencing), looking only
    at the tables ``holding`` its transaction: a fence is one.
    """
    return any(is_fence(table.sink, pipeline.id, plan.run_seq) for table in holding)


def refuse_live_owner(pipeline_id: str, head: RunRecord, now: datetime) -> RunOwner | None:
    """Raise when the planned ``head``'s owner is alive at ``now``; else return its owner (None when it names
    none).

    A fresh lease means alive (on another host, or in a process using another lock folder), unless the owner is
    provably gone from this host; an expired lease means a crash.

    Raises:
        RunInProgressError: the owner holds a fresh lease.
    """
    owner = RunOwner.parse(head.owner)
    if head.lease_is_fresh(now) and not (owner is not None and owner.is_gone()):
        raise RunInProgressError(
            pipeline_id,
            head.run_seq,
            owner=owner.describe() if owner is not None else head.owner,
            until=head.lease_expires_at.isoformat() if head.lease_expires_at else None,
        )
    return owner


def _raise_to(frontier: dict[TopicPartition, int], more: dict[TopicPartition, int]) -> None:
    """Raises ``frontier`` to ``more`` where ``more`` is higher (a partition's sink rows and dead letters)."""
    for key, offset in more.items():
        frontier[key] = max(frontier.get(key, 0), offset)
