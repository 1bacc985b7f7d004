"""The Dagster integration of dynamic-kafka, installed with the ``dagster`` extra
(``pip install "dynamic-kafka[dagster]"``) and built to be mixed into a team's own Dagster project.

- :func:`build_definitions`: every pipeline of one project config as Dagster definitions (assets, checks, jobs,
  schedules, sensors); several results merge with :meth:`dagster.Definitions.merge`.
- :class:`DynamicKafkaComponent`: the same as a Dagster Component (``dg scaffold defs
  dynamic_kafka.dagster.DynamicKafkaComponent <name>``).
- :class:`DynamicKafkaTranslator`: asset keys, groups, owners, tags and kinds of the definitions.
- :class:`DynamicKafkaResource`: the one resource the definitions use.

The core package (``dynamic_kafka``) never imports this one, nor Dagster.
"""

from __future__ import annotations

try:
    import dagster  # noqa: F401  (only asked whether it is there)
except ModuleNotFoundError as missing:
    # Said here, instead of a bare "No module named 'dagster'" from the first module below.
    raise ImportError(
        "dynamic_kafka.dagster needs Dagster, which is not installed: "
        'install the extra with `pip install "dynamic-kafka[dagster]"`.'
    ) from missing

from dynamic_kafka.dagster.build import build_definitions
from dynamic_kafka.dagster.component import DynamicKafkaComponent
from dynamic_kafka.dagster.resources import DynamicKafkaResource
from dynamic_kafka.dagster.translator import DynamicKafkaTranslator

__all__ = ["DynamicKafkaComponent", "DynamicKafkaResource", "DynamicKafkaTranslator", "build_definitions"]
