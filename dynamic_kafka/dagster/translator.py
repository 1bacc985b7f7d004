"""How a project's pipelines look in a Dagster project: asset keys, groups, owners, tags and kinds.

The defaults are the names :mod:`dynamic_kafka.dagster.names` documents (``dynamic_kafka/<id>``, ``kafka/<stream>``,
groups ``dynamic_kafka`` and ``kafka_streams``). A team that mixes the integration into its own project sets a key
prefix, its group and owners here, or subclasses the translator and overrides a method, as dagster-dlt's translator
is used. Job, schedule and sensor names stay derived from the pipeline id: two configs merged into one code
location need distinct pipeline ids.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypedDict

from dagster import AssetKey

from dynamic_kafka.dagster.names import ASSET_PREFIX, GROUP_NAME, STREAM_GROUP_NAME, STREAM_PREFIX

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence


class TableAttributes(TypedDict):
    """The keyword arguments a table's ``AssetSpec`` or ``@asset`` takes from the translator."""

    group_name: str
    owners: list[str]
    tags: dict[str, str]


@dataclass(frozen=True)
class DynamicKafkaTranslator:
    """The Dagster face of a project's pipelines.

    Attributes:
        key_prefix: the prefix of every table's asset key (``[*key_prefix, "<pipeline id>"]``).
        stream_key_prefix: the prefix of the Kafka streams' external asset keys (``[*stream_key_prefix, "<stream>"]``).
        group_name: the group of the tables' assets.
        stream_group_name: the group of the streams' assets.
        owners: the owners of the tables' assets (``team:...`` or e-mail addresses, as Dagster takes them).
        tags: tags of the tables' assets (not of runs).
        kinds: the kinds shown on the sink and backfill assets, instead of ``kafka``, ``spark``, ``delta``
            (Dagster shows at most three).

    Example:
        >>> translator = DynamicKafkaTranslator(key_prefix=("lake", "raw"), group_name="ingest", owners=("team:data",))
        >>> translator.asset_key("orders").path
        ['lake', 'raw', 'orders']
    """

    key_prefix: Sequence[str] = (ASSET_PREFIX,)
    stream_key_prefix: Sequence[str] = (STREAM_PREFIX,)
    group_name: str = GROUP_NAME
    stream_group_name: str = STREAM_GROUP_NAME
    owners: Sequence[str] = ()
    tags: Mapping[str, str] = field(default_factory=dict)
    kinds: Sequence[str] = ("kafka", "spark", "delta")

    def asset_key(self, pipeline_id: str) -> AssetKey:
        """The sink table's asset key."""
        return AssetKey([*self.key_prefix, pipeline_id])

    def dead_letter_asset_key(self, pipeline_id: str) -> AssetKey:
        """The dead-letter table's asset key (records the run could not decode, kept with the reason)."""
        return AssetKey([*self.key_prefix, f"{pipeline_id}_dead_letter"])

    def stream_tables_asset_key(self, pipeline_id: str) -> AssetKey:
        """The asset of a pipeline with a table per stream: one dynamic partition per stream's table."""
        return AssetKey([*self.key_prefix, f"{pipeline_id}_tables"])

    def backfill_asset_key(self, pipeline_id: str) -> AssetKey:
        """The partitioned asset of the sink's time windows merged by backfills."""
        return AssetKey([*self.key_prefix, f"{pipeline_id}_backfill"])

    def publication_asset_key(self, publication_id: str) -> AssetKey:
        """A publication's asset: the table's rows published to its stream."""
        return AssetKey([*self.key_prefix, f"{publication_id}_publication"])

    def publication_table_asset_key(self, publication_id: str) -> AssetKey:
        """The external asset of a published table that no pipeline of the config writes."""
        return AssetKey([*self.key_prefix, f"{publication_id}_table"])

    def stream_asset_key(self, stream_id: str) -> AssetKey:
        """A Kafka stream's (external) asset key."""
        return AssetKey([*self.stream_key_prefix, stream_id])

    def pool_name(self, pipeline_id: str) -> str:
        """The concurrency pool shared by the pipeline's incremental, backfill and maintenance steps (limit 1 per
        pool): the sink's asset key, so pipelines of two configs never share one.
        """
        return self.asset_key(pipeline_id).to_user_string()

    def table_attributes(self) -> TableAttributes:
        """Group, owners and tags of a table's asset, as ``AssetSpec`` / ``@asset`` keyword arguments."""
        return TableAttributes(group_name=self.group_name, owners=list(self.owners), tags=dict(self.tags))
