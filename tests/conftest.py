"""Session fixtures shared by every test suite: real local Kafka clusters and one Spark session.

Both start only when a test asks for them, so unit tests start no broker and no JVM. Set
``DYNAMIC_KAFKA_TEST_CLUSTERS='{"east": "host:port", "west": "host:port"}'`` to use existing clusters instead.
"""

from __future__ import annotations

import os
import secrets
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from dynamic_kafka.config import SparkConfig
from dynamic_kafka.spark.session import build_spark_session, stop_spark_session
from dynamic_kafka.testing.clusters import clusters_from_env, local_test_clusters
from dynamic_kafka.testing.registries import local_test_registries

if TYPE_CHECKING:
    from collections.abc import Iterator

    from dynamic_kafka.local_kafka import ClusterEndpoint, LocalCluster
    from dynamic_kafka.local_postgres import LocalPostgres
    from dynamic_kafka.local_registry import LocalRegistry
    from dynamic_kafka.local_s3 import LocalS3Server


@pytest.fixture(scope="session")
def kafka_clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ClusterEndpoint]]:
    """Two clusters, "east" and "west" (``LocalCluster``s unless brought by $DYNAMIC_KAFKA_TEST_CLUSTERS)."""
    brought = clusters_from_env()
    if brought is not None:
        yield brought
        return
    with local_test_clusters(["east", "west"], tmp_path_factory.mktemp("local-kafka")) as clusters:
        yield dict(clusters)


@pytest.fixture(scope="session")
def sasl_password() -> str:
    """The random password of ``sasl_cluster``'s user ``ingest``."""
    return secrets.token_urlsafe(18)


@pytest.fixture(scope="session")
def sasl_cluster(tmp_path_factory: pytest.TempPathFactory, sasl_password: str) -> Iterator[LocalCluster]:
    """One more local cluster whose client listener requires SASL/PLAIN (user ``ingest``, ``sasl_password``)."""
    if clusters_from_env() is not None:
        pytest.skip("bring-your-own clusters ($DYNAMIC_KAFKA_TEST_CLUSTERS) include no SASL cluster")
    base_dir = tmp_path_factory.mktemp("local-kafka-sasl")
    with local_test_clusters(["secured"], base_dir, sasl_plain=("ingest", sasl_password)) as clusters:
        yield clusters["secured"]


@pytest.fixture(scope="session")
def schema_registries(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, LocalRegistry]]:
    """Two local Schema Registries (Apicurio, Confluent-compatible API), "east" and "west", on free ports."""
    with local_test_registries(["east", "west"], tmp_path_factory.mktemp("local-registry")) as registries:
        yield registries


@pytest.fixture(scope="session")
def postgres() -> Iterator[LocalPostgres]:
    """A local PostgreSQL (Debian's server) on a free loopback port, purged at the end of the session.

    Its folder is made with ``mkdtemp`` directly under the system temp folder, not under pytest's: as root the
    server runs as the ``postgres`` user, who cannot enter pytest's 0700 ``/tmp/pytest-of-root``.
    """
    from dynamic_kafka._toolchain.process import free_port
    from dynamic_kafka.local_postgres import start_postgres, stop_postgres

    base = Path(tempfile.mkdtemp(prefix="dynamic-kafka-pg-"))
    base.chmod(0o755)
    try:
        yield start_postgres(base_dir=base, port=free_port(), database="dagster")
    finally:
        stop_postgres(base_dir=base, purge=True)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The process-wide Spark session (Delta + Kafka connector, UI off), stopped at the end of the session."""
    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    settings = SparkConfig(master="local[2]", ui_enabled=False, conf={"spark.sql.warehouse.dir": str(warehouse)})
    # With Hadoop's S3A connector, so the object-storage tests share this session (its jars are recorded once).
    session = build_spark_session(settings, s3a=True)
    yield session
    stop_spark_session()


# The environment variables the S3 tests' storage blocks reference (as a user's config would).
S3_KEY_ENV = "DYNAMIC_KAFKA_TEST_S3_KEY_ID"
S3_SECRET_ENV = "DYNAMIC_KAFKA_TEST_S3_SECRET"


@pytest.fixture(scope="session")
def local_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalS3Server]:
    """The local S3 API server (moto's, on loopback) with bucket ``lake``, started once per test session.

    Exports a random access key and secret in ``$DYNAMIC_KAFKA_TEST_S3_KEY_ID`` / ``$..._SECRET`` (moto accepts
    any), which :func:`s3_storage` references, so runs in child processes reach it too and the secret tests can
    look for the secret's value.
    """
    from dynamic_kafka.local_s3 import start_server, stop_server
    from dynamic_kafka.testing.clusters import distinct_free_ports

    base = tmp_path_factory.mktemp("local-s3")
    (port,) = distinct_free_ports(1)
    server = start_server(port=port, base_dir=base, buckets=["lake"])
    os.environ[S3_KEY_ENV] = "AKIA" + secrets.token_hex(8).upper()
    os.environ[S3_SECRET_ENV] = "s3-secret-" + secrets.token_urlsafe(24)
    try:
        yield server
    finally:
        stop_server(base_dir=base, purge=True)
        os.environ.pop(S3_KEY_ENV, None)
        os.environ.pop(S3_SECRET_ENV, None)


@pytest.fixture
def s3_storage(local_s3: LocalS3Server) -> dict[str, Any]:
    """A pipeline's ``storage`` block for the local S3 server, credentials as ``${env:...}`` references."""
    return {
        "endpoint": local_s3.endpoint,
        "region": "us-east-1",
        "path_style": True,
        "access_key_id": f"${{env:{S3_KEY_ENV}}}",
        "secret_access_key": f"${{env:{S3_SECRET_ENV}}}",
    }


_exit_status: list[int] = []


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _exit_status.append(int(exitstatus))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Leaves with pytest's own exit code once everything is reported.

    The native thread pools of pyarrow and delta-rs (which the tests use to read Delta tables) were seen to abort
    an interpreter's shutdown now and then (``terminate called without an active exception``): after a green run
    that would turn into a failed CI. The CLI exits the same way (see ``dynamic_kafka.cli.main.run``).
    """
    if _exit_status:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_exit_status[0])
