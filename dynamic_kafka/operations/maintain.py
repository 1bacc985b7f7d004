"""Sink maintenance: compact the small files each run leaves, vacuum, and clear what killed writes left, in the
sink and the dead-letter table (:mod:`~dynamic_kafka.sink.compaction`), never beside a write of the pipeline.

Guarded like a backfill, because ``OPTIMIZE`` and ``VACUUM`` are writers of the same tables:

- it holds the pipeline's run lock for its whole duration (no run or backfill of the pipeline on this machine);
- it takes the state's writer lease (the backfill lease row; ``StateStore.take_writer_lease``), so
  no run is planned or taken over, on any host, while it works; a planned run (in flight, or crashed: the next run
  recovers it) refuses it, and so does a backfill holding the lease;
- it renews the lease while it works and checks it before each step, and releases it at the end.

The state's offsets, runs and frontier are untouched, and so are the tables' rows: OPTIMIZE rewrites files without
changing a row, VACUUM deletes only files no version within the retention period references. No Spark is
started: both steps are delta-rs's (docs/decisions/0055-sink-maintenance.md).

Example:
    >>> from dynamic_kafka.config.loader import load_project_config
    >>> context = PipelineContext(load_project_config("dynamic_kafka.yaml"), "orders")  # doctest: +SKIP
    >>> maintain_pipeline(context, retention_hours=24).tables[0].after.current.files  # doctest: +SKIP
    1
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from pydantic import Field

from dynamic_kafka.errors import ConfigError, StateError
from dynamic_kafka.faults import CrashPoint, crash_point
from dynamic_kafka.frozen import FrozenModel
from dynamic_kafka.protocol.guard import WriterGuard
from dynamic_kafka.sink.compaction import TableMaintenance, maintain_table, table_files
from dynamic_kafka.sink.per_stream import known_tables
from dynamic_kafka.state.owner import RunOwner

if TYPE_CHECKING:
    from collections.abc import Callable

    from dynamic_kafka.config.models import PipelineConfig
    from dynamic_kafka.protocol.context import PipelineContext
    from dynamic_kafka.storage import TableRef

logger = logging.getLogger(__name__)


class MaintenanceSummary(FrozenModel):
    """What one maintenance of a pipeline's tables did."""

    pipeline_id: str
    retention_hours: int | None = Field(description="VACUUM's retention; None: each table's own (7 days default).")
    tables: tuple[TableMaintenance, ...] = Field(
        description="The sink, then the dead-letter table; with a table per stream, both for each stream the state "
        "knows, in stream order."
    )
    seconds: float = 0.0


def maintain_pipeline(
    context: PipelineContext, *, retention_hours: int | None = None, unsafe_vacuum_retention: bool = False
) -> MaintenanceSummary:
    """Compacts and vacuums the pipeline's sink and dead-letter table, under its run lock and writer lease.

    Args:
        context: the pipeline.
        retention_hours: how long files replaced or left by earlier versions are kept for readers of older
            versions (and writers that may still commit them); None keeps each table's own retention. At least
            the pipeline's ``vacuum_retention_floor_hours`` (``max_run_seconds`` rounded up to hours, plus one).
        unsafe_vacuum_retention: take a retention below the floor (logged as a warning): only when no writer of
            the tables runs anywhere, since VACUUM then deletes the files of writes that have not committed yet.

    Raises:
        ConfigError: ``retention_hours`` is below the floor and ``unsafe_vacuum_retention`` is not set; nothing
            was done.
        RunInProgressError: a run or backfill of the pipeline holds the run lock on this machine, a run is planned
            (in flight, or crashed: the next run recovers it), or a backfill holds the lease; nothing was done.
        LeaseLostError: the lease was lost between two steps (retriable); the steps done stand, the rest was not
            done.
        RunTimeoutError: ``max_run_seconds`` passed (checked before each step, since a delta-rs step cannot be
            interrupted; retriable); the steps done stand, the rest was not done.
        StateError: the sink exists but its pipeline has no state table (a restored or moved sink).
        SparkJobError: the compaction or the vacuum failed (retriable); the steps before it stand.
        ObjectStoreError: a table's object store cannot be used.
    """
    if retention_hours is not None and retention_hours < 0:
        raise ValueError(f"a retention of {retention_hours} hours is negative: give 0 or more hours")
    pipeline = context.pipeline
    _check_floor(pipeline, retention_hours, unsafe=unsafe_vacuum_retention)
    started = time.monotonic()
    guard = WriterGuard(context.store, pipeline, "maintenance", owner=RunOwner.current("maintenance"))
    with guard.entered():
        tables = _tables(context)
        if all(table_files(table) is None for _, table in tables):
            done = tuple(TableMaintenance(role=role, table=str(table), before=None) for role, table in tables)
            return MaintenanceSummary(pipeline_id=pipeline.id, retention_hours=retention_hours, tables=done)
        if context.store.load().table_version is None:
            raise StateError(
                f"pipeline {pipeline.id!r} has a sink but no state table at {context.store.path}: maintenance "
                "cannot take the pipeline's writer lease, so it would not be kept apart from runs on other hosts.",
                hint="Point state_path at the pipeline's state, or run the pipeline once (`dynamic-kafka realign` "
                "first when the state was restored or moved).",
            )
        guard.take_lease()
        finished = _finished_run_seq(context)
        done = tuple(
            maintain_table(
                table,
                role,
                retention_hours=retention_hours,
                before_write=_before_step(guard),
                finished_run=(pipeline.id, finished),
            )
            for role, table in tables
        )
    return MaintenanceSummary(
        pipeline_id=pipeline.id, retention_hours=retention_hours, tables=done, seconds=time.monotonic() - started
    )


def _check_floor(pipeline: PipelineConfig, retention_hours: int | None, *, unsafe: bool) -> None:
    """Refuses a retention below the pipeline's floor unless the caller said it is unsafe on purpose."""
    problem = pipeline.vacuum_retention_problem(retention_hours)
    if problem is None:
        return
    if unsafe:
        logger.warning("pipeline %s: UNSAFE vacuum retention taken on purpose: %s", pipeline.id, problem)
        return
    floor = pipeline.vacuum_retention_floor_hours
    raise ConfigError(
        f"{problem}. Given as --vacuum-retention, maintenance.vacuum_retention_hours or the maintenance job's "
        "vacuum_retention_hours.",
        hint=f"Give {floor} hours or more. To vacuum below the floor anyway, when no writer of these tables runs "
        "anywhere, pass --unsafe-vacuum-retention (unsafe_vacuum_retention=True in Python and in the maintenance "
        "job's run config); docs/maintenance.md.",
    )


def _before_step(guard: WriterGuard) -> Callable[[], None]:
    """What runs before each step: the guard's check (delta-rs steps cannot be interrupted, so the deadline is
    checked between them, with the lease).
    """

    def check() -> None:
        crash_point(CrashPoint.BEFORE_MAINTENANCE_STEP)
        guard.before_write()

    return check


def _finished_run_seq(context: PipelineContext) -> int:
    """The last run_seq of the pipeline that is finished (committed or abandoned); a planned run is not."""
    last = context.store.load().last_run
    if last is None:
        return 0
    return last.run_seq if last.status != "planned" else last.run_seq - 1


def _tables(context: PipelineContext) -> list[tuple[str, TableRef]]:
    """The tables to maintain by role: the sink and the dead-letter table of every table the state knows (a
    stream's tables appear with the run that first lands it).
    """
    return [
        (role, ref)
        for table in known_tables(context.pipeline, context.store.load())
        for role, ref in (("sink", table.sink), ("dead_letter", table.dead_letters))
    ]
