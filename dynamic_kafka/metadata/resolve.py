"""Resolving metadata for a run: the service built from config, bounded retries, and what to ask each broker."""

from __future__ import annotations

import importlib
import logging
import time
from collections.abc import Callable
from typing import TypeVar

from dynamic_kafka.config import (
    FileMetadataServiceConfig,
    MetadataServiceConfig,
    PipelineConfig,
    PythonMetadataServiceConfig,
    RetryConfig,
    SingleClusterMetadataServiceConfig,
)
from dynamic_kafka.errors import ConfigError, MetadataServiceError
from dynamic_kafka.kafka import ClusterRequest
from dynamic_kafka.metadata.file import FileMetadataService
from dynamic_kafka.metadata.models import ClusterMetadata, metadata_fingerprint
from dynamic_kafka.metadata.service import KafkaMetadataService
from dynamic_kafka.metadata.single_cluster import SingleClusterMetadataService
from dynamic_kafka.metadata.subscriber import subscriber_for
from dynamic_kafka.plan.planner import effective_initializers
from dynamic_kafka.plan.snapshots import MetadataSnapshot, StateSnapshot

log = logging.getLogger(__name__)
T = TypeVar("T")


def build_metadata_service(config: MetadataServiceConfig) -> KafkaMetadataService:
    """The metadata service a project config names.

    Raises:
        ConfigError: a Python import path that cannot be imported or does not build a KafkaMetadataService.
    """
    if isinstance(config, FileMetadataServiceConfig):
        return FileMetadataService(config.path)
    if isinstance(config, SingleClusterMetadataServiceConfig):
        return SingleClusterMetadataService(
            ClusterMetadata(
                cluster_id=config.cluster_id, bootstrap_servers=config.bootstrap_servers, properties=config.properties
            )
        )
    assert isinstance(config, PythonMetadataServiceConfig)
    module_name, _, attribute = config.import_path.partition(":")
    try:
        target: object = importlib.import_module(module_name)
        for part in attribute.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as e:
        raise ConfigError(
            f"metadata_service.import_path {config.import_path!r} cannot be loaded: {e}.",
            hint="Use 'package.module:factory' for an importable module on PYTHONPATH.",
        ) from e
    if not callable(target):
        raise ConfigError(f"metadata_service.import_path {config.import_path!r} is not callable.")
    service = target(**config.args)
    if not isinstance(service, KafkaMetadataService):
        raise ConfigError(
            f"metadata_service.import_path {config.import_path!r} returned {type(service).__name__}, "
            "not a KafkaMetadataService.",
            hint="Subclass dynamic_kafka.metadata.service.KafkaMetadataService.",
        )
    return service


def with_retries(call: Callable[[], T], retries: RetryConfig, what: str) -> T:
    """Calls ``call``, retrying retriable MetadataServiceErrors with exponential backoff, then re-raises."""
    for attempt in range(1, retries.attempts + 1):
        try:
            return call()
        except MetadataServiceError as e:
            if attempt == retries.attempts:
                raise MetadataServiceError(
                    f"{what} failed {retries.attempts} time(s); last error: {e}",
                    hint="Nothing was written. Check the metadata service and run again.",
                ) from e
            delay = retries.backoff_seconds * 2 ** (attempt - 1)
            log.warning(
                "%s failed (attempt %d of %d), retrying in %.1fs: %s", what, attempt, retries.attempts, delay, e
            )
            time.sleep(delay)
    raise AssertionError("unreachable: the loop returns or raises")


def resolve_metadata(
    service: KafkaMetadataService, pipeline: PipelineConfig, *, source: str | None = None
) -> MetadataSnapshot:
    """Resolves the pipeline's subscription once, with the pipeline's retry policy."""
    subscriber = subscriber_for(pipeline, source=source)
    streams = with_retries(lambda: subscriber.subscribe(service), pipeline.metadata_retries, "resolving metadata")
    return MetadataSnapshot(streams=streams, fingerprint=metadata_fingerprint(streams.values()))


def cluster_requests(
    pipeline: PipelineConfig,
    metadata: MetadataSnapshot,
    state: StateSnapshot,
    service: KafkaMetadataService,
) -> list[ClusterRequest]:
    """What to ask each cluster: active clusters for their subscribed topics (required), and, best effort, the
    clusters of partitions that left the metadata, to drain them or report what was left unread."""
    subscribed = metadata.topics()  # built once: the state loop below looks every partition up in it
    topics_by_cluster: dict[str, set[str]] = {}
    for cluster_id, topic in subscribed:
        topics_by_cluster.setdefault(cluster_id, set()).add(topic)
    clusters = metadata.clusters()
    requests = []
    for cluster_id, topics in sorted(topics_by_cluster.items()):
        starting, stopping = effective_initializers(pipeline, metadata, cluster_id)
        requests.append(
            ClusterRequest(
                cluster=clusters[cluster_id],
                topics=frozenset(topics),
                starting=starting,
                stopping=stopping,
                required=True,
                skip_unreachable=pipeline.skip_unreachable_clusters,
            )
        )
    removed: dict[str, set[str]] = {}
    bootstrap: dict[str, str] = {}
    for key, row in state.partitions.items():
        if row.status == "active" and (key.cluster_id, key.topic) not in subscribed:
            removed.setdefault(key.cluster_id, set()).add(key.topic)
            bootstrap.setdefault(key.cluster_id, row.bootstrap_servers)
    for cluster_id, topics in sorted(removed.items()):
        cluster = clusters.get(cluster_id) or _known_cluster(service, cluster_id, bootstrap[cluster_id])
        if cluster is None:
            continue
        existing = next((r for r in requests if r.cluster.cluster_id == cluster_id), None)
        if existing is not None:
            requests[requests.index(existing)] = existing.model_copy(update={"topics": existing.topics | topics})
        else:
            requests.append(
                ClusterRequest(
                    cluster=cluster,
                    topics=frozenset(topics),
                    starting=pipeline.starting_offsets,
                    stopping=pipeline.stopping_offsets,
                    required=False,
                    skip_unreachable=True,
                )
            )
    return requests


def _known_cluster(service: KafkaMetadataService, cluster_id: str, bootstrap: str) -> ClusterMetadata | None:
    """A removed cluster's connection: from the service if it still knows it, else its last bootstrap servers."""
    try:
        known = service.describe_cluster(cluster_id)
    except MetadataServiceError:
        known = None
    if known is not None:
        return known
    if not bootstrap:
        return None
    return ClusterMetadata(cluster_id=cluster_id, bootstrap_servers=bootstrap)
