"""The pipeline's verbs as Airflow operators: an incremental run, a backfill of the DAG run's data interval, the
checks after a run, ``health`` and ``offsets show``.

Each task builds the library's :class:`~dynamic_kafka.Pipeline` from the project config file as it is now (re-read
per task), calls one verb, logs the library's report and returns it as JSON (the task's ``return_value`` XCom). The
library decides everything: the layer holds no policy. Library errors become Airflow outcomes in one place
(:mod:`dynamic_kafka.airflow.errors`); ``${airflow:...}`` references are resolved only while ``execute`` runs
(:mod:`dynamic_kafka.airflow.secrets`). No field is templated, so nothing of the config is ever rendered.

One run per pipeline at a time is the DAG's ``max_active_runs=1`` and the Spark Connect pool; where they are not
set, the library's state guard is the backstop (a second run fails with a retriable ``RunInProgressError``).
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from dynamic_kafka import (
    Pipeline,
    completeness_verdict,
    data_loss_verdict,
    dead_letter_verdict,
    lag_limit_verdict,
    load_project_config,
)
from dynamic_kafka.airflow.errors import airflow_errors
from dynamic_kafka.airflow.secrets import airflow_references

if TYPE_CHECKING:
    from collections.abc import Sequence

    from airflow.sdk import Context

    from dynamic_kafka import HealthVerdict


RETRIES = 3
"""The retries of a retriable error, unless the task sets its own (as the Dagster layer's bounded retry)."""
RETRY_DELAY = timedelta(seconds=15)


class PipelineOperator(BaseOperator):
    """One verb of one pipeline of a project config; subclasses say which (:meth:`operate`).

    Args:
        config_path: the project config file, as the workers see it; re-read by every task.
        pipeline_id: the pipeline's ``id`` in it.
        **kwargs: Airflow's operator arguments (``task_id``, ``retries``, ``pool``, ``outlets``...).
    """

    template_fields: Sequence[str] = ()
    ui_color = "#e8f4fd"

    def __init__(self, *, config_path: str, pipeline_id: str, **kwargs: Any) -> None:
        kwargs.setdefault("retries", RETRIES)
        kwargs.setdefault("retry_delay", RETRY_DELAY)
        super().__init__(**kwargs)
        self.config_path = config_path
        self.pipeline_id = pipeline_id

    def execute(self, context: Context) -> dict[str, Any]:
        """Builds the pipeline and runs the verb; its report is the task's XCom."""
        with airflow_references(), airflow_errors(self.pipeline_id):
            pipeline = Pipeline(load_project_config(self.config_path), self.pipeline_id)
            return self.operate(pipeline, context)

    def operate(self, pipeline: Pipeline, context: Context) -> dict[str, Any]:
        """The verb: calls the library and returns its report as JSON."""
        raise NotImplementedError


class IncrementalRunOperator(PipelineOperator):
    """One incremental run: recover a crashed run if any, then every record since the last run, once.

    Example:
        >>> IncrementalRunOperator(task_id="run", config_path="dynamic_kafka.yaml", pipeline_id="orders")
        <Task(IncrementalRunOperator): run>
    """

    def operate(self, pipeline: Pipeline, context: Context) -> dict[str, Any]:
        """Runs the pipeline once; returns the run summary."""
        summary = pipeline.run()
        for finding in summary.warnings:
            self.log.warning("%s: %s", finding.kind, finding.message)
        self.log.info("run %s: %s, %s records landed", summary.run_seq, summary.status, summary.records)
        return summary.model_dump(mode="json")


class BackfillOperator(PipelineOperator):
    """Merges the records whose timestamps fall in the DAG run's data interval ``[start, end)`` into the sink,
    without duplicates and without moving the incremental offsets (``airflow backfill create`` runs one per
    interval).
    """

    def operate(self, pipeline: Pipeline, context: Context) -> dict[str, Any]:
        """Backfills the data interval; returns the run summary."""
        start, end = context.get("data_interval_start"), context.get("data_interval_end")
        if start is None or end is None or start >= end:
            raise AirflowFailException(
                f"pipeline {self.pipeline_id!r}: task {self.task_id!r} backfills a DAG run's data interval, and this "
                f"run has none ({start} .. {end}). Run it from a scheduled DAG (e.g. `airflow backfill create`), "
                "not a manual trigger without a logical date."
            )
        summary = pipeline.backfill(start, end)
        for finding in summary.warnings:
            self.log.warning("%s: %s", finding.kind, finding.message)
        self.log.info("backfill [%s, %s): %s, %s records merged", start, end, summary.status, summary.records)
        return summary.model_dump(mode="json")


class ChecksOperator(PipelineOperator):
    """The checks after a run, against its committed state and the brokers: ``lag``, ``data_loss``,
    ``dead_letters`` and ``completeness``. Fails (without retries) when one with severity ``error`` fails; a
    failing ``warning`` is logged.
    """

    def operate(self, pipeline: Pipeline, context: Context) -> dict[str, Any]:
        """Evaluates the checks; returns the verdicts by name."""
        status = pipeline.status()
        config = pipeline.config
        verdicts: dict[str, HealthVerdict] = {
            "lag": lag_limit_verdict(status, config.max_lag_records),
            "data_loss": data_loss_verdict(status),
            "dead_letters": dead_letter_verdict(status, config.max_dead_letters),
            "completeness": completeness_verdict(status),
        }
        report = {name: v.model_dump(mode="json") for name, v in verdicts.items()}
        for name, v in verdicts.items():
            self.log.log(logging.INFO if v.passed else logging.WARNING, "%s: %s", name, v.description)
        _fail_on(context, report, [n for n, v in verdicts.items() if not v.passed and v.severity == "error"], self)
        return report


class HealthOperator(PipelineOperator):
    """The checks between runs (``dynamic-kafka health``): lag, data loss, freshness, idle partitions, stuck
    transactions, event-time lag. Fails (without retries) when a verdict fails; the verdicts are in the log and
    the XCom either way. Starts no Spark.
    """

    def operate(self, pipeline: Pipeline, context: Context) -> dict[str, Any]:
        """Evaluates the health checks; returns the report."""
        report = pipeline.health()
        self.log.info("%s", report.text())
        document = report.model_dump(mode="json")
        _fail_on(context, document, [v.name for v in report.failed], self)
        return document


class OffsetsOperator(PipelineOperator):
    """``offsets show``: per partition the committed next offset, the brokers' earliest and latest, the lag and
    the last run. Writes nothing.
    """

    def operate(self, pipeline: Pipeline, context: Context) -> dict[str, Any]:
        """Reads the offsets; returns the status."""
        status = pipeline.offsets()
        self.log.info("%s", status.offsets_text())
        return status.model_dump(mode="json")


def _fail_on(context: Context, report: dict[str, Any], failed: list[str], task: PipelineOperator) -> None:
    """Pushes the report (a failed task returns nothing) and fails the task when checks failed."""
    if not failed:
        return
    context["ti"].xcom_push(key="return_value", value=report)
    raise AirflowFailException(
        f"pipeline {task.pipeline_id!r}: check(s) {', '.join(failed)} failed (task {task.task_id!r}); the verdicts "
        "are in this log and the task's XCom."
    )
