"""What every builder of one project config's definitions shares: the config file, the translator, and the user's
retry policy and automation condition.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dagster import AutomationCondition, RetryPolicy

    from dynamic_kafka.dagster.translator import DynamicKafkaTranslator


@dataclass(frozen=True)
class Target:
    """One project config's definitions being built.

    Attributes:
        config_path: the project config, absolute; every run, check and sensor tick re-reads it.
        translator: asset keys, groups, owners, tags and kinds.
        retry_policy: Dagster's retry policy of the steps that run a pipeline (incremental, backfill), or None for
            the built-in bounded retry of retriable errors.
        automation_condition: when set, the condition that materializes the sink (declarative automation) instead
            of the pipeline's ``schedule``.
    """

    config_path: str
    translator: DynamicKafkaTranslator
    retry_policy: RetryPolicy | None = None
    automation_condition: AutomationCondition[Any] | None = None
