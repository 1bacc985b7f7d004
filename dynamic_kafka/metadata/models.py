"""Stream metadata: which physical clusters and topics make up each logical stream.

Names follow Flink's Dynamic Kafka Source (FLIP-246): a :class:`KafkaStream` maps its ``stream_id`` to one
:class:`ClusterMetadata` per cluster, each with the topics of that stream on that cluster. Clusters are named by
a stable logical ``cluster_id``; bootstrap servers and properties may change under the same id.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, field_validator

from dynamic_kafka.offsets import StartingOffsets, StoppingOffsets
from dynamic_kafka.registry.config import RegistryConfig
from dynamic_kafka.secrets import redact_properties, resolve_properties

if TYPE_CHECKING:
    from collections.abc import Iterable


class ClusterMetadata(BaseModel):
    """One Kafka cluster as seen by one stream.

    ``properties`` are librdkafka-style client properties (``security.protocol``, ``sasl.username``...). Values
    may be ``${env:NAME}`` / ``${file:PATH}`` references; they are resolved only by :meth:`client_properties`.
    ``repr`` and ``str`` mask sensitive values.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    cluster_id: str = Field(min_length=1, description="Stable logical name of the cluster.")
    bootstrap_servers: str = Field(min_length=1, description="Comma-separated host:port list.")
    properties: dict[str, str] = Field(default_factory=dict, description="Kafka client properties.")
    topics: frozenset[str] = Field(default_factory=frozenset, description="Topics of the stream on this cluster.")
    starting_offsets: StartingOffsets | None = Field(
        None, description="Overrides the pipeline's starting offsets for this cluster."
    )
    stopping_offsets: StoppingOffsets | None = Field(
        None, description="Overrides the pipeline's stopping offsets for this cluster."
    )
    schema_registry: RegistryConfig | None = Field(
        None, description="The Schema Registry of this cluster's registry-encoded topics (credentials as references)."
    )

    @field_validator("properties", mode="before")
    @classmethod
    def _stringify(cls, value: object) -> object:
        # YAML gives booleans and numbers for values such as `enable.ssl.certificate.verification: false`;
        # Kafka clients want their text form.
        if isinstance(value, dict):
            return {str(k): (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in value.items()}
        return value

    def client_properties(self) -> dict[str, str]:
        """The properties with secret references resolved. Only for building a client; never log the result."""
        return resolve_properties(self.properties, cluster_id=self.cluster_id)

    def connection(self) -> ClusterMetadata:
        """This cluster without stream-specific parts (topics), for grouping clients by cluster."""
        return self.model_copy(update={"topics": frozenset()})

    def __repr_args__(self) -> Iterable[tuple[str | None, object]]:
        for name, value in super().__repr_args__():
            yield (
                name,
                redact_properties(value) if name == "properties" and isinstance(value, dict) else value,
            )


class KafkaStream(BaseModel):
    """A logical stream: ``stream_id`` and, per ``cluster_id``, that cluster's metadata and topics."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    stream_id: str = Field(min_length=1)
    clusters: dict[str, ClusterMetadata] = Field(default_factory=dict, description="By cluster_id.")

    @field_validator("clusters")
    @classmethod
    def _keys_match_ids(cls, value: dict[str, ClusterMetadata]) -> dict[str, ClusterMetadata]:
        for key, cluster in value.items():
            if key != cluster.cluster_id:
                raise ValueError(f"cluster key {key!r} differs from its cluster_id {cluster.cluster_id!r}")
        return value

    def __hash__(self) -> int:
        return hash(self.stream_id)


def metadata_fingerprint(streams: Iterable[KafkaStream]) -> str:
    """A stable hash of the resolved layout: clusters, bootstrap servers, properties (as written, so secret
    references and not secret values) and topics. Changes exactly when a run would see different metadata.
    """
    canonical = [
        {
            "stream_id": s.stream_id,
            "clusters": {
                cid: {
                    "bootstrap_servers": c.bootstrap_servers,
                    "properties": dict(sorted(c.properties.items())),
                    "topics": sorted(c.topics),
                    "starting_offsets": c.starting_offsets.model_dump() if c.starting_offsets else None,
                    "stopping_offsets": c.stopping_offsets.model_dump() if c.stopping_offsets else None,
                    **({"schema_registry": c.schema_registry.model_dump()} if c.schema_registry else {}),
                }
                for cid, c in sorted(s.clusters.items())
            },
        }
        for s in sorted(streams, key=lambda s: s.stream_id)
    ]
    return hashlib.sha256(json.dumps(canonical, sort_keys=True).encode()).hexdigest()[:16]
