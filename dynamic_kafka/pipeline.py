"""The one entry object: :class:`Pipeline`, one pipeline of a project and every operation on it.

The command line and the Dagster layer both go through it, so a program that uses the library does what they do,
with the same guards. Each method is a thin call of the module that implements the operation (the run protocol's
:class:`~dynamic_kafka.protocol.run.PipelineRunner`, the abandon, the backfill, the status, realign); their docstrings
hold the protocol.

Example:
    >>> from dynamic_kafka import Pipeline
    >>> orders = Pipeline.from_config("dynamic_kafka.yaml", "orders")  # doctest: +SKIP
    >>> orders.plan().planned_records  # doctest: +SKIP
    1200
    >>> orders.run().status  # doctest: +SKIP
    'committed'
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from dynamic_kafka.config.loader import load_project_config
from dynamic_kafka.kafka.statistics import collecting
from dynamic_kafka.protocol.abandon import abandon_run
from dynamic_kafka.protocol.context import PipelineContext
from dynamic_kafka.protocol.realign import Realignment, realign
from dynamic_kafka.protocol.run import PipelineRunner
from dynamic_kafka.sink.per_stream import one_sink
from dynamic_kafka.sink.tables import TableInfo, table_info

# The other operations' modules are imported by their methods: a process that runs (the CLI's `run`, a Dagster run)
# does not load the code (and the libraries) of backfills, replays, maintenance, status, health or resets.
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from datetime import datetime
    from pathlib import Path

    from pyspark.sql import SparkSession

    from dynamic_kafka.config.models import PipelineConfig, ProjectConfig
    from dynamic_kafka.metadata.service import KafkaMetadataService
    from dynamic_kafka.metadata.snapshot import MetadataSnapshot
    from dynamic_kafka.metadata.watch import WatchCursor, WatchResult
    from dynamic_kafka.model.plan import Plan
    from dynamic_kafka.model.summary import RunSummary
    from dynamic_kafka.operations.health import HealthReport
    from dynamic_kafka.operations.maintain import MaintenanceSummary
    from dynamic_kafka.operations.monitoring import Operation, Sample
    from dynamic_kafka.operations.offsets_reset import OffsetReset
    from dynamic_kafka.operations.replay import ReplayReport
    from dynamic_kafka.operations.status import PipelineStatus

logger = logging.getLogger(__name__)

__all__ = ["Pipeline"]


class Pipeline:
    """One pipeline of a project config. Cheap to build: nothing is contacted until a method is called, and one
    object shares its metadata service and Spark session between calls (several backfill windows, a run then its
    status).

    Args:
        project: the project config, loaded (:func:`~dynamic_kafka.config.loader.load_project_config`).
        pipeline_id: which pipeline of the project.
        metadata_service: a service to use instead of the one the config names (programs and tests).
        spark: returns the Spark session; called only when something has to be read. By default the session the
            project's ``spark`` section describes, started on first use.
        hard_deadline: end the process (exit code 124) when a run past ``max_run_seconds`` does not stop within a
            minute of its Spark job's cancellation. For a process that does one run (the CLI), not for a server.

    Attributes:
        context: the collaborators every operation shares (metadata service, state store, Spark session factory).

    Raises:
        ConfigError: the project has no pipeline ``pipeline_id``.
    """

    def __init__(
        self,
        project: ProjectConfig,
        pipeline_id: str,
        *,
        metadata_service: KafkaMetadataService | None = None,
        spark: Callable[[], SparkSession] | None = None,
        hard_deadline: bool = False,
    ) -> None:
        self.context = PipelineContext(project, pipeline_id, metadata_service=metadata_service, spark=spark)
        self._runner = PipelineRunner(self.context, hard_deadline=hard_deadline)

    @classmethod
    def from_config(cls, path: str | Path, pipeline_id: str, *, hard_deadline: bool = False) -> Pipeline:
        """The pipeline ``pipeline_id`` of the project config file at ``path`` (read and validated now).

        Raises:
            ConfigError: the file is missing or invalid, or has no such pipeline.
        """
        return cls(load_project_config(path), pipeline_id, hard_deadline=hard_deadline)

    @property
    def id(self) -> str:
        """The pipeline's id."""
        return self.config.id

    @property
    def config(self) -> PipelineConfig:
        """The pipeline's config."""
        return self.context.pipeline

    @property
    def project(self) -> ProjectConfig:
        """The project config the pipeline belongs to."""
        return self.context.project

    def plan(self) -> Plan:
        """The splits the next run would read. Reads the metadata, the state and the brokers' offsets; writes
        nothing. See :meth:`dynamic_kafka.protocol.run.PipelineRunner.plan`.
        """
        plan, _, _ = self._runner.plan()
        return plan

    def run(self) -> RunSummary:
        """One incremental run: finish a crashed run first, then plan, read, write and commit. See
        :meth:`dynamic_kafka.protocol.run.PipelineRunner.run` for the protocol and the errors.
        """
        with collecting() as statistics:
            summary = self._runner.run()
        summary = summary.with_client_statistics(statistics.result())
        self._push_run(summary)
        return summary

    def _push_run(self, summary: RunSummary) -> None:
        """The run's metrics to the project's metrics receivers, when any is configured (never raises)."""
        if self.project.metrics is None:
            return
        from datetime import UTC, datetime

        from dynamic_kafka.errors import DynamicKafkaError
        from dynamic_kafka.operations.monitoring import run_samples

        finished_at = datetime.now(UTC)
        try:
            state = self.context.store.load()
        except DynamicKafkaError as e:
            logger.warning("metrics of run %d show no offsets: the state was not read (%s)", summary.run_seq, e)
            state = None
        self._send_metrics("run", run_samples(summary, state, finished_at=finished_at))

    def _send_metrics(self, operation: Operation, samples: Sequence[Sample]) -> None:
        """``samples`` to the Pushgateway and the OTLP receiver of the project's ``metrics``, each that is set."""
        metrics = self.project.metrics
        if metrics is None:
            return
        from dynamic_kafka.operations.monitoring import push_metrics
        from dynamic_kafka.operations.otlp import export_otlp

        push_metrics(metrics, self.id, operation, samples)
        export_otlp(metrics, self.id, operation, samples)

    def backfill(self, start: datetime, end: datetime) -> RunSummary:
        """Merge the records whose timestamps fall in ``[start, end)`` into the sink, without duplicates and
        without moving the incremental offsets. See :func:`dynamic_kafka.operations.backfill.run_backfill`.
        """
        from dynamic_kafka.operations.backfill import run_backfill

        return run_backfill(self.context, start, end)

    def status(self, *, history: int = 20) -> PipelineStatus:
        """Per partition the committed offset against the brokers' offsets, the lag, the last run and the warnings
        of the last ``history`` runs. An unreachable cluster shows no lag (listed in ``unreachable_clusters``)
        rather than failing. See :func:`dynamic_kafka.operations.status.pipeline_status`.
        """
        from dynamic_kafka.operations.status import pipeline_status

        return pipeline_status(self.context, history=history)

    def health(self) -> HealthReport:
        """The checks between runs, against the brokers: the lag, data-loss and freshness verdicts, idle
        partitions, stuck open transactions and the event-time lag, with the thresholds of the ``health`` config.
        Reads the state and asks the brokers; starts no Spark, writes nothing. See
        :func:`dynamic_kafka.operations.health.pipeline_health`.
        """
        from dynamic_kafka.operations.health import pipeline_health

        with collecting() as statistics:
            report = pipeline_health(self.context)
        report = report.with_client_statistics(statistics.result())
        if self.project.metrics is not None:
            from dynamic_kafka.operations.monitoring import health_samples

            self._send_metrics("health", health_samples(report))
        return report

    def offsets(self) -> PipelineStatus:
        """The committed offsets against the brokers' earliest and latest (``partitions`` of the status); a
        partition whose offset a reset moved and no run has read since is marked ``reset``.
        """
        from dynamic_kafka.operations.status import pipeline_status

        return pipeline_status(self.context)

    def reset_offsets(
        self,
        to: str,
        reason: str,
        *,
        cluster: str | None = None,
        topic: str | None = None,
        partition: int | None = None,
        apply: bool = False,
    ) -> OffsetReset:
        """Move the committed next offsets of the selected partitions to ``to`` (``earliest``, ``latest``,
        ``timestamp:<ISO-8601 or epoch ms>`` or ``offset:<N>``) between runs, recorded in the run history with
        ``reason``. Without ``apply`` it only reports what would change. See
        :func:`dynamic_kafka.operations.offsets_reset.reset_offsets`.
        """
        from dynamic_kafka.operations.offsets_reset import ResetSelection, ResetTarget, reset_offsets

        selection = ResetSelection(cluster_id=cluster, topic=topic, partition=partition)
        return reset_offsets(self.context, ResetTarget.parse(to), selection, reason, yes=apply)

    def replay_dead_letters(self, *, run_seq: int | None = None, apply: bool = False) -> ReplayReport:
        """Decode the dead letters (of run ``run_seq``, or all) again under today's config and land the ones that
        decode now in the sink, exactly once. Without ``apply`` it only counts what a replay would do. See
        :func:`dynamic_kafka.operations.replay.replay_dead_letters`.
        """
        from dynamic_kafka.operations.replay import replay_dead_letters

        return replay_dead_letters(self.context, run_seq=run_seq, yes=apply)

    def abandon(self, run_seq: int, reason: str) -> int:
        """Give up the planned (crashed) run ``run_seq``, recording ``reason``; returns the new state version. See
        :func:`dynamic_kafka.protocol.abandon.abandon_run`.
        """
        return abandon_run(self._runner.guard, run_seq, reason)

    def realign(self, *, apply: bool = False) -> Realignment:
        """Realign a state that is behind its sink (restored from a backup or moved). Without ``apply`` it only
        reports what it would change. See :func:`dynamic_kafka.protocol.realign.realign`.
        """
        # The subscription's streams now, whose tables (a table per stream) a restored state may not know.
        return realign(self.config, self.context.store, yes=apply, subscribed=lambda: self.context.resolve().streams)

    def maintain(
        self, *, vacuum_retention_hours: int | None = None, unsafe_vacuum_retention: bool = False
    ) -> MaintenanceSummary:
        """Compact and vacuum the sink and dead-letter table under the pipeline's run lock and writer lease, never
        beside a run or backfill. The retention is ``vacuum_retention_hours``, else the config's
        ``maintenance.vacuum_retention_hours``, else each table's own; one below the pipeline's floor is refused
        unless ``unsafe_vacuum_retention``. See :func:`dynamic_kafka.operations.maintain.maintain_pipeline`.
        """
        from dynamic_kafka.operations.maintain import maintain_pipeline

        retention = vacuum_retention_hours
        if retention is None:
            retention = self.config.maintenance.vacuum_retention_hours
        return maintain_pipeline(
            self.context, retention_hours=retention, unsafe_vacuum_retention=unsafe_vacuum_retention
        )

    def resolve(self) -> MetadataSnapshot:
        """The pipeline's subscribed streams as the metadata service describes them now."""
        return self.context.resolve()

    def check_metadata(self, cursor: WatchCursor, *, failure_threshold: int) -> WatchResult:
        """Whether the resolved metadata changed since ``cursor`` (a scheduler's poll; see
        :func:`dynamic_kafka.metadata.watch.check_metadata`).
        """
        from dynamic_kafka.metadata.watch import check_metadata

        return check_metadata(lambda: self.resolve().fingerprint, cursor, failure_threshold=failure_threshold)

    def sink_info(self) -> TableInfo | None:
        """The sink table's version, row count and columns from its Delta log (no Spark); None before it exists,
        and for a table per stream (each stream's table is in the run's ``stream_tables`` and the status).
        """
        sink = one_sink(self.config)
        return None if sink is None else table_info(sink.sink)

    def dead_letter_info(self) -> TableInfo | None:
        """The dead-letter table's version, row count and columns (no Spark); None before it exists, and for a
        table per stream.
        """
        sink = one_sink(self.config)
        return None if sink is None else table_info(sink.dead_letters)
