"""librdkafka-style client properties -> Java Kafka client properties, for the Spark Kafka connector.

Client properties are written librdkafka-style in the metadata (the driver uses confluent-kafka with them); the
Spark connector runs the Java client, so :func:`java_client_properties` translates them. Pure: no Spark, no
network; the result may hold secrets, so it is never logged.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from dynamic_kafka.errors import ConfigError
from dynamic_kafka.kafka.driver_properties import OVERRIDDEN_KEYS, report_overridden
from dynamic_kafka.kafka.jaas import (
    KERBEROS_MODULE,
    OAUTH_MODULE,
    PLAIN_MODULE,
    SCRAM_MODULE,
    parse_jaas,
    render_jaas,
)

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

# Keys never passed to Spark: set by the reader itself or forbidden by the Spark connector (OVERRIDDEN_KEYS,
# reported as ignored), or librdkafka-only knobs the Java client does not know.
_DROPPED = OVERRIDDEN_KEYS.keys() | frozenset(
    {
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
        "sasl.oauthbearer.config",
        "enable.sasl.oauthbearer.unsecure.jwt",
    }
)

_SASL_LOGIN_MODULES = {"PLAIN": PLAIN_MODULE, "SCRAM-SHA-256": SCRAM_MODULE, "SCRAM-SHA-512": SCRAM_MODULE}
# The mechanism a login module implies, for a sasl.jaas.config written without sasl.mechanism (SCRAM has two).
_MODULE_MECHANISMS = {PLAIN_MODULE: "PLAIN", OAUTH_MODULE: "OAUTHBEARER", KERBEROS_MODULE: "GSSAPI"}
_OAUTH_CALLBACK_HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"


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
    ``sasl.oauthbearer.config`` (unsecured JWT, for tests)     ``sasl.jaas.config`` with ``OAuthBearerLoginModule``
                                                                (``unsecuredLoginStringClaim_sub``...)
    ``ssl.ca.location`` (a PEM file) / ``ssl.ca.pem``           ``ssl.truststore.location`` /
                                                                ``ssl.truststore.certificates`` + ``type=PEM``
    ``ssl.certificate.location`` = ``ssl.key.location``         ``ssl.keystore.location`` + ``type=PEM``
    ``ssl.certificate.pem`` / ``ssl.key.pem``                   ``ssl.keystore.certificate.chain`` / ``.key``
    ``ssl.endpoint.identification.algorithm: none``             the same key, empty value
    ``fetch.wait.max.ms``, ``fetch.message.max.bytes``,          ``fetch.max.wait.ms``, ``max.partition.fetch.bytes``,
    ``socket.{receive,send}.buffer.bytes``,                      ``{receive,send}.buffer.bytes``,
    ``socket.timeout.ms``, ``topic.metadata.refresh.interval.ms``  ``request.timeout.ms``, ``metadata.max.age.ms``
    ==========================================================  ==================================================

    Java forms win over translations of librdkafka ones: an explicit ``sasl.jaas.config`` over
    ``sasl.username``/``sasl.password`` (its login module implies ``sasl.mechanism`` when that is not set),
    ``ssl.truststore.*`` over ``ssl.ca.location``, ``ssl.keystore.*`` over ``ssl.certificate.location``. Dropped:
    :data:`~dynamic_kafka.kafka.driver_properties.OVERRIDDEN_KEYS` (reported once as ignored) and librdkafka-only
    knobs (``debug``, ``statistics.interval.ms``, ``socket.keepalive.enable``...). The driver's translation the
    other way is :func:`~dynamic_kafka.kafka.driver_properties.librdkafka_properties`.

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
    report_overridden(properties, cluster_id=cluster_id)
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
    unsecured = take("sasl.oauthbearer.config")
    if jaas is not None:
        out["sasl.jaas.config"] = jaas
        if mechanism is None:
            implied = _MODULE_MECHANISMS.get(parse_jaas(jaas, cluster_id=cluster_id).module)
            if implied is not None:
                out["sasl.mechanism"] = implied
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
        out["sasl.jaas.config"] = render_jaas(module, {"username": username or "", "password": password or ""})
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
        out["sasl.jaas.config"] = render_jaas(OAUTH_MODULE, {k: v for k, v in options.items() if v is not None})
        out["sasl.login.callback.handler.class"] = _OAUTH_CALLBACK_HANDLER
    elif unsecured is not None:
        out["sasl.jaas.config"] = render_jaas(OAUTH_MODULE, _unsecured_jwt_options(unsecured))
    elif keytab is not None or principal is not None:
        out["sasl.jaas.config"] = render_jaas(
            KERBEROS_MODULE,
            {"useKeyTab": "true", "storeKey": "true", "keyTab": keytab or "", "principal": principal or ""},
        )

    # A Java trust or key store wins over librdkafka's PEM settings (those stay the driver's).
    ca, ca_pem = take("ssl.ca.location"), take("ssl.ca.pem")
    if "ssl.truststore.location" not in props and "ssl.truststore.certificates" not in props:
        if ca is not None:
            out["ssl.truststore.location"] = ca
            out["ssl.truststore.type"] = "PEM"
        elif ca_pem is not None:
            out["ssl.truststore.certificates"] = ca_pem
            out["ssl.truststore.type"] = "PEM"
    certificate, key = take("ssl.certificate.location"), take("ssl.key.location")
    certificate_pem, key_pem = take("ssl.certificate.pem"), take("ssl.key.pem")
    java_key_store = "ssl.keystore.location" in props or "ssl.keystore.certificate.chain" in props
    if certificate_pem is not None and not java_key_store:
        out["ssl.keystore.certificate.chain"] = certificate_pem
        out["ssl.keystore.type"] = "PEM"
        if key_pem is not None:
            out["ssl.keystore.key"] = key_pem
    elif (certificate is not None or key is not None) and not java_key_store:
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


def _unsecured_jwt_options(config: str) -> dict[str, str]:
    """The Java unsecured login module's options for librdkafka's ``sasl.oauthbearer.config`` (``principal=alice
    scope=a,b lifeSeconds=60 extension_x=1``), so that both clients present the same unsecured token.
    """
    settings = dict(item.partition("=")[::2] for item in config.split())
    claim = settings.pop("principalClaimName", "sub")
    options = {f"unsecuredLoginStringClaim_{claim}": settings.pop("principal", "")}
    if claim != "sub":
        options["unsecuredLoginPrincipalClaimName"] = claim
    if "lifeSeconds" in settings:
        options["unsecuredLoginLifetimeSeconds"] = settings.pop("lifeSeconds")
    scope_claim = settings.pop("scopeClaimName", "scope")
    if "scope" in settings:
        options[f"unsecuredLoginListClaim_{scope_claim}"] = "," + settings.pop("scope")
        if scope_claim != "scope":
            options["unsecuredLoginScopeClaimName"] = scope_claim
    for name, value in settings.items():
        if name.startswith("extension_"):
            options[f"unsecuredLoginExtension_{name.removeprefix('extension_')}"] = value
    return options
