"""dynamic-kafka: exactly-once batch landing of multi-cluster Kafka streams into Delta Lake.

The public face: :class:`Pipeline` (one pipeline of a project, every operation on it), the config loaders, the
values its operations return and the root of the errors they raise. Everything listed in ``__all__`` is imported
from here (``from dynamic_kafka import Pipeline``); the submodules are the implementation.

The names load on first use, so importing one submodule (``dynamic_kafka.errors``, ``dynamic_kafka.config``) does
not load the Kafka, Delta and Arrow clients the operations need.

Example:
    >>> import dynamic_kafka
    >>> dynamic_kafka.Pipeline.__name__
    'Pipeline'
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dynamic_kafka.cli.dead_letters import format_replay
    from dynamic_kafka.cli.health import format_health
    from dynamic_kafka.cli.offsets import format_offsets, format_reset
    from dynamic_kafka.config import BackfillConfig, PipelineConfig, ProjectConfig, load_project_config
    from dynamic_kafka.dead_letters import ReplayReport
    from dynamic_kafka.errors import ConfigError, DataLossError, DynamicKafkaError, HostError
    from dynamic_kafka.health import HealthReport, HealthVerdict, PartitionHealth
    from dynamic_kafka.maintain import MaintenanceSummary
    from dynamic_kafka.metadata.file import parse_metadata_file
    from dynamic_kafka.metadata.models import ClusterMetadata, KafkaStream
    from dynamic_kafka.metadata.service import KafkaMetadataService
    from dynamic_kafka.metadata.snapshot import MetadataSnapshot
    from dynamic_kafka.metadata.watch import WatchCursor, WatchResult
    from dynamic_kafka.model.plan import Finding, LostRange, Plan, Split, TopicPartition
    from dynamic_kafka.model.summary import (
        Completeness,
        GroupCommit,
        PartitionCount,
        RunSummary,
        StreamTable,
        TopicStats,
    )
    from dynamic_kafka.offset_reset import OffsetReset
    from dynamic_kafka.pipeline import Pipeline
    from dynamic_kafka.publish.config import PublicationConfig
    from dynamic_kafka.publish.protocol import PublicationOutcome
    from dynamic_kafka.publish.publisher import Publication, PublicationPlan, PublicationStatus
    from dynamic_kafka.realign import Realignment
    from dynamic_kafka.references import reference_kind
    from dynamic_kafka.sink.compaction import TableMaintenance
    from dynamic_kafka.sink.tables import TableInfo
    from dynamic_kafka.status import (
        LagVerdict,
        PartitionLag,
        PipelineStatus,
        completeness_verdict,
        data_loss_verdict,
        dead_letter_verdict,
        lag_limit_verdict,
        lag_verdict,
    )
    from dynamic_kafka.storage import TableLocation

__version__ = "0.1.0"

# Public name -> the module that defines it.
_EXPORTS: dict[str, str] = {
    "Pipeline": "dynamic_kafka.pipeline",
    "Publication": "dynamic_kafka.publish.publisher",
    "PublicationConfig": "dynamic_kafka.publish.config",
    "PublicationPlan": "dynamic_kafka.publish.publisher",
    "PublicationStatus": "dynamic_kafka.publish.publisher",
    "PublicationOutcome": "dynamic_kafka.publish.protocol",
    "load_project_config": "dynamic_kafka.config",
    "parse_metadata_file": "dynamic_kafka.metadata.file",
    "ProjectConfig": "dynamic_kafka.config",
    "PipelineConfig": "dynamic_kafka.config",
    "BackfillConfig": "dynamic_kafka.config",
    "KafkaMetadataService": "dynamic_kafka.metadata.service",
    "ClusterMetadata": "dynamic_kafka.metadata.models",
    "KafkaStream": "dynamic_kafka.metadata.models",
    "MetadataSnapshot": "dynamic_kafka.metadata.snapshot",
    "WatchCursor": "dynamic_kafka.metadata.watch",
    "WatchResult": "dynamic_kafka.metadata.watch",
    "Plan": "dynamic_kafka.model.plan",
    "Split": "dynamic_kafka.model.plan",
    "TopicPartition": "dynamic_kafka.model.plan",
    "Finding": "dynamic_kafka.model.plan",
    "LostRange": "dynamic_kafka.model.plan",
    "RunSummary": "dynamic_kafka.model.summary",
    "StreamTable": "dynamic_kafka.model.summary",
    "TopicStats": "dynamic_kafka.model.summary",
    "GroupCommit": "dynamic_kafka.model.summary",
    "Completeness": "dynamic_kafka.model.summary",
    "PartitionCount": "dynamic_kafka.model.summary",
    "PipelineStatus": "dynamic_kafka.status",
    "PartitionLag": "dynamic_kafka.status",
    "LagVerdict": "dynamic_kafka.status",
    "lag_verdict": "dynamic_kafka.status",
    "data_loss_verdict": "dynamic_kafka.status",
    "lag_limit_verdict": "dynamic_kafka.status",
    "dead_letter_verdict": "dynamic_kafka.status",
    "completeness_verdict": "dynamic_kafka.status",
    "Realignment": "dynamic_kafka.realign",
    "HealthReport": "dynamic_kafka.health",
    "HealthVerdict": "dynamic_kafka.health",
    "PartitionHealth": "dynamic_kafka.health",
    "format_health": "dynamic_kafka.cli.health",
    "OffsetReset": "dynamic_kafka.offset_reset",
    "MaintenanceSummary": "dynamic_kafka.maintain",
    "TableMaintenance": "dynamic_kafka.sink.compaction",
    "ReplayReport": "dynamic_kafka.dead_letters",
    "format_offsets": "dynamic_kafka.cli.offsets",
    "format_reset": "dynamic_kafka.cli.offsets",
    "format_replay": "dynamic_kafka.cli.dead_letters",
    "TableInfo": "dynamic_kafka.sink.tables",
    "TableLocation": "dynamic_kafka.storage",
    "reference_kind": "dynamic_kafka.references",
    "DynamicKafkaError": "dynamic_kafka.errors",
    "ConfigError": "dynamic_kafka.errors",
    "DataLossError": "dynamic_kafka.errors",
    "HostError": "dynamic_kafka.errors",
}

__all__ = [
    "BackfillConfig",
    "ClusterMetadata",
    "Completeness",
    "ConfigError",
    "DataLossError",
    "DynamicKafkaError",
    "Finding",
    "GroupCommit",
    "HealthReport",
    "HealthVerdict",
    "HostError",
    "KafkaMetadataService",
    "KafkaStream",
    "LagVerdict",
    "LostRange",
    "MaintenanceSummary",
    "MetadataSnapshot",
    "OffsetReset",
    "PartitionCount",
    "PartitionHealth",
    "PartitionLag",
    "Pipeline",
    "PipelineConfig",
    "PipelineStatus",
    "Plan",
    "ProjectConfig",
    "Publication",
    "PublicationConfig",
    "PublicationOutcome",
    "PublicationPlan",
    "PublicationStatus",
    "Realignment",
    "ReplayReport",
    "RunSummary",
    "Split",
    "StreamTable",
    "TableInfo",
    "TableLocation",
    "TableMaintenance",
    "TopicPartition",
    "TopicStats",
    "WatchCursor",
    "WatchResult",
    "__version__",
    "completeness_verdict",
    "data_loss_verdict",
    "dead_letter_verdict",
    "format_health",
    "format_offsets",
    "format_replay",
    "format_reset",
    "lag_limit_verdict",
    "lag_verdict",
    "load_project_config",
    "parse_metadata_file",
    "reference_kind",
]


def __getattr__(name: str) -> object:
    """Loads a public name on first use (PEP 562)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'dynamic_kafka' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
