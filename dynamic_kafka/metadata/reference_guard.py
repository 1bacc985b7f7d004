"""Which metadata services may make the host resolve secret references.

A ``${env:NAME}`` / ``${file:PATH}`` reference is resolved on this host, with this host's environment and files,
and the result is sent to the cluster the metadata names. Honouring every reference a service returns would let
whoever controls the service make the host send ``${env:ANY_VAR}`` (or a private key file) to a broker of their
choice. So references are trusted only where the user wrote them:

- the project config itself (the ``single_cluster`` service's properties) and the ``file`` metadata service it
  names: the user's own files, resolved as written;
- every other service (a ``python`` import path, a service a program passes in, a future remote service): each
  reference must be listed in the project config's ``secret_references`` (:class:`SecretReferencePolicy`), else the
  call fails with a :class:`~dynamic_kafka.errors.ConfigError` naming the cluster and the key. Literal values are
  not affected: the service already knows them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dynamic_kafka.metadata.service import KafkaMetadataService
from dynamic_kafka.secrets import SecretReferencePolicy, check_references

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable

    from dynamic_kafka.metadata.models import ClusterMetadata, KafkaStream


class ReferenceGuard(KafkaMetadataService):
    """Wraps an untrusted metadata service: every cluster it returns is checked against ``policy`` before anything
    can build a client from it.

    Args:
        inner: the service whose answers are checked.
        policy: the references it may use.
        source: how error messages name the service (e.g. "metadata service 'pkg.mod:factory'").
    """

    def __init__(self, inner: KafkaMetadataService, policy: SecretReferencePolicy, source: str) -> None:
        self.inner = inner
        self.policy = policy
        self.source = source

    def _check(self, clusters: Iterable[ClusterMetadata]) -> None:
        for cluster in clusters:
            check_references(cluster.properties, cluster_id=cluster.cluster_id, policy=self.policy, source=self.source)

    def get_all_streams(self) -> set[KafkaStream]:
        """Return the inner service's streams, once their secret references are checked."""
        streams = self.inner.get_all_streams()
        self._check(c for s in streams for c in s.clusters.values())
        return streams

    def describe_streams(self, stream_ids: Collection[str]) -> dict[str, KafkaStream]:
        """Return the inner service's named streams, once their secret references are checked."""
        streams = self.inner.describe_streams(stream_ids)
        self._check(c for s in streams.values() for c in s.clusters.values())
        return streams

    def is_cluster_active(self, cluster_id: str) -> bool:
        """Ask the inner service whether the cluster is active."""
        return self.inner.is_cluster_active(cluster_id)

    def describe_cluster(self, cluster_id: str) -> ClusterMetadata | None:
        """Return the inner service's cluster, once its secret references are checked."""
        cluster = self.inner.describe_cluster(cluster_id)
        if cluster is not None:
            self._check([cluster])
        return cluster

    def close(self) -> None:
        """Close the inner service."""
        self.inner.close()
