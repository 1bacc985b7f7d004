"""dynamic-kafka: exactly-once batch landing of multi-cluster Kafka streams into Delta Lake.

The public face: :class:`Pipeline` (one pipeline of a project, every operation on it), the config loaders, the
values its operations return and the root of the errors they raise. Everything listed in ``__all__`` is imported
from here (``from dynamic_kafka import Pipeline``); the submodules are the implementation.

The names load on first use, so importing one submodule (``dynamic_kafka.errors``, ``dynamic_kafka.config.models``) does
not load the Kafka, Delta and Arrow clients the operations need.

Example:
    >>> import dynamic_kafka
    >>> dynamic_kafka.Pipeline.__name__
    'Pipeline'
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the public names, each once: __all__ and the lazy loading below are read from here
    from dynamic_kafka.config.loader import load_project_config as load_project_config
    from dynamic_kafka.config.models import BackfillConfig as BackfillConfig
    from dynamic_kafka.config.models import PipelineConfig as PipelineConfig
    from dynamic_kafka.config.models import ProjectConfig as ProjectConfig
    from dynamic_kafka.errors import ConfigError as ConfigError
    from dynamic_kafka.errors import DataLossError as DataLossError
    from dynamic_kafka.errors import DynamicKafkaError as DynamicKafkaError
    from dynamic_kafka.errors import HostError as HostError
    from dynamic_kafka.errors import as_library_error as as_library_error
    from dynamic_kafka.metadata.file import parse_metadata_file as parse_metadata_file
    from dynamic_kafka.metadata.models import ClusterMetadata as ClusterMetadata
    from dynamic_kafka.metadata.models import KafkaStream as KafkaStream
    from dynamic_kafka.metadata.service import KafkaMetadataService as KafkaMetadataService
    from dynamic_kafka.metadata.snapshot import MetadataSnapshot as MetadataSnapshot
    from dynamic_kafka.metadata.watch import WatchCursor as WatchCursor
    from dynamic_kafka.metadata.watch import WatchResult as WatchResult
    from dynamic_kafka.model.plan import Finding as Finding
    from dynamic_kafka.model.plan import LostRange as LostRange
    from dynamic_kafka.model.plan import Plan as Plan
    from dynamic_kafka.model.plan import Split as Split
    from dynamic_kafka.model.plan import TopicPartition as TopicPartition
    from dynamic_kafka.model.summary import Completeness as Completeness
    from dynamic_kafka.model.summary import GroupCommit as GroupCommit
    from dynamic_kafka.model.summary import PartitionCount as PartitionCount
    from dynamic_kafka.model.summary import RunSummary as RunSummary
    from dynamic_kafka.model.summary import StreamTable as StreamTable
    from dynamic_kafka.model.summary import TopicStats as TopicStats
    from dynamic_kafka.operations.health import HealthReport as HealthReport
    from dynamic_kafka.operations.health import PartitionHealth as PartitionHealth
    from dynamic_kafka.operations.maintain import MaintenanceSummary as MaintenanceSummary
    from dynamic_kafka.operations.offsets_reset import OffsetReset as OffsetReset
    from dynamic_kafka.operations.replay import ReplayReport as ReplayReport
    from dynamic_kafka.operations.status import HealthVerdict as HealthVerdict
    from dynamic_kafka.operations.status import PartitionLag as PartitionLag
    from dynamic_kafka.operations.status import PipelineStatus as PipelineStatus
    from dynamic_kafka.operations.status import completeness_verdict as completeness_verdict
    from dynamic_kafka.operations.status import data_loss_verdict as data_loss_verdict
    from dynamic_kafka.operations.status import dead_letter_verdict as dead_letter_verdict
    from dynamic_kafka.operations.status import lag_limit_verdict as lag_limit_verdict
    from dynamic_kafka.pipeline import Pipeline as Pipeline
    from dynamic_kafka.progress import Progress as Progress
    from dynamic_kafka.progress import every as every
    from dynamic_kafka.progress import reporting_progress as reporting_progress
    from dynamic_kafka.protocol.realign import Realignment as Realignment
    from dynamic_kafka.publish.config import PublicationConfig as PublicationConfig
    from dynamic_kafka.publish.protocol import PublicationOutcome as PublicationOutcome
    from dynamic_kafka.publish.publisher import Publication as Publication
    from dynamic_kafka.publish.publisher import PublicationPlan as PublicationPlan
    from dynamic_kafka.publish.publisher import PublicationStatus as PublicationStatus
    from dynamic_kafka.references import reference_kind as reference_kind
    from dynamic_kafka.sink.compaction import TableMaintenance as TableMaintenance
    from dynamic_kafka.sink.tables import TableInfo as TableInfo
    from dynamic_kafka.storage import TableLocation as TableLocation

__version__ = "0.1.0"


def _public_names() -> dict[str, str]:
    """Public name -> its module, from the ``TYPE_CHECKING`` imports above (the one list of them)."""
    tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    block = next(n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING")
    return {a.name: n.module for n in block.body if isinstance(n, ast.ImportFrom) and n.module for a in n.names}


_EXPORTS = _public_names()

__all__ = ["__version__", *_EXPORTS]


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
