"""Pure rendering of a local broker's configuration: cluster specs, server.properties, log4j2 config, cluster ids.

Every broker is a single KRaft node in combined mode (``process.roles=broker,controller``) with two listeners:
``CLIENT`` on ``127.0.0.1:<port>`` for clients (PLAINTEXT, or SASL_PLAINTEXT with PLAIN) and ``CONTROLLER`` on
another loopback port (always PLAINTEXT). ``CLIENT`` is also the inter-broker listener: a single node still sends
requests to itself over it (transaction markers), so with SASL the broker logs in as the configured user.
"""

from __future__ import annotations

import base64
import re
import uuid
from typing import TYPE_CHECKING

from devtools.errors import LocalKafkaError

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

CLIENT_LISTENER = "CLIENT"
CONTROLLER_LISTENER = "CONTROLLER"
NODE_ID = 1
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}")
# Both end up inside a JAAS option (user_NAME="PASSWORD"): keep them to what its tokenizer reads unquoted/quoted.
_SASL_USER_RE = re.compile(r"[A-Za-z0-9_]{1,64}")
_SASL_PASSWORD_RE = re.compile(r"[ !#-\[\]-~]{1,256}")
_JAAS_KEY = f"listener.name.{CLIENT_LISTENER.lower()}.plain.sasl.jaas.config"
_CLIENT_FACING_KEYS = ("listeners", "listener.security.protocol.map", "sasl.enabled.mechanisms", _JAAS_KEY)

# Sized for a laptop or a 2-core CI runner: one replica of everything, few threads, short delays so tests that
# delete records or topics see the effect in about a second.
_SMALL_MACHINE_SETTINGS: dict[str, str] = {
    "num.partitions": "1",
    "default.replication.factor": "1",
    "min.insync.replicas": "1",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "8",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "4",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    "auto.create.topics.enable": "false",
    "delete.topic.enable": "true",
    # Not 0: retention running while the log cleaner starts throws "Compaction ... cannot be resumed".
    "log.initial.task.delay.ms": "5000",
    # Keep records forever unless a topic sets retention.ms: tests and demos produce records with old explicit
    # timestamps, which the default 7-day retention (checked every second here) would delete within seconds.
    "log.retention.ms": "-1",
    "log.retention.check.interval.ms": "1000",
    # The broker-level name of the topic config file.delete.delay.ms.
    "log.segment.delete.delay.ms": "1000",
    "log.cleaner.backoff.ms": "1000",
    "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),
    "num.network.threads": "2",
    "num.io.threads": "2",
    "background.threads": "2",
    "num.recovery.threads.per.data.dir": "1",
    "log.cleaner.threads": "1",
}


def parse_cluster_spec(spec: str) -> tuple[str, int]:
    """Parse ``NAME:PORT`` into ``(name, port)``.

    NAME is a folder name: letters, digits, ``_`` and ``-``, starting with a letter or digit.

    Raises:
        LocalKafkaError: the spec is not ``NAME:PORT`` with a valid name and a port in 1..65535.
    """
    name, sep, port_text = spec.rpartition(":")
    if not sep or not _NAME_RE.fullmatch(name) or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise LocalKafkaError(
            f"invalid cluster spec {spec!r}; expected NAME:PORT, e.g. east:19092 (NAME: letters, digits, _ and -; "
            "PORT: 1-65535)."
        )
    return name, int(port_text)


SASL_PASSWORD_ENV = "DYNAMIC_KAFKA_SASL_PASSWORD"  # noqa: S105 (the variable's name, not a password)


def sasl_plain_credentials(user: str, read_password: Callable[[], str | None]) -> tuple[str, str]:
    """Validate the user of ``--sasl-plain`` and its password, taken from the environment or stdin.

    The password never comes from the command line: every user of the machine can read a process's arguments.
    ``read_password`` is called only after the user was checked for an inline password, so that refusal reads nothing.

    Raises:
        LocalKafkaError: ``user`` holds a ``:`` (a password given on the command line), no password was given, or
            either part fails :func:`validate_sasl_plain`. The message never contains the password.
    """
    if ":" in user:
        raise LocalKafkaError(
            "--sasl-plain takes the user only: a password on the command line is visible to every user in the "
            f"process list. Put the password in ${SASL_PASSWORD_ENV} or pipe it on stdin."
        )
    password = read_password()
    if not password:
        raise LocalKafkaError(f"no SASL password for user {user!r}: set ${SASL_PASSWORD_ENV} or pipe it on stdin.")
    validate_sasl_plain(user, password)
    return user, password


def validate_sasl_plain(user: str, password: str) -> None:
    r"""Check a SASL/PLAIN user and password can be written into the broker's JAAS config.

    Raises:
        LocalKafkaError: the user is not 1-64 of ``[A-Za-z0-9_]``, or the password is not 1-256 printable ASCII
            characters without ``"`` or ``\\``. The message never contains the password.
    """
    if not _SASL_USER_RE.fullmatch(user):
        raise LocalKafkaError(f"invalid SASL user {user!r}; use 1-64 letters, digits or _.")
    if not _SASL_PASSWORD_RE.fullmatch(password):
        raise LocalKafkaError(
            'invalid SASL password; use 1-256 printable ASCII characters other than " and \\ (not shown).'
        )


def new_cluster_id() -> str:
    """Return a fresh Kafka cluster id: 16 random bytes in URL-safe base64 without padding, like Kafka's Uuid."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        # Kafka's own generator avoids a leading "-" so the id never reads as a command-line flag.
        if not cluster_id.startswith("-"):
            return cluster_id


def server_settings(
    *,
    port: int,
    controller_port: int,
    log_dir: Path,
    sasl_plain: tuple[str, str] | None = None,
    secured: tuple[list[str], list[str], dict[str, str]] | None = None,
) -> dict[str, str]:
    """Return the server.properties settings of a single-node combined broker+controller.

    Args:
        port: the client listener's port on 127.0.0.1.
        controller_port: the controller listener's port on 127.0.0.1.
        log_dir: where the broker keeps its partitions and the metadata log.
        sasl_plain: ``(user, password)`` to make the client listener require SASL_PLAINTEXT with PLAIN.
        secured: more listeners, their ``NAME:PROTOCOL`` pairs and their settings
            (:func:`devtools.local_kafka.security.listener_settings`).

    Returns:
        The settings, in file order. They hold the password when ``sasl_plain`` is given.
    """
    client_protocol = "SASL_PLAINTEXT" if sasl_plain else "PLAINTEXT"
    extra_listeners, extra_protocols, extra_settings = secured or ([], [], {})
    client, controller = f"{CLIENT_LISTENER}://127.0.0.1:{port}", f"{CONTROLLER_LISTENER}://127.0.0.1:{controller_port}"
    listeners = ",".join([client, controller, *extra_listeners])
    protocols = ",".join([f"{CLIENT_LISTENER}:{client_protocol}", f"{CONTROLLER_LISTENER}:PLAINTEXT", *extra_protocols])
    settings: dict[str, str] = {
        "process.roles": "broker,controller",
        "node.id": str(NODE_ID),
        "controller.quorum.bootstrap.servers": f"127.0.0.1:{controller_port}",
        "listeners": listeners,
        "advertised.listeners": listeners,
        "listener.security.protocol.map": protocols,
        "controller.listener.names": CONTROLLER_LISTENER,
        "inter.broker.listener.name": CLIENT_LISTENER,
        "log.dirs": str(log_dir),
        **_SMALL_MACHINE_SETTINGS,
        **extra_settings,
    }
    if sasl_plain:
        user, password = sasl_plain
        validate_sasl_plain(user, password)
        settings["sasl.enabled.mechanisms"] = "PLAIN"
        settings["sasl.mechanism.inter.broker.protocol"] = "PLAIN"
        settings[_JAAS_KEY] = (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="{user}" password="{password}" user_{user}="{password}";'
        )
    return settings


def client_facing(settings: dict[str, str]) -> dict[str, str | None]:
    """Return the settings a client depends on (address, security, credentials), to compare two configs."""
    return {key: settings.get(key) for key in _CLIENT_FACING_KEYS}


def render_properties(settings: dict[str, str]) -> str:
    """Render settings as a Java properties file (values here never need escaping: see the validators)."""
    lines = ["# Generated by dynamic-kafka local_kafka; rewritten on every start."]
    lines += [f"{key}={value}" for key, value in settings.items()]
    return "\n".join(lines) + "\n"


def parse_properties(text: str) -> dict[str, str]:
    """Parse a properties file written by :func:`render_properties`."""
    settings: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.lstrip().startswith(("#", "!")):
            settings[key.strip()] = value
    return settings


def render_log4j2_properties() -> str:
    """Render the broker's log4j2 config: INFO to stdout (which the launcher sends to the cluster's log file)."""
    return """# Generated by dynamic-kafka local_kafka.
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.target = SYSTEM_OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d{ISO8601}] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = out
# Full config dumps (hundreds of lines per client and per start) and per-request lines drown the useful ones.
logger.config.name = org.apache.kafka.common.config.AbstractConfig
logger.config.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.statechange.name = state.change.logger
logger.statechange.level = WARN
logger.authorizer.name = kafka.authorizer.logger
logger.authorizer.level = WARN
"""
