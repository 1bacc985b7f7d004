"""The one Dagster resource: where the project config is. Everything else comes from the library.

The config file is re-read whenever a runner is built, so a run or sensor tick always sees the file as it is now.
Spark is not a resource: the library's runner builds it lazily
(``dynamic_kafka.spark.session.build_spark_session``, cached per process) only when a plan has something to read,
so loading definitions, sensor ticks, asset checks and empty runs never start a JVM.
"""

from __future__ import annotations

from dagster import ConfigurableResource
from dynamic_kafka.config import ProjectConfig, load_project_config
from dynamic_kafka.context import PipelineContext
from dynamic_kafka.runner import PipelineRunner
from pydantic import Field


class DynamicKafkaResource(ConfigurableResource):  # type: ignore[type-arg]
    """Builds library runners from the project config file.

    Example:
        >>> resource = DynamicKafkaResource(config_path="dynamic_kafka.yaml")
        >>> resource.runner("orders").run()  # doctest: +SKIP
    """

    config_path: str = Field(description="The project config file (dynamic_kafka.yaml).")

    def project(self) -> ProjectConfig:
        """The project config, read and validated now."""
        return load_project_config(self.config_path)

    def runner(self, pipeline_id: str) -> PipelineRunner:
        """A runner for one pipeline. Cheap: it contacts nothing until it is used."""
        return PipelineRunner(self.project(), pipeline_id)

    def context(self, pipeline_id: str) -> PipelineContext:
        """The shared context of one pipeline (for status and backfills). Cheap: it contacts nothing yet."""
        return PipelineContext(self.project(), pipeline_id)
