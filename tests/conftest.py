"""Session fixtures shared by every test suite: real local Kafka clusters, one Spark session and one Spark Connect
server.

Each starts only when a test asks for it, so unit tests start no broker and no JVM. Set
``DYNAMIC_KAFKA_TEST_CLUSTERS='{"east": "host:port", "west": "host:port"}'`` to use existing clusters instead.
"""

from __future__ import annotations

import os
import secrets
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from devtools.local_spark_connect import start_server, stop_server
from devtools.testing.clusters import THROWAWAY_STOP_S, clusters_from_env, local_test_clusters
from dynamic_kafka._toolchain.process import free_port
from dynamic_kafka.config.models import SparkConfig
from dynamic_kafka.spark.connect_token import TOKEN_ENV
from dynamic_kafka.spark.session import build_spark_session, stop_spark_session
from tests.support.registries import local_test_registries
from tests.support.wheel import BuiltWheel, build_wheel

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from devtools.local_kafka import ClusterEndpoint, LocalCluster
    from devtools.local_postgres import LocalPostgres
    from devtools.local_registry import LocalRegistry
    from devtools.local_s3 import LocalS3Server
    from devtools.local_spark_connect import ServerInfo
    from devtools.testing.collector import LocalCollector
    from devtools.testing.pushgateway import LocalPushgateway


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
def scram_password() -> str:
    """The random password of ``secured_broker``'s SCRAM user ``reader``."""
    return secrets.token_urlsafe(18)


@pytest.fixture(scope="session")
def secured_broker(tmp_path_factory: pytest.TempPathFactory, scram_password: str) -> Iterator[LocalCluster]:
    """One more local broker with a secured listener per mode (TLS, mutual TLS, SCRAM-SHA-512 over TLS,
    OAUTHBEARER unsecured JWT) besides its PLAINTEXT one; see ``cluster.secure_listeners`` and
    :func:`devtools.testing.clusters.secured_properties`. One broker for every mode keeps the session short.
    """
    from devtools.local_kafka.security import SecurityModes

    if clusters_from_env() is not None:
        pytest.skip("bring-your-own clusters ($DYNAMIC_KAFKA_TEST_CLUSTERS) include no secured listeners")
    modes = SecurityModes(tls=True, mtls=True, scram_user="reader", oauthbearer=True)
    base_dir = tmp_path_factory.mktemp("local-kafka-secured")
    with local_test_clusters(["modes"], base_dir, security=modes, scram_password=scram_password) as clusters:
        yield clusters["modes"]


@pytest.fixture(scope="session")
def kerberos_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A local broker with a SASL/GSSAPI listener and its own MIT KDC (``kerberos_dir`` holds ``krb5.conf`` and
    the client's keytab, principal ``reader``). Started only by the Kerberos tests, which skip unless the machine
    has the KDC and a GSSAPI-capable client (``scripts/build-kerberos-client.sh``)."""
    from devtools.local_kafka.security import SecurityModes

    if shutil.which("krb5kdc") is None and not Path("/usr/sbin/krb5kdc").exists():
        why = "no MIT KDC on this machine: `make kerberos-client` installs it (Debian's krb5-kdc and krb5-user)"
        if os.environ.get("CI"):  # `make test` installs it: missing in CI is a broken setup
            pytest.fail(why)
        pytest.skip(why)
    base_dir = tmp_path_factory.mktemp("local-kafka-kerberos")
    with local_test_clusters(["kerberos"], base_dir, security=SecurityModes(kerberos=True)) as clusters:
        yield clusters["kerberos"]


@pytest.fixture(scope="session")
def schema_registries(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, LocalRegistry]]:
    """Two local Schema Registries (Apicurio, Confluent-compatible API), "east" and "west", on free ports."""
    with local_test_registries(["east", "west"], tmp_path_factory.mktemp("local-registry")) as registries:
        yield registries


@pytest.fixture(scope="session")
def registry_password() -> str:
    """The random password of ``secured_registry``'s basic-auth user ``reader``."""
    return secrets.token_urlsafe(18)


@pytest.fixture(scope="session")
def secured_registry(tmp_path_factory: pytest.TempPathFactory, registry_password: str) -> Iterator[LocalRegistry]:
    """One local Schema Registry serving HTTPS only (its CA: ``ca_file``) and requiring basic auth as ``reader``."""
    base_dir = tmp_path_factory.mktemp("local-registry-secured")
    with local_test_registries(["secured"], base_dir, basic_auth=("reader", registry_password), tls=True) as found:
        yield found["secured"]


@pytest.fixture(scope="session")
def postgres() -> Iterator[LocalPostgres]:
    """A local PostgreSQL (Debian's server) on a free loopback port, purged at the end of the session.

    Its folder is made with ``mkdtemp`` directly under the system temp folder, not under pytest's: as root the
    server runs as the ``postgres`` user, who cannot enter pytest's 0700 ``/tmp/pytest-of-root``.
    """
    from devtools.local_postgres import start_postgres, stop_postgres
    from dynamic_kafka._toolchain.process import free_port

    base = Path(tempfile.mkdtemp(prefix="dynamic-kafka-pg-"))
    base.chmod(0o755)
    try:
        yield start_postgres(base_dir=base, port=free_port(), database="dagster")
    finally:
        stop_postgres(base_dir=base, purge=True)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def pushgateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalPushgateway]:
    """A Prometheus Pushgateway (built from its Go module once, cached) on a free loopback port."""
    from devtools.testing.pushgateway import running_pushgateway

    with running_pushgateway(tmp_path_factory.mktemp("pushgateway")) as gateway:
        yield gateway


@pytest.fixture(scope="session")
def otel_collector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCollector]:
    """An OpenTelemetry Collector (built from its Go modules once, cached): OTLP/HTTP in, a JSON file out."""
    from devtools.testing.collector import running_collector

    with running_collector(tmp_path_factory.mktemp("otelcol")) as collector:
        yield collector


@pytest.fixture(scope="session")
def built_wheel(tmp_path_factory: pytest.TempPathFactory) -> BuiltWheel:
    """This repository's wheel, built once per session for every test that installs it as a user does."""
    return build_wheel(tmp_path_factory.mktemp("wheel"))


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

    Exports the server's access key (it checks every request's signature, as S3 does) in
    ``$DYNAMIC_KAFKA_TEST_S3_KEY_ID`` / ``$..._SECRET``, which :func:`s3_storage` references, so runs in child
    processes reach it too and the secret tests can look for the secret's value.
    """
    from devtools.local_s3 import start_server, stop_server
    from devtools.testing.clusters import distinct_free_ports

    base = tmp_path_factory.mktemp("local-s3")
    (port,) = distinct_free_ports(1)
    server = start_server(port=port, base_dir=base, buckets=["lake"])
    credentials = server.credentials()
    os.environ[S3_KEY_ENV] = credentials.access_key_id
    os.environ[S3_SECRET_ENV] = credentials.secret_access_key.get_secret_value()
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


@pytest.fixture(scope="session")
def spark_connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerInfo]:
    """One local Spark Connect server for the whole test session (``local[2]``, its UI on a free port so the
    secret tests can read its pages), stopped at the end."""
    base_dir = tmp_path_factory.mktemp("spark-connect")
    _ui_ports[base_dir] = free_port()
    info = start_test_server(base_dir, free_port(), _ui_ports[base_dir])
    yield info
    stop_server(base_dir=base_dir, timeout_s=THROWAWAY_STOP_S)


_ui_ports: dict[Path, int] = {}


def pytest_configure(config: pytest.Config) -> None:
    """One Spark Connect token for the session: every local server it starts (the session's, a test's own, one a
    CLI subprocess starts) uses it, and every client finds it where the product documents, the environment."""
    os.environ.setdefault(TOKEN_ENV, secrets.token_urlsafe(32))


def start_test_server(base_dir: Path, port: int, ui_port: int) -> ServerInfo:
    """Starts (or finds running) the test session's Spark Connect server: ``local[2]``, 1 GB, UI on ``ui_port``."""
    return start_server(
        base_dir=base_dir,
        port=port,
        master="local[2]",
        driver_memory="1g",
        ui=True,
        conf={
            "spark.ui.port": str(ui_port),
            # Read on the JVM's first Kerberos login only: the Kerberos test writes its KDC's config here first.
            "spark.driver.extraJavaOptions": f"-Djava.security.krb5.conf={base_dir / 'krb5.conf'}",
        },
    )


@pytest.fixture(scope="session")
def spark_connect_krb5_conf(spark_connect_server: ServerInfo) -> Path:
    """Where the test Spark Connect server's JVM looks for its ``krb5.conf`` (absent until a test writes it)."""
    return Path(spark_connect_server.log_file).parent / "krb5.conf"


@pytest.fixture(scope="session")
def spark_connect_ui(spark_connect_server: ServerInfo) -> str:
    """The test Spark Connect server's UI, ``http://127.0.0.1:PORT``."""
    return f"http://127.0.0.1:{_ui_ports[Path(spark_connect_server.log_file).parent]}"


@dataclass(frozen=True)
class SparkMode:
    """How a test's pipeline runs Spark: ``local`` (the session's in-process driver) or ``connect`` (the session's
    Spark Connect server)."""

    name: str
    config: dict[str, Any]  # the project file's `spark` section (what CLI runs of the pipeline use)
    session: Callable[[], Any] | None  # for in-process runners; None: the project's `spark` section decides
    server: ServerInfo | None = None


_CONNECT_MODE = "SPARK_CONNECT_MODE_ENABLED"


@pytest.fixture(autouse=True)
def _spark_mode_switch_cleared() -> Iterator[None]:
    """Clears pyspark's process-wide Connect switches after every test (see ``spark_mode``).

    Creating a Spark Connect session sets environment variables that nothing unsets; left set, they turn the next
    test's in-process Spark calls into Connect calls, and the in-process session refuses to start.
    """
    yield
    for name in (_CONNECT_MODE, "SPARK_REMOTE"):
        os.environ.pop(name, None)


@pytest.fixture(params=["local", "connect"])
def spark_mode(request: pytest.FixtureRequest) -> Iterator[SparkMode]:
    """Each exactly-once core test once per mode.

    pyspark dispatches its functions (``sf.col``, ``Observation``...) on one process-wide switch, the environment
    variable a Connect session sets: one process is in one mode. This test process runs both, so the switch is set
    for the connect cases and cleared after them (the cached Connect session and the in-process session both stay).
    """
    if request.param == "local":
        os.environ.pop(_CONNECT_MODE, None)
        session = request.getfixturevalue("spark")
        yield SparkMode("local", {}, lambda: session)
        return
    server: ServerInfo = request.getfixturevalue("spark_connect_server")
    os.environ[_CONNECT_MODE] = "1"
    try:
        yield SparkMode("connect", {"remote": server.remote}, None, server)
    finally:
        os.environ.pop(_CONNECT_MODE, None)


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
