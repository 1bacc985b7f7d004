"""Runs on a metadata change: a trigger that watches the pipeline's resolved metadata fingerprint in Airflow's
triggerer, and the deferrable operator that waits on it without holding a worker slot.

The trigger polls the library's :meth:`~dynamic_kafka.Pipeline.check_metadata` (the function the Dagster sensor
calls) every ``orchestration.sensor.interval_seconds``, tolerating ``orchestration.sensor.failure_threshold``
consecutive metadata service failures, and fires once the fingerprint differs from the cursor's. The cursor (the
library's ``WatchCursor``) is kept in the Airflow variable ``dynamic_kafka/<pipeline>/metadata_cursor`` between
waits, so the last fingerprint survives restarts; without one, the first wait fires at once and its run records
the baseline, as the Dagster sensor's first tick does. The trigger resolves no ``${airflow:...}`` reference: the
metadata it reads names them, the tasks resolve them.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator, Variable
from airflow.sdk.exceptions import AirflowException
from airflow.triggers.base import BaseTrigger, TriggerEvent

from dynamic_kafka import DynamicKafkaError, Pipeline, WatchCursor, WatchResult, load_project_config

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence

    from airflow.sdk import Context


def cursor_variable(pipeline_id: str) -> str:
    """The Airflow variable holding a pipeline's metadata watch cursor."""
    return f"dynamic_kafka/{pipeline_id}/metadata_cursor"


class MetadataChangeTrigger(BaseTrigger):
    """Fires when the pipeline's resolved metadata fingerprint differs from ``cursor``'s.

    Its event is ``{"cursor": <WatchCursor JSON>, "run_key": ..., "reason": ...}``, or ``{"error": ...}`` when the
    metadata service failed more than the tolerated number of times in a row.
    """

    def __init__(self, *, config_path: str, pipeline_id: str, cursor: str | None = None) -> None:
        super().__init__()
        self.config_path = config_path
        self.pipeline_id = pipeline_id
        self.cursor = cursor

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """Where the triggerer finds the class and the arguments it is rebuilt with."""
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {"config_path": self.config_path, "pipeline_id": self.pipeline_id, "cursor": self.cursor},
        )

    def poll(self, cursor: WatchCursor) -> tuple[WatchResult, int]:
        """One poll against the config file as it is now; returns the result and the seconds to the next poll."""
        pipeline = Pipeline(load_project_config(self.config_path), self.pipeline_id)
        settings = pipeline.config.orchestration.sensor
        result = pipeline.check_metadata(cursor, failure_threshold=settings.failure_threshold)
        return result, settings.interval_seconds

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Polls in a thread (the library is synchronous) until the fingerprint changes."""
        cursor = WatchCursor.model_validate_json(self.cursor) if self.cursor else WatchCursor()
        while True:
            try:
                result, interval = await asyncio.to_thread(self.poll, cursor)
            except DynamicKafkaError as e:
                yield TriggerEvent({"error": f"pipeline {self.pipeline_id!r}: {e}"})
                return
            cursor = result.cursor
            if result.run_key is not None:
                yield TriggerEvent(
                    {"cursor": cursor.model_dump_json(), "run_key": result.run_key, "reason": result.reason}
                )
                return
            self.log.debug("pipeline %r: %s", self.pipeline_id, result.reason)
            await asyncio.sleep(interval)


class MetadataChangeOperator(BaseOperator):
    """Waits, deferred to the triggerer (no worker slot), until the pipeline's metadata changes; returns
    ``{"run_key": ..., "reason": ...}``. A downstream task starts the run (the DAG factory's watch DAG triggers the
    pipeline's DAG).

    Args:
        config_path: the project config file, as the workers and the triggerer see it.
        pipeline_id: the pipeline's ``id`` in it.
        **kwargs: Airflow's operator arguments.
    """

    template_fields: Sequence[str] = ()

    def __init__(self, *, config_path: str, pipeline_id: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.config_path = config_path
        self.pipeline_id = pipeline_id

    def execute(self, context: Context) -> None:
        """Defers to the trigger with the stored cursor."""
        cursor = Variable.get(cursor_variable(self.pipeline_id), default=None)
        self.defer(
            trigger=MetadataChangeTrigger(config_path=self.config_path, pipeline_id=self.pipeline_id, cursor=cursor),
            method_name="execute_complete",
        )

    def execute_complete(self, context: Context, event: dict[str, str]) -> dict[str, str]:
        """Stores the new cursor and returns the change; a failing metadata service fails the task (retriable)."""
        if "error" in event:
            raise AirflowException(event["error"])
        Variable.set(cursor_variable(self.pipeline_id), event["cursor"])
        self.log.info("%s", event["reason"])
        return {"run_key": event["run_key"], "reason": event["reason"]}
