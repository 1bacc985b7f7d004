"""The one Dagster resource: builds the library's pipelines. Everything else comes from the library's face.

It holds no config: each definition knows its project config file and passes it, so one resource instance
(:data:`SHARED`) serves every config's definitions, and the definitions of several configs merge
(``Definitions.merge`` accepts one key bound to one object). The config file is re-read whenever a pipeline is
built, so a run or sensor tick always sees the file as it is now. Spark is not a resource: the library builds it
lazily (the session the config's ``spark`` section describes, cached per process) only when a plan has something to
read, so loading definitions, sensor ticks, asset checks and empty runs never start a JVM.
"""

from __future__ import annotations

from dagster import ConfigurableResource

from dynamic_kafka import Pipeline, Publication, load_project_config


class DynamicKafkaResource(ConfigurableResource):  # type: ignore[type-arg]
    """Builds the library's :class:`~dynamic_kafka.Pipeline` objects from a project config file.

    Example:
        >>> resource = DynamicKafkaResource()
        >>> resource.pipeline("dynamic_kafka.yaml", "orders").run()  # doctest: +SKIP
    """

    def pipeline(self, config_path: str, pipeline_id: str) -> Pipeline:
        """One pipeline of the project config, read and validated now. Cheap: it contacts nothing until it is used;
        one object shares its metadata service and Spark session between calls.
        """
        return Pipeline(load_project_config(config_path), pipeline_id)

    def publication(self, config_path: str, publication_id: str) -> Publication:
        """One publication of the project config, read and validated now; it contacts nothing until it is used."""
        return Publication(load_project_config(config_path), publication_id)


# The instance every build_definitions result binds to RESOURCE_KEY: the same object, so the results merge.
SHARED = DynamicKafkaResource()
