"""A test session's Kafka clusters: local single-node KRaft clusters on free ports, or bring-your-own ones.

Set ``DYNAMIC_KAFKA_TEST_CLUSTERS='{"east": "host:port", "west": "host:port"}'`` to run tests against clusters
that already exist (PLAINTEXT listeners); nothing is started or stopped then.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import TYPE_CHECKING

from dynamic_kafka._toolchain.process import free_port
from dynamic_kafka.errors import LocalKafkaError
from dynamic_kafka.local_kafka import ClusterEndpoint, LocalCluster, start_clusters, stop_clusters

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence
    from pathlib import Path

TEST_CLUSTERS_ENV = "DYNAMIC_KAFKA_TEST_CLUSTERS"


def clusters_from_env(environ: Mapping[str, str] = os.environ) -> dict[str, ClusterEndpoint] | None:
    """Return the bring-your-own clusters named in ``$DYNAMIC_KAFKA_TEST_CLUSTERS``, or None if it is unset.

    Raises:
        LocalKafkaError: the variable is not a JSON object of name to ``host:port`` strings.
    """
    raw = environ.get(TEST_CLUSTERS_ENV, "").strip()
    if not raw:
        return None
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as e:
        raise LocalKafkaError(f"${TEST_CLUSTERS_ENV} is not JSON: {e}.") from e
    if not isinstance(parsed, dict) or not parsed or not all(isinstance(v, str) and v for v in parsed.values()):
        raise LocalKafkaError(
            f'${TEST_CLUSTERS_ENV} must be a JSON object such as {{"east": "host:port", "west": "host:port"}}.'
        )
    return {name: ClusterEndpoint(name=name, bootstrap_servers=bootstrap) for name, bootstrap in parsed.items()}


def distinct_free_ports(count: int) -> list[int]:
    """Return ``count`` different ports that are free now."""
    ports: set[int] = set()
    while len(ports) < count:
        ports.add(free_port())
    return sorted(ports)


@contextlib.contextmanager
def local_test_clusters(
    names: Sequence[str], base_dir: Path, *, sasl_plain: tuple[str, str] | None = None
) -> Iterator[dict[str, LocalCluster]]:
    """Start one local cluster per name on free ports under ``base_dir``; stop and delete them afterwards."""
    specs = list(zip(names, distinct_free_ports(len(names)), strict=True))
    clusters = start_clusters(specs, base_dir=base_dir, sasl_plain=sasl_plain)
    try:
        yield clusters
    finally:
        stop_clusters(list(clusters), base_dir=base_dir, purge=True)
