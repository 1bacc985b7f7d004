"""The Dagster Component of dynamic-kafka: ``defs.yaml`` names a project config, the component builds exactly what
:func:`dynamic_kafka.dagster.build_definitions` builds for it, with the same translator, retry policy and automation
condition options. Registered through the ``dagster_dg_cli.registry_modules`` entry point, so ``dg list components``
finds it and ``dg scaffold defs dynamic_kafka.dagster.DynamicKafkaComponent <folder>`` writes a ``defs.yaml``.

Example ``defs.yaml``::

    type: dynamic_kafka.dagster.DynamicKafkaComponent
    attributes:
      config_path: dynamic_kafka.yaml
      key_prefix: [lake, raw]
      group_name: ingest
      owners: ["team:data"]
      retry_policy: {max_retries: 5, delay_seconds: 30, backoff: exponential}
      automation_condition: "{{ dg.AutomationCondition.on_cron('*/15 * * * *') }}"

Several components (one per config) live in one project: they share the one resource and differ in their asset
keys when their ``key_prefix`` differs. ``dg check yaml`` checks the attributes against the schema Dagster derives
from this class; the project config itself is validated by the library's pydantic models when the definitions load
(``dg check defs``, ``dg list defs``, the webserver), with the same one-paragraph errors as ``workspace.yaml``.
"""

# No `from __future__ import annotations`: Dagster reads the component's annotations at runtime.

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import dagster as dg
from pydantic import Field

from dynamic_kafka.dagster.build import build_definitions
from dynamic_kafka.dagster.names import ASSET_PREFIX, GROUP_NAME, STREAM_GROUP_NAME, STREAM_PREFIX
from dynamic_kafka.dagster.translator import DynamicKafkaTranslator


class RetryPolicyModel(dg.Model):
    """A step's retry policy in ``defs.yaml`` (Dagster's :class:`dagster.RetryPolicy`)."""

    max_retries: int = Field(default=1, ge=0, description="How many times a failed step is retried.")
    delay_seconds: float | None = Field(default=None, ge=0, description="Seconds between attempts.")
    backoff: Literal["linear", "exponential"] | None = Field(
        default=None, description="How the delay grows from one attempt to the next."
    )
    jitter: Literal["full", "plus_minus"] | None = Field(default=None, description="Random change of the delay.")


def _retry_policy(context: dg.ResolutionContext, model: RetryPolicyModel | None) -> dg.RetryPolicy | None:
    if model is None:
        return None
    return dg.RetryPolicy(
        max_retries=model.max_retries,
        delay=model.delay_seconds,
        backoff=dg.Backoff(model.backoff.upper()) if model.backoff else None,
        jitter=dg.Jitter(model.jitter.upper()) if model.jitter else None,
    )


class DynamicKafkaScaffolder(dg.Scaffolder[Any]):
    """``dg scaffold defs dynamic_kafka.dagster.DynamicKafkaComponent <folder>``: a ``defs.yaml`` that names the
    project config ``dynamic_kafka.yaml`` beside it (copy or write yours there).
    """

    def scaffold(self, request: dg.ScaffoldRequest[Any]) -> None:
        """Write the ``defs.yaml``."""
        dg.scaffold_component(request, {"config_path": "dynamic_kafka.yaml"})


@dg.scaffold_with(DynamicKafkaScaffolder)
@dataclass
class DynamicKafkaComponent(dg.Component, dg.Resolvable):
    """Every pipeline of one dynamic-kafka project config: sink assets, checks, jobs, schedules, sensors.

    Attributes:
        config_path: the project config (``dynamic_kafka.yaml``); a relative path is relative to the folder of the
            ``defs.yaml`` that declares the component.
        key_prefix: the prefix of the tables' asset keys.
        stream_key_prefix: the prefix of the Kafka streams' asset keys.
        group_name: the tables' asset group.
        stream_group_name: the streams' asset group.
        owners: the tables' owners.
        tags: the tables' tags.
        kinds: the kinds shown on the sink and backfill assets.
        retry_policy: the incremental and backfill steps' retry policy (None: the built-in bounded retry).
        automation_condition: materializes the sinks by declarative automation instead of their
            ``orchestration.schedule``.
    """

    config_path: Annotated[
        str,
        dg.Resolver.default(
            description="The dynamic-kafka project config (dynamic_kafka.yaml). Relative to this defs.yaml's "
            "folder; templating works, e.g. '{{ env.DYNAMIC_KAFKA_CONFIG }}'.",
        ),
    ]
    key_prefix: Annotated[Sequence[str], dg.Resolver.default(description="Prefix of the tables' asset keys.")] = (
        ASSET_PREFIX,
    )
    stream_key_prefix: Annotated[
        Sequence[str], dg.Resolver.default(description="Prefix of the Kafka streams' asset keys.")
    ] = (STREAM_PREFIX,)
    group_name: Annotated[str, dg.Resolver.default(description="The tables' asset group.")] = GROUP_NAME
    stream_group_name: Annotated[str, dg.Resolver.default(description="The streams' asset group.")] = STREAM_GROUP_NAME
    owners: Annotated[
        Sequence[str], dg.Resolver.default(description="Owners of the tables ('team:...' or e-mail addresses).")
    ] = ()
    tags: Annotated[Mapping[str, str], dg.Resolver.default(description="Tags of the tables' assets.")] = field(
        default_factory=dict
    )
    kinds: Annotated[
        Sequence[str], dg.Resolver.default(description="Kinds shown on the sink and backfill assets (at most 3).")
    ] = ("kafka", "spark", "delta")
    retry_policy: Annotated[
        dg.RetryPolicy | None,
        dg.Resolver(
            _retry_policy,
            model_field_type=RetryPolicyModel | None,
            description="Retry policy of the incremental and backfill steps; unset: retriable errors are retried "
            "3 times, 15 s apart.",
        ),
    ] = None
    automation_condition: Annotated[
        dg.AutomationCondition[Any] | None,
        dg.Resolver.default(
            model_field_type=str | None,
            description="Declarative automation of the sinks instead of their schedule, e.g. "
            "\"{{ dg.AutomationCondition.on_cron('*/15 * * * *') }}\".",
        ),
    ] = None

    def resolved_config_path(self, context: dg.ComponentLoadContext) -> Path:
        """The config file as an absolute path."""
        path = Path(self.config_path).expanduser()
        return path if path.is_absolute() else (context.path / path).resolve()

    def translator(self) -> DynamicKafkaTranslator:
        """The translator the attributes describe."""
        return DynamicKafkaTranslator(
            key_prefix=tuple(self.key_prefix),
            stream_key_prefix=tuple(self.stream_key_prefix),
            group_name=self.group_name,
            stream_group_name=self.stream_group_name,
            owners=tuple(self.owners),
            tags=dict(self.tags),
            kinds=tuple(self.kinds),
        )

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        """Build the Dagster definitions of the project config the component names."""
        return build_definitions(
            self.resolved_config_path(context),
            translator=self.translator(),
            retry_policy=self.retry_policy,
            automation_condition=self.automation_condition,
        )
