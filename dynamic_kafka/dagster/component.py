"""A Dagster Component for dynamic-kafka (prototype): ``defs.yaml`` names the project config, the component builds
exactly what :func:`dynamic_kafka.dagster.build.build_definitions` builds for it.

Example ``defs.yaml``::

    type: dynamic_kafka.dagster.component.DynamicKafkaComponent
    attributes:
      config_path: "{{ env.DYNAMIC_KAFKA_CONFIG }}"

``dg check yaml`` checks the attributes against the schema Dagster derives from this class; the project config
itself is validated by the library's pydantic models (:func:`dynamic_kafka.config.load_project_config`) when the
definitions load (``dg check defs``, ``dg list defs``, the webserver), with the same one-paragraph errors as
``workspace.yaml``. The library's models cannot be the component's attributes directly: Dagster's resolution
refuses plain pydantic models with ``Path`` fields (``ResolutionException: ... incompatible field path``).
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from pydantic import Field

from dynamic_kafka.dagster.build import build_definitions


class DynamicKafkaComponent(dg.Component, dg.Resolvable, dg.Model):
    """Every pipeline of one dynamic-kafka project config: sink assets, lag checks, jobs, schedules, sensors.

    Attributes:
        config_path: the project config (``dynamic_kafka.yaml``); a relative path is relative to the folder of the
            ``defs.yaml`` that declares the component.
    """

    config_path: str = Field(
        description="The dynamic-kafka project config (dynamic_kafka.yaml). Relative to this defs.yaml's folder; "
        "templating works, e.g. '{{ env.DYNAMIC_KAFKA_CONFIG }}'.",
    )

    def resolved_config_path(self, context: dg.ComponentLoadContext) -> Path:
        """The config file as an absolute path."""
        path = Path(self.config_path).expanduser()
        return path if path.is_absolute() else (context.path / path).resolve()

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        """Build the Dagster definitions of the project config the component names."""
        return build_definitions(self.resolved_config_path(context))
