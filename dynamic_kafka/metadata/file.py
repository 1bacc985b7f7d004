"""The file-based metadata service: a YAML file of clusters and streams, re-read on every call.

Shape::

    clusters:
      east:
        bootstrap_servers: "127.0.0.1:19092"
        properties: {security.protocol: SASL_PLAINTEXT, sasl.password: "${env:EAST_KAFKA_PASSWORD}"}
        starting_offsets: latest        # optional per-cluster override
        schema_registry:                # optional: registry-encoded topics of this cluster
          url: "http://127.0.0.1:18081/apis/ccompat/v7"
          username: "${env:EAST_SR_USER}"
          password: "${env:EAST_SR_PASSWORD}"
    streams:
      orders:
        east: [orders]
        west: [orders-v2]
      audit:
        east: {pattern: "audit-.*"}             # every topic whose whole name matches, found at each run
        west: {topics: {audit: [0, 1, 2]}}      # only these partitions of `audit`

A placement is a list of topics, or a mapping with ``pattern`` and/or ``topics`` (a list of topics, or topics to
partition sets; ``null`` for a topic means all its partitions).

Editing the file is how an operator migrates a stream: the next call sees the change.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import (
    Discriminator,
    Field,
    Tag,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from dynamic_kafka.config.loader import describe_validation_error, expand_references, load_yaml
from dynamic_kafka.config.models import StringProperties, checked_regex
from dynamic_kafka.errors import ConfigError, MetadataServiceError
from dynamic_kafka.frozen import FrozenModel
from dynamic_kafka.initializers import StartingOffsets, StoppingOffsets
from dynamic_kafka.metadata.models import ClusterMetadata, KafkaStream
from dynamic_kafka.metadata.service import KafkaMetadataService
from dynamic_kafka.registry.config import RegistryConfig
from dynamic_kafka.secrets import masked_repr_args

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable


class ClusterEntry(FrozenModel):
    """One entry of the file's ``clusters`` section."""

    bootstrap_servers: str = Field(min_length=1)
    properties: StringProperties = Field(default_factory=dict)
    starting_offsets: StartingOffsets | None = None
    stopping_offsets: StoppingOffsets | None = None
    schema_registry: RegistryConfig | None = None

    def __repr_args__(self) -> Iterable[tuple[str | None, Any]]:
        return masked_repr_args(super().__repr_args__())


class Placement(FrozenModel):
    """A stream's topics on one cluster, in the mapping form: a topic pattern and/or topics with partition sets."""

    pattern: str | None = Field(
        None, min_length=1, description="A regex that whole topic names match (Python `re.fullmatch`)."
    )
    topics: list[str] | dict[str, list[Annotated[int, Field(ge=0)]] | None] = Field(
        default_factory=list, description="Topics, or topics to the partitions to read (null: all)."
    )

    _pattern_compiles = field_validator("pattern")(classmethod(lambda cls, v: checked_regex(v)))

    @field_validator("topics")
    @classmethod
    def _partition_sets_not_empty(
        cls, value: list[str] | dict[str, list[int] | None]
    ) -> list[str] | dict[str, list[int] | None]:
        if isinstance(value, dict):
            empty = sorted(t for t, parts in value.items() if parts is not None and not parts)
            if empty:
                raise ValueError(
                    f"topic(s) {', '.join(empty)} list no partitions; list some, or write null to read all"
                )
        return value

    def topic_names(self) -> list[str]:
        """The named topics (the pattern's are found at each run)."""
        return list(self.topics)

    def partition_sets(self) -> dict[str, frozenset[int]]:
        """The topics restricted to a partition set."""
        if isinstance(self.topics, list):
            return {}
        return {t: frozenset(parts) for t, parts in self.topics.items() if parts is not None}

    @property
    def empty(self) -> bool:
        """Whether the placement names neither a pattern nor a topic."""
        return self.pattern is None and not self.topics


def _placement_form(value: object) -> str:
    return "form-mapping" if isinstance(value, dict | Placement) else "form-list"


# Tagged by form, so a wrong placement gets the one error of the form it was written in, not one per form. The
# tags appear in pydantic's error locations; the config's error text leaves out every part named ``form-*``.
PlacementEntry = Annotated[
    Annotated[list[str], Tag("form-list")] | Annotated[Placement, Tag("form-mapping")],
    Discriminator(_placement_form),
]


class MetadataFile(FrozenModel):
    """The whole metadata file: clusters by id, and per stream, the topics on each cluster."""

    clusters: dict[str, ClusterEntry] = Field(default_factory=dict)
    streams: dict[str, dict[str, PlacementEntry]] = Field(default_factory=dict)

    # A field validator, not a model validator: the error then names the key `streams` and shows only that
    # section, never the start of the whole file (which can hold cluster properties).
    @field_validator("streams")
    @classmethod
    def _clusters_defined(
        cls, streams: dict[str, dict[str, list[str] | Placement]], info: ValidationInfo
    ) -> dict[str, dict[str, list[str] | Placement]]:
        clusters = info.data.get("clusters")  # absent when `clusters` itself is invalid (reported on its own)
        for stream_id, placements in streams.items():
            for cluster_id, topics in placements.items():
                if clusters is not None and cluster_id not in clusters:
                    defined = ", ".join(sorted(clusters)) or "(none)"
                    raise ValueError(
                        f"stream {stream_id!r} uses cluster {cluster_id!r}, which is not defined under `clusters` "
                        f"(defined: {defined}); add it there or fix the name"
                    )
                if not topics or (isinstance(topics, Placement) and topics.empty):
                    raise ValueError(f"stream {stream_id!r} lists no topics on cluster {cluster_id!r}")
        return streams

    def cluster(self, cluster_id: str, topics: Collection[str] | Placement = ()) -> ClusterMetadata:
        """Return this entry as ``ClusterMetadata`` with the given topics (a list, or a placement's pattern, topics
        and partition sets).
        """
        entry = self.clusters[cluster_id]
        placement = topics if isinstance(topics, Placement) else Placement(topics=list(topics))
        return ClusterMetadata.model_validate(
            {
                "cluster_id": cluster_id,
                "bootstrap_servers": entry.bootstrap_servers,
                "properties": entry.properties,
                "topics": frozenset(placement.topic_names()),
                "topic_pattern": placement.pattern,
                "partitions": placement.partition_sets(),
                "starting_offsets": entry.starting_offsets,
                "stopping_offsets": entry.stopping_offsets,
                "schema_registry": entry.schema_registry,
            }
        )

    def to_streams(self) -> dict[str, KafkaStream]:
        """Return every stream of the document, keyed by stream id."""
        return {
            stream_id: KafkaStream(
                stream_id=stream_id,
                clusters={cid: self.cluster(cid, topics) for cid, topics in placements.items()},
            )
            for stream_id, placements in self.streams.items()
        }


def parse_metadata_file(path: Path) -> MetadataFile:
    """Reads and validates a metadata file.

    Raises:
        MetadataServiceError: the file does not exist (not retriable).
        ConfigError: the file is malformed or invalid; the message names the key and the fix.
    """
    if not path.exists():
        # Not retriable: a file replaced by a rename is never missing, so a missing one is a config problem.
        raise MetadataServiceError(
            f"metadata file {str(path)!r} does not exist.",
            hint="Create it or fix metadata_service.path.",
            retriable=False,
        )
    raw = load_yaml(path)
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError("the metadata file must be a mapping with `clusters` and `streams`.", source=str(path))
    try:
        return MetadataFile.model_validate(expand_references(raw, path))
    except ValidationError as e:
        raise describe_validation_error(e, str(path), MetadataFile) from None


class FileMetadataService(KafkaMetadataService):
    """Streams from a YAML file, re-read on every call so edits take effect at the next run.

    Example:
        >>> service = FileMetadataService("metadata.yaml")  # doctest: +SKIP
        >>> service.describe_streams(["orders"])["orders"].clusters.keys()  # doctest: +SKIP
        dict_keys(['east', 'west'])
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def _read(self) -> MetadataFile:
        return parse_metadata_file(self.path)

    def get_all_streams(self) -> set[KafkaStream]:
        """Return every stream of the file as it is now."""
        return set(self._read().to_streams().values())

    def describe_streams(self, stream_ids: Collection[str]) -> dict[str, KafkaStream]:
        """Return the named streams that the file lists now (unknown ids are left out)."""
        streams = self._read().to_streams()
        return {i: streams[i] for i in stream_ids if i in streams}

    def is_cluster_active(self, cluster_id: str) -> bool:
        """Tell whether any stream of the file lists the cluster now."""
        return any(cluster_id in placements for placements in self._read().streams.values())

    def describe_cluster(self, cluster_id: str) -> ClusterMetadata | None:
        """Return how to reach a cluster the file names, listed by a stream or not; None if absent."""
        parsed = self._read()
        return parsed.cluster(cluster_id) if cluster_id in parsed.clusters else None
