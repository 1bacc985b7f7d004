"""The consumer-group commit after a run: every split's stop offset, on all the run's clusters at once.

Monitoring only: the state table holds the offsets a run commits, so a cluster whose commit fails is a warning (and
its outcome in the run summary), never a failed run.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from dynamic_kafka.errors import DynamicKafkaError
from dynamic_kafka.kafka.client import KafkaAdmin
from dynamic_kafka.kafka.statistics import submit_in_context
from dynamic_kafka.model.summary import GroupCommit

if TYPE_CHECKING:
    from collections.abc import Mapping

    from dynamic_kafka.metadata.models import ClusterMetadata
    from dynamic_kafka.model.plan import Plan

logger = logging.getLogger(__name__)


def commit_consumer_group(
    group: str | None, plan: Plan, clusters: Mapping[str, ClusterMetadata]
) -> tuple[GroupCommit, ...]:
    """Gives ``group`` every split's stop offset, on all clusters at once; returns each cluster's outcome, in
    cluster order (nothing when there is no group).
    """
    if group is None:
        return ()
    by_cluster: dict[str, dict[tuple[str, int], int]] = {}
    for s in plan.splits:
        by_cluster.setdefault(s.cluster_id, {})[(s.topic, s.partition)] = s.stop_offset
    targets = [(clusters[c], offsets) for c, offsets in sorted(by_cluster.items()) if c in clusters]
    if not targets:
        return ()
    with ThreadPoolExecutor(max_workers=len(targets), thread_name_prefix="dynamic-kafka-group-commit") as pool:
        futures = [submit_in_context(pool, _commit_group, group, *target) for target in targets]
        return tuple(f.result() for f in futures)


def _commit_group(group: str, cluster: ClusterMetadata, offsets: Mapping[tuple[str, int], int]) -> GroupCommit:
    """Commits one cluster's offsets to the group; a failure is a warning (the group is for monitoring only)."""
    try:
        with KafkaAdmin(cluster) as admin:
            admin.commit_group_offsets(group, offsets)
    except DynamicKafkaError as e:
        logger.warning(
            "consumer group %r: offsets not committed on cluster %r (monitoring only): %s",
            group,
            cluster.cluster_id,
            e,
        )
        return GroupCommit(cluster_id=cluster.cluster_id, group=group, committed=False, error=str(e))
    return GroupCommit(cluster_id=cluster.cluster_id, group=group, committed=True)
