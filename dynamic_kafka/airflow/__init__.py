"""The Airflow integration of dynamic-kafka, installed with the ``airflow`` extra
(``pip install "dynamic-kafka[airflow]"``), for Apache Airflow 3.

- :func:`build_dags`: every pipeline of one project config as DAGs (run + checks, backfill by data interval,
  health, offsets, metadata watch).
- The operators, to mix into a team's own DAGs: :class:`IncrementalRunOperator`, :class:`BackfillOperator`,
  :class:`ChecksOperator`, :class:`HealthOperator`, :class:`OffsetsOperator`, and the deferrable
  :class:`MetadataChangeOperator` with its :class:`MetadataChangeTrigger`.
- ``${airflow:conn/NAME}`` / ``${airflow:var/NAME}`` secret references, resolved only inside these tasks.

The core package (``dynamic_kafka``) never imports this one, nor Airflow; this one never imports Dagster.
"""

from __future__ import annotations

try:
    import airflow.sdk  # noqa: F401  (only asked whether it is there)
except ModuleNotFoundError as missing:
    # Said here, instead of a bare "No module named 'airflow'" from the first module below.
    raise ImportError(
        "dynamic_kafka.airflow needs Apache Airflow 3, which is not installed: "
        'install the extra with `pip install "dynamic-kafka[airflow]"`.'
    ) from missing

from dynamic_kafka.airflow.dags import SPARK_POOL, build_dags
from dynamic_kafka.airflow.operators import (
    BackfillOperator,
    ChecksOperator,
    HealthOperator,
    IncrementalRunOperator,
    OffsetsOperator,
    PipelineOperator,
)
from dynamic_kafka.airflow.triggers import MetadataChangeOperator, MetadataChangeTrigger

__all__ = [
    "SPARK_POOL",
    "BackfillOperator",
    "ChecksOperator",
    "HealthOperator",
    "IncrementalRunOperator",
    "MetadataChangeOperator",
    "MetadataChangeTrigger",
    "OffsetsOperator",
    "PipelineOperator",
    "build_dags",
]
