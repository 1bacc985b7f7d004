"""A test session's Kafka clusters: local single-node KRaft clusters on free ports, or bring-your-own ones.

Set ``DYNAMIC_KAFKA_TEST_CLUSTERS='{"east": "host:port", "west": "host:port"}'`` to run tests against clusters
that already exist (PLAINTEXT listeners); nothing is started or stopped then.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import TYPE_CHECKING, Literal

from devtools.errors import LocalKafkaError
from devtools.local_kafka import ClusterEndpoint, LocalCluster, start_clusters, stop_clusters
from devtools.local_kafka.security import SecurityModes, store_password
from devtools.testing.kafka import drop_producers_of
from dynamic_kafka._toolchain.process import free_port

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence
    from pathlib import Path

TEST_CLUSTERS_ENV = "DYNAMIC_KAFKA_TEST_CLUSTERS"
THROWAWAY_STOP_S = 1.0
"""How long a test's service (deleted right after it stops) may shut down cleanly before it is killed: a clean
shutdown keeps data that is deleted anyway, and the session's services stopping one by one at its end took about
16 s of a suite run."""


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
    names: Sequence[str],
    base_dir: Path,
    *,
    sasl_plain: tuple[str, str] | None = None,
    security: SecurityModes | None = None,
    scram_password: str | None = None,
) -> Iterator[dict[str, LocalCluster]]:
    """Start one local cluster per name on free ports under ``base_dir``; stop and delete them afterwards."""
    specs = list(zip(names, distinct_free_ports(len(names)), strict=True))
    clusters = start_clusters(
        specs, base_dir=base_dir, sasl_plain=sasl_plain, security=security, scram_password=scram_password
    )
    try:
        yield clusters
    finally:
        drop_producers_of(c.bootstrap_servers for c in clusters.values())
        stop_clusters(list(clusters), base_dir=base_dir, purge=True, stop_timeout_s=THROWAWAY_STOP_S)


SecuredForm = Literal["pem", "pkcs12", "jks", "jaas"]


def secured_properties(
    cluster: LocalCluster, mode: str, *, form: SecuredForm = "pem", scram_password_ref: str = ""
) -> dict[str, str]:
    """Client properties (metadata form) for one of ``cluster``'s secured listeners; its bootstrap servers are
    ``cluster.secure_listeners[mode]``.

    Args:
        cluster: a cluster started with :class:`~devtools.local_kafka.security.SecurityModes`.
        mode: ``tls``, ``mtls``, ``scram`` or ``oauthbearer``.
        form: how TLS material and SASL logins are written: ``pem`` (librdkafka's PEM files and
            ``sasl.username``), ``pkcs12`` (Java PKCS12 stores, with the CA also as PEM for the driver), ``jks``
            (Java JKS stores, likewise) or ``jaas`` (PEM files and the Java ``sasl.jaas.config``).
        scram_password_ref: the SCRAM password as written in metadata (a ``${env:..}`` reference).
    """
    tls_dir = cluster.tls_dir
    props: dict[str, str] = {}
    if mode in {"tls", "mtls", "scram"}:
        assert tls_dir is not None, "the cluster has no TLS listener"
        password = f"${{file:{store_password(tls_dir)}}}"
        props["security.protocol"] = "SASL_SSL" if mode == "scram" else "SSL"
        if form in {"pem", "jaas"}:
            props["ssl.ca.location"] = str(tls_dir / "ca.pem")
            if mode == "mtls":
                props["ssl.certificate.location"] = props["ssl.key.location"] = str(tls_dir / "client.pem")
        else:
            store_type, suffix = ("PKCS12", "p12") if form == "pkcs12" else ("JKS", "jks")
            props["ssl.truststore.location"] = str(tls_dir / f"truststore.{suffix}")
            props["ssl.truststore.type"] = store_type
            props["ssl.truststore.password"] = password
            # The driver reads no JKS/PKCS12 trust store: the same CA as PEM, as the translation's error advises.
            props["ssl.ca.location"] = str(tls_dir / "ca.pem")
            if mode == "mtls":
                props["ssl.keystore.location"] = str(tls_dir / f"client.{suffix}")
                props["ssl.keystore.type"] = store_type
                props["ssl.keystore.password"] = password
                if form == "jks":
                    # Likewise for the key store: librdkafka reads the PKCS12 export.
                    props["ssl.certificate.location"] = props["ssl.key.location"] = str(tls_dir / "client.pem")
    if mode == "scram":
        props["sasl.mechanism"] = "SCRAM-SHA-512"
        if form == "jaas":
            props["sasl.jaas.config"] = (
                "org.apache.kafka.common.security.scram.ScramLoginModule required "
                f'username="{cluster.scram_user}" password="{scram_password_ref}";'
            )
        else:
            props["sasl.username"] = cluster.scram_user or ""
            props["sasl.password"] = scram_password_ref
    if mode == "oauthbearer":
        props["security.protocol"] = "SASL_PLAINTEXT"
        props["sasl.mechanism"] = "OAUTHBEARER"
        if form == "jaas":
            props["sasl.jaas.config"] = (
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
                'unsecuredLoginStringClaim_sub="reader";'
            )
        else:
            props["enable.sasl.oauthbearer.unsecure.jwt"] = "true"
            props["sasl.oauthbearer.config"] = "principal=reader"
    return props
