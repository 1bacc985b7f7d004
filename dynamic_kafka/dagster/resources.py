"""The one Dagster resource: where the project config is. Everything else comes from the library's face.

The config file is re-read whenever a pipeline is built, so a run or sensor tick always sees the file as it is now.
Spark is not a resource: the library builds it lazily (the session the config's ``spark`` section describes, cached
per process) only when a plan has something to read, so loading definitions, sensor ticks, asset checks and empty
runs never start a JVM.
"""

from __future__ import annotations

from dagster import ConfigurableResource
from pydantic import Field

from dynamic_kafka import Pipeline, ProjectConfig, load_project_config


class DynamicKafkaResource(ConfigurableResource):  # type: ignore[type-arg]
    """Builds the library's :class:`~dynamic_kafka.Pipeline` objects from the project config file.

    Example:
        >>> resource = DynamicKafkaResource(config_path="dynamic_kafka.yaml")
        >>> resource.pipeline("orders").run()  # doctest: +SKIP
    """

    config_path: str = Field(description="The project config file (dynamic_kafka.yaml).")

    def project(self) -> ProjectConfig:
        """The project config, read and validated now."""
        return load_project_config(self.config_path)

    def pipeline(self, pipeline_id: str) -> Pipeline:
        """One pipeline of the project. Cheap: it contacts nothing until it is used; one object shares its
        metadata service and Spark session between calls.
        """
        return Pipeline(self.project(), pipeline_id)
