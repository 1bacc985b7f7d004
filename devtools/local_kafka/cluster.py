"""Start, stop and list real local Kafka clusters (one KRaft node each) under a base folder.

Layout of a cluster NAME under the base folder (``./.local-kafka`` unless ``$DYNAMIC_KAFKA_LOCAL_DIR`` or an
argument says otherwise)::

    NAME/cluster.json       the LocalCluster, as JSON (never a password)
    NAME/kafka.pid          the broker's pid while it runs
    NAME/server.properties  the broker config (mode 0600: it holds the SASL password, if any)
    NAME/log4j2.properties  the broker's logging config
    NAME/kafka.log          the broker's log (stdout and stderr)
    NAME/data/              partitions and the KRaft metadata log

Invariants: a cluster keeps its Kafka cluster id for the life of its data folder; ``start_clusters`` on a running
cluster with the same settings changes nothing; a password is written only into server.properties.

Why one module of this size: a local service's whole life (prepare, format, start, wait, status, stop, delete),
each step with the error message that names the fix, as for the other local services.
"""

from __future__ import annotations

import logging
import subprocess
import time
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._scram import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

from devtools.errors import LocalKafkaError
from devtools.lifecycle import ServiceKind, is_running
from devtools.local_kafka.jars import resolve_kafka_jars
from devtools.local_kafka.kerberos import kdc_marker, kerberos_dir, prepare_kdc, start_kdc
from devtools.local_kafka.models import ClusterStatus, LocalCluster
from devtools.local_kafka.properties import (
    client_facing,
    new_cluster_id,
    parse_properties,
    render_log4j2_properties,
    render_properties,
    server_settings,
    validate_sasl_plain,
)
from devtools.local_kafka.security import (
    SCRAM_PASSWORD_ENV,
    Mode,
    SecurityModes,
    listener_host,
    listener_settings,
    make_certificates,
    validate_scram_user,
)
from dynamic_kafka._toolchain import process
from dynamic_kafka._toolchain.filelock import exclusive_lock
from dynamic_kafka._toolchain.java import find_java

if TYPE_CHECKING:
    from pathlib import Path

logger = logging.getLogger(__name__)

DEFAULT_KAFKA_VERSION = "4.1.1"
LOCAL_DIR_ENV = "DYNAMIC_KAFKA_LOCAL_DIR"
BROKER_JVM_OPTS = ("-Xms128m", "-Xmx512m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-Djava.awt.headless=true")
START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 30.0
KIND = ServiceKind(
    label="local cluster",
    dir_env=LOCAL_DIR_ENV,
    default_dir=".local-kafka",
    state_file="cluster.json",
    pid_file="kafka.pid",
    error=LocalKafkaError,
)


def resolve_base_dir(base_dir: Path | None = None) -> Path:
    """Return the base folder: the argument, else ``$DYNAMIC_KAFKA_LOCAL_DIR``, else ``./.local-kafka``."""
    return KIND.resolve_base_dir(base_dir)


def start_clusters(
    specs: list[tuple[str, int]],
    *,
    base_dir: Path | None = None,
    sasl_plain: tuple[str, str] | None = None,
    security: SecurityModes | None = None,
    scram_password: str | None = None,
    kafka_version: str = DEFAULT_KAFKA_VERSION,
    start_timeout_s: float = START_TIMEOUT_S,
) -> dict[str, LocalCluster]:
    """Start one single-node KRaft cluster per ``(name, port)`` and wait until each accepts clients.

    A cluster that already runs with the same settings is left alone. A stopped cluster restarts on its kept
    data with its cluster id. If any broker fails to come up, the brokers this call started are stopped again.

    Args:
        specs: ``(name, port)`` pairs; the client listener binds ``127.0.0.1:port``.
        base_dir: folder holding the clusters (see :func:`resolve_base_dir`).
        sasl_plain: ``(user, password)``: the client listener then requires SASL_PLAINTEXT with PLAIN.
        security: secured listeners to add (TLS, mutual TLS, SCRAM over TLS, OAUTHBEARER), each on a free port;
            see :mod:`devtools.local_kafka.security`.
        scram_password: the password of ``security.scram_user`` (created once the broker serves).
        kafka_version: the Kafka release, fetched from Maven Central on first use.
        start_timeout_s: how long each broker may take to accept clients.

    Returns:
        The clusters by name.

    Raises:
        LocalKafkaError: bad specs, no Java 17+, jars not obtainable, a port in use, a cluster running with other
            settings, or a broker that did not come up in time (the message holds the end of its log).

    Example:
        >>> start_clusters([("east", 19092), ("west", 29092)])["west"].bootstrap_servers  # doctest: +SKIP
        '127.0.0.1:29092'
    """
    KIND.check_specs(specs, noun="cluster", plural="clusters")
    if sasl_plain is not None:
        validate_sasl_plain(*sasl_plain)
    secured = _Secured(security or SecurityModes(), scram_password)
    base = resolve_base_dir(base_dir)
    result: dict[str, LocalCluster] = {}
    with exclusive_lock(base / ".lock"):
        to_start = []
        for name, port in specs:
            running = _running_cluster(base / name, port, sasl_plain, secured)
            if running is not None:
                logger.info("local cluster %s already runs at %s", name, running.bootstrap_servers)
                result[name] = running
            else:
                to_start.append((name, port))
        if to_start:
            result.update(_start_new(base, to_start, sasl_plain, secured, kafka_version, start_timeout_s))
    return {name: result[name] for name, _ in specs}


def stop_clusters(
    names: list[str] | None = None,
    *,
    base_dir: Path | None = None,
    purge: bool = False,
    stop_timeout_s: float = STOP_TIMEOUT_S,
) -> list[str]:
    """Stop local clusters (SIGTERM, then SIGKILL after ``stop_timeout_s``), keeping their data unless ``purge``.

    Args:
        names: the clusters to stop; None stops every cluster under the base folder.
        base_dir: folder holding the clusters (see :func:`resolve_base_dir`).
        purge: also delete each cluster's folder (data, config, log).
        stop_timeout_s: how long a broker may take to shut down cleanly before it is killed.

    Returns:
        The names of the clusters handled, whether they were running or not.

    Raises:
        LocalKafkaError: a named cluster does not exist under the base folder.
    """
    base = resolve_base_dir(base_dir)
    return KIND.stop_named(
        base,
        names,
        lambda: [(c.name, c.cluster_dir, c) for c in _load_all(base)],
        lambda c: _stop_one(c, stop_timeout_s),
        purge=purge,
    )


def cluster_status(base_dir: Path | None = None) -> list[ClusterStatus]:
    """List the clusters under the base folder, sorted by name, with whether each is running."""
    base = resolve_base_dir(base_dir)
    return [ClusterStatus(cluster=c, running=_is_running(c)) for c in sorted(_load_all(base), key=lambda c: c.name)]


def _running_cluster(
    cluster_dir: Path, port: int, sasl_plain: tuple[str, str] | None, secured: _Secured
) -> LocalCluster | None:
    cluster = _load(cluster_dir)
    if cluster is None or not _is_running(cluster):
        return None
    ports: dict[Mode, int] = {
        mode: int(cluster.secure_listeners[mode].rpartition(":")[2])
        for mode in secured.modes.modes
        if mode in cluster.secure_listeners
    }
    if set(cluster.secure_listeners) != set(ports):
        ports = {}
    wanted = server_settings(
        port=port,
        controller_port=cluster.controller_port,
        log_dir=cluster_dir / "data",
        sasl_plain=sasl_plain,
        secured=secured.settings(ports, cluster_dir) if ports else None,
    )
    props = cluster_dir / "server.properties"
    current = parse_properties(props.read_text()) if props.is_file() else {}
    # Only what clients see counts: a newer dynamic-kafka with other tuning still reuses a running broker.
    if client_facing(current) != client_facing(wanted):
        security = f"SASL user {cluster.sasl_user!r}" if cluster.sasl_user else "no SASL"
        raise LocalKafkaError(
            f"local cluster {cluster.name!r} already runs with other settings (port {cluster.port}, {security}).",
            hint=f"Stop it first: `python -m devtools local-kafka down {cluster.name}`.",
        )
    return cluster


def _start_new(
    base: Path,
    specs: list[tuple[str, int]],
    sasl_plain: tuple[str, str] | None,
    secured: _Secured,
    kafka_version: str,
    start_timeout_s: float,
) -> dict[str, LocalCluster]:
    busy = [f"{port} (cluster {name})" for name, port in specs if not process.port_is_free(port)]
    if busy:
        raise LocalKafkaError(
            f"port {', '.join(busy)} is already in use on 127.0.0.1 by another process.",
            hint="Pick another port or stop what holds it (`ss -ltnp` shows it).",
        )
    java = find_java()
    libs = resolve_kafka_jars(kafka_version)
    started: list[LocalCluster] = []
    # Client ports are not bound yet while controller ports are picked: keep every chosen port out of the draw.
    taken = {port for _, port in specs}
    try:
        for name, port in specs:
            controller_port = _controller_port(base / name, taken)
            taken.add(controller_port)
            secure_ports = _secure_ports(base / name, secured.modes, taken)
            if secured.modes.needs_certificates:
                make_certificates(base / name / "tls", java.parent / "keytool")
            kdc_pid = None
            if secured.modes.kerberos:
                while (kdc_port := process.free_port()) in taken:
                    pass
                taken.add(kdc_port)
                prepare_kdc(base / name, kdc_port)
                kdc_pid = start_kdc(base / name)
            try:
                cluster = _launch(
                    base / name,
                    name,
                    (port, controller_port, secure_ports),
                    (sasl_plain, secured),
                    kafka_version,
                    (java, libs),
                    kdc_pid,
                )
            except BaseException:
                if kdc_pid is not None:
                    process.terminate(kdc_pid, kdc_marker(base / name), timeout_s=STOP_TIMEOUT_S)
                raise
            started.append(cluster)
        deadline = time.monotonic() + start_timeout_s
        for cluster in started:
            _wait_until_serving(cluster, sasl_plain, deadline)
            if secured.modes.scram_user is not None and secured.scram_password is not None:
                _create_scram_user(cluster, sasl_plain, secured.modes.scram_user, secured.scram_password)
    except BaseException:
        for cluster in started:
            _stop_one(cluster, STOP_TIMEOUT_S)
        raise
    return {c.name: c for c in started}


def _controller_port(cluster_dir: Path, taken: set[int]) -> int:
    # Keep the controller port across restarts: the KRaft voter set recorded at format time names it. A
    # single-voter quorum still elects itself on a new port, so a taken port is replaced rather than fatal.
    previous = _load(cluster_dir)
    if previous and previous.controller_port not in taken and process.port_is_free(previous.controller_port):
        return previous.controller_port
    while (port := process.free_port()) in taken:
        pass
    return port


def _secure_ports(cluster_dir: Path, modes: SecurityModes, taken: set[int]) -> dict[Mode, int]:
    # Like the controller port: a restarted broker keeps its secured listeners' ports when they are still free.
    previous = _load(cluster_dir)
    kept = previous.secure_listeners if previous else {}
    ports: dict[Mode, int] = {}
    for mode in modes.modes:
        port = int(kept[mode].rpartition(":")[2]) if mode in kept else 0
        if not port or port in taken or not process.port_is_free(port):
            while (port := process.free_port()) in taken:
                pass
        taken.add(port)
        ports[mode] = port
    return ports


def _launch(
    cluster_dir: Path,
    name: str,
    ports: tuple[int, int, dict[Mode, int]],
    security: tuple[tuple[str, str] | None, _Secured],
    kafka_version: str,
    toolchain: tuple[Path, Path],
    kdc_pid: int | None,
) -> LocalCluster:
    port, controller_port, secure_ports = ports
    sasl_plain, secured = security
    java, libs = toolchain
    previous = _load(cluster_dir)
    cluster_dir.mkdir(parents=True, exist_ok=True)
    data_dir = cluster_dir / "data"
    props = cluster_dir / "server.properties"
    props.touch(mode=0o600)
    props.chmod(0o600)
    props.write_text(
        render_properties(
            server_settings(
                port=port,
                controller_port=controller_port,
                log_dir=data_dir,
                sasl_plain=sasl_plain,
                secured=secured.settings(secure_ports, cluster_dir) if secure_ports else None,
            )
        )
    )
    log4j = cluster_dir / "log4j2.properties"
    log4j.write_text(render_log4j2_properties())
    jvm_base = [str(java), f"-Dlog4j2.configurationFile={log4j}", "-cp", f"{libs}/*"]
    if kdc_pid is not None:
        jvm_base.insert(1, f"-Djava.security.krb5.conf={kerberos_dir(cluster_dir) / 'krb5.conf'}")
    cluster_id = previous.cluster_id if previous else new_cluster_id()
    if not (data_dir / "meta.properties").exists():
        _format_storage(jvm_base, cluster_id, props, name)
    log_file = cluster_dir / "kafka.log"
    pid = KIND.spawn([*jvm_base, *BROKER_JVM_OPTS, "kafka.Kafka", str(props)], folder=cluster_dir, log_file=log_file)
    cluster = LocalCluster(
        name=name,
        port=port,
        bootstrap_servers=f"127.0.0.1:{port}",
        sasl_user=sasl_plain[0] if sasl_plain else None,
        controller_port=controller_port,
        cluster_id=cluster_id,
        pid=pid,
        kafka_version=kafka_version,
        cluster_dir=cluster_dir,
        log_file=log_file,
        secure_listeners={mode: f"{listener_host(mode)}:{p}" for mode, p in secure_ports.items()},
        scram_user=secured.modes.scram_user,
        tls_dir=cluster_dir / "tls" if secured.modes.needs_certificates else None,
        kerberos_dir=kerberos_dir(cluster_dir) if kdc_pid is not None else None,
        kdc_pid=kdc_pid,
    )
    KIND.save(cluster_dir, cluster)
    logger.info("local cluster %s: started pid %d for %s", name, pid, cluster.bootstrap_servers)
    return cluster


def _format_storage(jvm_base: list[str], cluster_id: str, props: Path, name: str) -> None:
    # --standalone formats a single-voter dynamic quorum (KIP-853) from controller.quorum.bootstrap.servers.
    argv = [*jvm_base, "-Xmx256m", "kafka.tools.StorageTool", "format"]
    argv += ["--cluster-id", cluster_id, "--config", str(props), "--standalone"]
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    except subprocess.TimeoutExpired as e:
        raise LocalKafkaError(f"local cluster {name!r}: formatting its storage took over 120s.") from e
    if result.returncode != 0:
        raise LocalKafkaError(
            f"local cluster {name!r}: `kafka-storage format` failed (exit {result.returncode}):\n"
            f"{(result.stdout + result.stderr).strip()[-3000:]}"
        )


def _wait_until_serving(cluster: LocalCluster, sasl_plain: tuple[str, str] | None, deadline: float) -> None:
    password = sasl_plain[1] if sasl_plain else None
    config: dict[str, Any] = {
        **cluster.client_config(password),
        "socket.connection.setup.timeout.ms": 2000,
        "reconnect.backoff.ms": 100,
        "reconnect.backoff.max.ms": 500,
        # Route librdkafka's "connection refused" chatter during startup to a debug logger, not stderr.
        "logger": logging.getLogger(f"{__name__}.librdkafka"),
    }
    admins: list[AdminClient] = []

    def probe() -> str | None:
        # A plain TCP probe first: a client started before the listener opens only logs connection failures.
        if not admins:
            if not process.accepts_connections(cluster.port):
                return "the port never accepted a connection"
            admins.append(AdminClient(config))
        try:
            metadata = admins[0].list_topics(timeout=min(2.0, max(0.1, deadline - time.monotonic())))
        except KafkaException as e:
            return str(e.args[0]) if e.args else repr(e)
        finally:
            admins[0].poll(0)
        return None if metadata.brokers else "metadata lists no broker yet"

    assert cluster.pid is not None  # a cluster just launched has its pid
    KIND.wait_until_ready(
        cluster.pid, _marker(cluster), probe, deadline=deadline, not_ready=lambda why: _not_serving(cluster, why)
    )
    logger.info("local cluster %s: serving at %s", cluster.name, cluster.bootstrap_servers)


def _create_scram_user(cluster: LocalCluster, sasl_plain: tuple[str, str] | None, user: str, password: str) -> None:
    """Creates (or resets) the SCRAM user over the ``CLIENT`` listener; the password goes in the request only."""
    config: dict[str, Any] = {
        **cluster.client_config(sasl_plain[1] if sasl_plain else None),
        "logger": logging.getLogger(f"{__name__}.librdkafka"),
    }
    admin = AdminClient(config)
    upsert = UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), password.encode()
    )
    try:
        for future in admin.alter_user_scram_credentials([upsert], request_timeout=30).values():
            future.result(timeout=30)
    except KafkaException as e:
        raise LocalKafkaError(
            f"local cluster {cluster.name!r}: creating SCRAM user {user!r} failed "
            f"({e.args[0].name() if e.args else e})."
        ) from None
    logger.info(
        "local cluster %s: SCRAM-SHA-512 user %s ready at %s", cluster.name, user, cluster.secure_listeners["scram"]
    )


class _Secured:
    """The secured listeners asked for and the SCRAM password (never stored, never logged)."""

    def __init__(self, modes: SecurityModes, scram_password: str | None) -> None:
        if modes.scram_user is not None:
            validate_scram_user(modes.scram_user)
            if not scram_password:
                raise LocalKafkaError(
                    f"no SCRAM password for user {modes.scram_user!r}: set ${SCRAM_PASSWORD_ENV} or pipe it on stdin."
                )
        self.modes = modes
        self.scram_password = scram_password

    def settings(self, ports: dict[Mode, int], cluster_dir: Path) -> tuple[list[str], list[str], dict[str, str]]:
        return listener_settings(self.modes, ports, cluster_dir / "tls")

    def __repr__(self) -> str:
        return f"_Secured({self.modes!r})"


def _not_serving(cluster: LocalCluster, reason: str) -> LocalKafkaError:
    return LocalKafkaError(
        f"local cluster {cluster.name!r} at {cluster.bootstrap_servers} did not come up: {reason}. "
        f"Last lines of {cluster.log_file}:\n{process.tail(cluster.log_file, 30)}"
    )


def _stop_one(cluster: LocalCluster, timeout_s: float) -> None:
    KIND.stop(cluster.cluster_dir, cluster.pid, _marker(cluster), timeout_s=timeout_s)
    if cluster.kdc_pid is not None and process.is_alive(cluster.kdc_pid, kdc_marker(cluster.cluster_dir)):
        process.terminate(cluster.kdc_pid, kdc_marker(cluster.cluster_dir), timeout_s=timeout_s)


def _is_running(cluster: LocalCluster) -> bool:
    return is_running(cluster.pid, _marker(cluster))


def _marker(cluster: LocalCluster) -> str:
    return str(cluster.cluster_dir / "server.properties")


def _load(cluster_dir: Path) -> LocalCluster | None:
    return KIND.load(cluster_dir, LocalCluster)


def _load_all(base: Path) -> list[LocalCluster]:
    if not base.is_dir():
        return []
    return [c for d in sorted(base.iterdir()) if d.is_dir() and (c := _load(d)) is not None]
