"""Topic patterns: a stream's pattern on a cluster becomes the cluster's matching topics, at every run.

A pattern matches whole topic names (``re.fullmatch``), as stream patterns match whole stream ids: ``orders-.*``
picks ``orders-eu`` but not ``old-orders-eu``. Kafka's internal topics (``__consumer_offsets``...) never match.
The expansion happens when a run resolves its metadata, so a topic created to match is in the next run's
snapshot (and fingerprint: the metadata sensor sees it); the planner then reads it like any topic new to a
tracked stream, from earliest.

Listing topics needs the broker; this module takes the listing as a function so that ``metadata`` never imports
``kafka`` (the dependency stays one way).
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING

from dynamic_kafka.errors import ClusterUnreachableError
from dynamic_kafka.metadata.models import metadata_fingerprint
from dynamic_kafka.metadata.snapshot import MetadataSnapshot

if TYPE_CHECKING:
    from collections.abc import Callable

    from dynamic_kafka.metadata.models import ClusterMetadata

log = logging.getLogger(__name__)


def expand_patterns(
    snapshot: MetadataSnapshot,
    list_topics: Callable[[ClusterMetadata], list[str]],
    *,
    skip_unreachable: bool,
) -> MetadataSnapshot:
    """``snapshot`` with every cluster's topic pattern resolved: its matching topics join the cluster's topics.

    Each cluster with a pattern is listed once, whatever the number of streams or patterns on it. A snapshot
    without patterns is returned as it is (no broker is contacted).

    Args:
        snapshot: the resolved subscription.
        list_topics: a cluster's topic names (``dynamic_kafka.kafka.client.list_topic_names``).
        skip_unreachable: the pipeline's ``skip_unreachable_clusters``: an unreachable cluster is recorded in
            :attr:`MetadataSnapshot.unresolved` (the planner skips it and keeps its offsets) instead of failing.

    Raises:
        KafkaClientError: a cluster could not be listed (``ClusterUnreachableError`` unless skipped).
    """
    patterned = {
        cid: cluster
        for stream in snapshot.streams.values()
        for cid, cluster in stream.clusters.items()
        if cluster.topic_pattern is not None
    }
    if not patterned:
        return snapshot
    names: dict[str, list[str]] = {}
    unresolved: dict[str, str] = {}
    for cid, cluster in sorted(patterned.items()):
        try:
            names[cid] = list_topics(cluster)
        except ClusterUnreachableError as e:
            if not skip_unreachable:
                raise
            log.warning("cluster %r skipped: its topics could not be listed to match a pattern: %s", cid, e)
            unresolved[cid] = str(e)
    streams = {}
    for stream_id, stream in snapshot.streams.items():
        clusters = {}
        for cid, cluster in stream.clusters.items():
            if cluster.topic_pattern is not None and cid in names:
                pattern = re.compile(cluster.topic_pattern)
                matched = {name for name in names[cid] if pattern.fullmatch(name)}
                cluster = cluster.with_topics(cluster.topics | matched)
            clusters[cid] = cluster
        streams[stream_id] = stream.with_clusters(clusters)
    return MetadataSnapshot(streams=streams, fingerprint=metadata_fingerprint(streams.values()), unresolved=unresolved)
