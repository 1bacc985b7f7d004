"""Stream metadata: which physical clusters and topics make up each logical stream.

Names follow Flink's Dynamic Kafka Source (FLIP-246): a :class:`KafkaStream` maps its ``stream_id`` to one
:class:`ClusterMetadata` per cluster, each with the topics of that stream on that cluster. Clusters are named by
a stable logical ``cluster_id``; bootstrap servers and properties may change under the same id.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from pydantic import Field, field_validator

from dynamic_kafka.config.models import StringProperties, checked_regex
from dynamic_kafka.frozen import FrozenModel, replaced
from dynamic_kafka.initializers import StartingOffsets, StoppingOffsets
from dynamic_kafka.registry.config import RegistryConfig
from dynamic_kafka.secrets import fingerprint_form, masked_repr_args, resolve_properties

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping


class ClusterMetadata(FrozenModel):
    """One Kafka cluster as seen by one stream.

    ``properties`` are librdkafka-style client properties (``security.protocol``, ``sasl.username``...). Values
    may be ``${env:NAME}`` / ``${file:PATH}`` references; they are resolved only by :meth:`client_properties`.
    ``repr`` and ``str`` mask sensitive values.
    """

    cluster_id: str = Field(min_length=1, description="Stable logical name of the cluster.")
    bootstrap_servers: str = Field(min_length=1, description="Comma-separated host:port list.")
    properties: StringProperties = Field(
        default_factory=dict, description="Kafka client properties; every value a string (quote it in YAML)."
    )
    topics: frozenset[str] = Field(default_factory=frozenset, description="Topics of the stream on this cluster.")
    topic_pattern: str | None = Field(
        None,
        description="A regex over the cluster's topic names (full match): every matching topic joins ``topics`` "
        "when a run resolves the metadata (:func:`~dynamic_kafka.metadata.patterns.expand_patterns`).",
    )
    partitions: dict[str, frozenset[int]] = Field(
        default_factory=dict,
        description="Partition sets by topic: only these partitions of the topic are read. A topic not named here "
        "is read whole.",
    )
    starting_offsets: StartingOffsets | None = Field(
        None, description="Overrides the pipeline's starting offsets for this cluster."
    )
    stopping_offsets: StoppingOffsets | None = Field(
        None, description="Overrides the pipeline's stopping offsets for this cluster."
    )
    schema_registry: RegistryConfig | None = Field(
        None, description="The Schema Registry of this cluster's registry-encoded topics (credentials as references)."
    )

    _pattern_compiles = field_validator("topic_pattern")(classmethod(lambda cls, v: checked_regex(v)))

    def client_properties(self) -> dict[str, str]:
        """The properties with secret references resolved. Only for building a client; never log the result."""
        return resolve_properties(self.properties, cluster_id=self.cluster_id)

    def with_topics(self, topics: frozenset[str]) -> ClusterMetadata:
        """This cluster reading ``topics``."""
        return replaced(self, topics=topics)

    def with_properties(self, properties: Mapping[str, str]) -> ClusterMetadata:
        """This cluster with its client properties replaced by ``properties``."""
        return replaced(self, properties=dict(properties))

    def with_offsets(self, starting: StartingOffsets | None, stopping: StoppingOffsets | None) -> ClusterMetadata:
        """This cluster with its own starting and stopping offsets overrides replaced (None: the pipeline's)."""
        return replaced(self, starting_offsets=starting, stopping_offsets=stopping)

    def connection(self) -> ClusterMetadata:
        """This cluster without stream-specific parts (topics), for grouping clients by cluster."""
        return replaced(self, topics=frozenset(), topic_pattern=None, partitions={})

    def __repr_args__(self) -> Iterable[tuple[str | None, Any]]:
        return masked_repr_args(super().__repr_args__())


class KafkaStream(FrozenModel):
    """A logical stream: ``stream_id`` and, per ``cluster_id``, that cluster's metadata and topics."""

    stream_id: str = Field(min_length=1)
    clusters: dict[str, ClusterMetadata] = Field(default_factory=dict, description="By cluster_id.")

    @field_validator("clusters")
    @classmethod
    def _keys_match_ids(cls, value: dict[str, ClusterMetadata]) -> dict[str, ClusterMetadata]:
        for key, cluster in value.items():
            if key != cluster.cluster_id:
                raise ValueError(f"cluster key {key!r} differs from its cluster_id {cluster.cluster_id!r}")
        return value

    def with_clusters(self, clusters: Mapping[str, ClusterMetadata]) -> KafkaStream:
        """This stream on ``clusters`` (by cluster_id)."""
        return replaced(self, clusters=dict(clusters))

    def map_clusters(self, change: Callable[[ClusterMetadata], ClusterMetadata]) -> KafkaStream:
        """This stream with ``change`` applied to each of its clusters."""
        return self.with_clusters({cid: change(cluster) for cid, cluster in self.clusters.items()})

    def __hash__(self) -> int:
        return hash(self.stream_id)


def metadata_fingerprint(streams: Iterable[KafkaStream]) -> str:
    """A stable hash of the resolved layout: clusters, bootstrap servers, properties and topics. Changes when a run
    would see different metadata. Sensitive properties are hashed as written when they are references and as
    ``***`` when they are literals (:func:`~dynamic_kafka.secrets.fingerprint_form`): a hash of a short literal
    password can be reversed by trying candidates, and the fingerprint is stored and shown (state rows, Dagster
    run tags). A changed literal password therefore does not change the fingerprint.
    """
    canonical = [
        {
            "stream_id": s.stream_id,
            "clusters": {
                cid: {
                    "bootstrap_servers": c.bootstrap_servers,
                    "properties": {k: fingerprint_form(k, v) for k, v in sorted(c.properties.items())},
                    "topics": sorted(c.topics),
                    "starting_offsets": c.starting_offsets.model_dump() if c.starting_offsets else None,
                    "stopping_offsets": c.stopping_offsets.model_dump() if c.stopping_offsets else None,
                    **({"schema_registry": c.schema_registry.model_dump()} if c.schema_registry else {}),
                    **({"topic_pattern": c.topic_pattern} if c.topic_pattern is not None else {}),
                    **({"partitions": {t: sorted(p) for t, p in sorted(c.partitions.items())}} if c.partitions else {}),
                }
                for cid, c in sorted(s.clusters.items())
            },
        }
        for s in sorted(streams, key=lambda s: s.stream_id)
    ]
    return hashlib.sha256(json.dumps(canonical, sort_keys=True).encode()).hexdigest()[:16]
