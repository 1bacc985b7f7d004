"""librdkafka-style client properties -> Java Kafka client properties, for the Spark Kafka connector.

Client properties are written librdkafka-style in the metadata (the driver uses confluent-kafka with them); the
Spark connector runs the Java client, so :func:`java_client_properties` translates them. Pure: no Spark, no
network; the result may hold secrets, so it is never logged.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from dynamic_kafka.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Mapping

logger = logging.getLogger(__name__)

# librdkafka name -> Java client name, where only the name differs.
_RENAMED = {
    "sasl.mechanisms": "sasl.mechanism",
    "fetch.wait.max.ms": "fetch.max.wait.ms",
    "fetch.message.max.bytes": "max.partition.fetch.bytes",
    "socket.receive.buffer.bytes": "receive.buffer.bytes",
    "socket.send.buffer.bytes": "send.buffer.bytes",
    "socket.timeout.ms": "request.timeout.ms",
    "topic.metadata.refresh.interval.ms": "metadata.max.age.ms",
}

# Keys never passed to Spark: set by the reader itself, forbidden by the Spark connector (it manages groups,
# offsets and deserializers), or librdkafka-only knobs the Java client does not know.
_DROPPED = frozenset(
    {
        "bootstrap.servers",
        "metadata.broker.list",
        "isolation.level",  # the pipeline's isolation_level wins: the plan's stop offsets were computed under it
        "group.id",
        "auto.offset.reset",
        "enable.auto.commit",
        "enable.auto.offset.store",
        "key.deserializer",
        "value.deserializer",
        "interceptor.classes",
        "enable.partition.eof",
        "partition.assignment.strategy",
        "debug",
        "log_level",
        "log.connection.close",
        "statistics.interval.ms",
        "api.version.request",
        "broker.version.fallback",
        "socket.keepalive.enable",
        "socket.nagle.disable",
        "broker.address.family",
        "queued.min.messages",
        "queued.max.messages.kbytes",
        "sasl.oauthbearer.method",
    }
)

_SASL_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
_OAUTH_LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
_OAUTH_CALLBACK_HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
_KERBEROS_LOGIN_MODULE = "com.sun.security.auth.module.Krb5LoginModule"


def java_client_properties(properties: Mapping[str, str], *, cluster_id: str) -> dict[str, str]:
    """Translates librdkafka-style client properties into Java Kafka client properties (without ``kafka.``).

    Names the two clients share (``security.protocol``, ``sasl.mechanism``, ``ssl.key.password``,
    ``ssl.keystore.location``, ``client.id``, timeouts...) pass through, as do names this function does not know
    (so Java-only properties such as ``ssl.truststore.location`` can be written directly). The differences:

    ==========================================================  ==================================================
    librdkafka                                                  Java client
    ==========================================================  ==================================================
    ``sasl.username`` + ``sasl.password`` (mechanism PLAIN)     ``sasl.jaas.config`` = ``...plain.PlainLoginModule
                                                                required username="u" password="p";``
    same, mechanism SCRAM-SHA-256 / SCRAM-SHA-512               ``sasl.jaas.config`` with ``...scram.ScramLoginModule``
    ``sasl.oauthbearer.client.id`` / ``.client.secret`` /       ``sasl.jaas.config`` with ``OAuthBearerLoginModule``
    ``.scope`` / ``.extensions`` (method oidc)                  (clientId, clientSecret, scope, extensions),
                                                                ``sasl.login.callback.handler.class``, and
                                                                ``sasl.oauthbearer.token.endpoint.url`` as is
    ``sasl.kerberos.keytab`` + ``sasl.kerberos.principal``      ``sasl.jaas.config`` with ``Krb5LoginModule``
    ``sasl.mechanisms``                                         ``sasl.mechanism``
    ``security.protocol`` (any case)                            upper case (the Java client requires it)
    ``ssl.ca.location`` (a PEM file)                            ``ssl.truststore.location`` + ``type=PEM``
    ``ssl.certificate.location`` = ``ssl.key.location``         ``ssl.keystore.location`` + ``type=PEM``
    ``ssl.endpoint.identification.algorithm: none``             the same key, empty value
    ``fetch.wait.max.ms``, ``fetch.message.max.bytes``,          ``fetch.max.wait.ms``, ``max.partition.fetch.bytes``,
    ``socket.{receive,send}.buffer.bytes``,                      ``{receive,send}.buffer.bytes``,
    ``socket.timeout.ms``, ``topic.metadata.refresh.interval.ms``  ``request.timeout.ms``, ``metadata.max.age.ms``
    ==========================================================  ==================================================

    An explicit ``sasl.jaas.config`` wins over ``sasl.username``/``sasl.password``. Dropped: connection keys the
    reader sets itself (``bootstrap.servers``, ``isolation.level``), keys the Spark connector forbids or manages
    (``group.id``, ``auto.offset.reset``, ``enable.auto.commit``, deserializers, interceptors) and librdkafka-only
    knobs (``debug``, ``statistics.interval.ms``, ``socket.keepalive.enable``...).

    Args:
        properties: resolved client properties (may hold secrets: never log the result).
        cluster_id: for error messages.

    Returns:
        Java client properties.

    Raises:
        ConfigError: a librdkafka setting has no Java equivalent (``enable.ssl.certificate.verification: false``,
            separate PEM certificate and key files, an unknown SASL mechanism with username/password). The message
            names the key, never its value.

    Example:
        >>> java_client_properties(
        ...     {"security.protocol": "sasl_plaintext", "sasl.mechanism": "PLAIN",
        ...      "sasl.username": "u", "sasl.password": "p"}, cluster_id="east")["sasl.jaas.config"]
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="p";'
    """
    props = dict(properties)
    out: dict[str, str] = {}

    def take(key: str) -> str | None:
        return props.pop(key, None)

    mechanism = take("sasl.mechanism") or take("sasl.mechanisms")
    if mechanism is not None:
        mechanism = mechanism.strip().upper()
        out["sasl.mechanism"] = mechanism
    protocol = take("security.protocol")
    if protocol is not None:
        out["security.protocol"] = protocol.strip().upper()

    username, password = take("sasl.username"), take("sasl.password")
    jaas = take("sasl.jaas.config")
    oauth = {k: props.pop(k) for k in list(props) if k.startswith("sasl.oauthbearer.") and k in _OAUTH_JAAS_KEYS}
    keytab, principal = take("sasl.kerberos.keytab"), take("sasl.kerberos.principal")
    if jaas is not None:
        out["sasl.jaas.config"] = jaas
        if username is not None or password is not None:
            logger.warning(
                "cluster %r: both sasl.jaas.config and sasl.username/sasl.password are set; using sasl.jaas.config",
                cluster_id,
            )
    elif username is not None or password is not None:
        module = _SASL_LOGIN_MODULES.get(mechanism or "PLAIN")
        if module is None:
            raise ConfigError(
                f"cluster {cluster_id!r}: sasl.username/sasl.password cannot be used with sasl.mechanism "
                f"{mechanism!r} by the Spark (Java) Kafka client.",
                hint="Use PLAIN or SCRAM-SHA-256/512, or set sasl.jaas.config in the Java client's syntax.",
            )
        out["sasl.jaas.config"] = _jaas(module, {"username": username or "", "password": password or ""})
    elif oauth:
        options = {
            "clientId": oauth.get("sasl.oauthbearer.client.id"),
            "clientSecret": oauth.get("sasl.oauthbearer.client.secret"),
            "scope": oauth.get("sasl.oauthbearer.scope"),
        }
        for item in (oauth.get("sasl.oauthbearer.extensions") or "").split(","):
            name, sep, value = item.partition("=")
            if sep and name.strip():
                options[f"extension_{name.strip()}"] = value.strip()
        out["sasl.jaas.config"] = _jaas(_OAUTH_LOGIN_MODULE, {k: v for k, v in options.items() if v is not None})
        out["sasl.login.callback.handler.class"] = _OAUTH_CALLBACK_HANDLER
    elif keytab is not None or principal is not None:
        out["sasl.jaas.config"] = _jaas(
            _KERBEROS_LOGIN_MODULE,
            {"useKeyTab": "true", "storeKey": "true", "keyTab": keytab or "", "principal": principal or ""},
        )

    ca = take("ssl.ca.location")
    if ca is not None:
        out["ssl.truststore.location"] = ca
        out["ssl.truststore.type"] = "PEM"
    certificate, key = take("ssl.certificate.location"), take("ssl.key.location")
    if certificate is not None or key is not None:
        if certificate is None or certificate != key:
            raise ConfigError(
                f"cluster {cluster_id!r}: ssl.certificate.location and ssl.key.location name different files; the "
                "Java client reads a PEM client certificate and its key from one file.",
                hint="Concatenate the key and the certificate chain into one PEM file and point both keys at it, "
                "or use ssl.keystore.location with a PKCS12 keystore.",
            )
        out["ssl.keystore.location"] = certificate
        out["ssl.keystore.type"] = "PEM"
    verification = take("enable.ssl.certificate.verification")
    if verification is not None and verification.strip().lower() in {"false", "0"}:
        raise ConfigError(
            f"cluster {cluster_id!r}: enable.ssl.certificate.verification=false has no equivalent in the Spark "
            "(Java) Kafka client.",
            hint="Trust the broker's CA with ssl.ca.location instead.",
        )
    algorithm = take("ssl.endpoint.identification.algorithm")
    if algorithm is not None:
        out["ssl.endpoint.identification.algorithm"] = "" if algorithm.strip().lower() == "none" else algorithm

    for name, value in props.items():
        if name in _DROPPED:
            continue
        out[_RENAMED.get(name, name)] = value
    return out


_OAUTH_JAAS_KEYS = frozenset(
    {
        "sasl.oauthbearer.client.id",
        "sasl.oauthbearer.client.secret",
        "sasl.oauthbearer.scope",
        "sasl.oauthbearer.extensions",
    }
)


def _jaas(module: str, options: Mapping[str, str]) -> str:
    r"""A JAAS config line. Values are double-quoted, with ``\\`` and ``"`` escaped as the Java parser expects."""
    rendered = " ".join(f'{name}="{_quote(value)}"' for name, value in options.items())
    return f"{module} required {rendered};"


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')
