"""Real local Kafka clusters for demos, tests and benchmarks: Apache Kafka brokers in KRaft mode, one node each.

The brokers run from Kafka's own jars, fetched once from Maven Central with the machine's Maven (checksums
verified) and cached; they run on the machine's Java 17+, detached, and survive the process that started them.

Example:
    >>> from devtools.local_kafka import start_clusters, stop_clusters
    >>> clusters = start_clusters([("east", 19092), ("west", 29092)])  # doctest: +SKIP
    >>> clusters["east"].bootstrap_servers  # doctest: +SKIP
    '127.0.0.1:19092'
    >>> stop_clusters(purge=True)  # doctest: +SKIP
    ['east', 'west']
"""

from devtools.local_kafka.cluster import (
    DEFAULT_KAFKA_VERSION,
    cluster_status,
    resolve_base_dir,
    start_clusters,
    stop_clusters,
)
from devtools.local_kafka.models import ClusterEndpoint, ClusterStatus, LocalCluster
from devtools.local_kafka.properties import SASL_PASSWORD_ENV, parse_cluster_spec, sasl_plain_credentials

__all__ = [
    "DEFAULT_KAFKA_VERSION",
    "SASL_PASSWORD_ENV",
    "ClusterEndpoint",
    "ClusterStatus",
    "LocalCluster",
    "cluster_status",
    "parse_cluster_spec",
    "resolve_base_dir",
    "sasl_plain_credentials",
    "start_clusters",
    "stop_clusters",
]
