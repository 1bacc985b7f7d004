"""Client properties in either client's language -> librdkafka properties, for the driver's Kafka calls.

One property map feeds two clients: librdkafka on the driver (planning, offsets, group commits) and the Java client
in Spark (:mod:`dynamic_kafka.kafka.java_properties`). Users paste either language: librdkafka's
(``sasl.username``, ``ssl.ca.location``) or the Java client's, as the Kafka, Spark and Flink documentation writes
it (``sasl.jaas.config``, ``ssl.truststore.location``). Each client gets its own language: a key in the client's
own language wins over a translation of the other's, so a map may hold both (a JKS trust store for Spark and the
same CA as PEM for the driver). Pure: no network; the result holds secrets, so it is never logged.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from dynamic_kafka.errors import ConfigError
from dynamic_kafka.kafka.jaas import KERBEROS_MODULE, OAUTH_MODULE, PLAIN_MODULE, SCRAM_MODULE, parse_jaas

if TYPE_CHECKING:
    from collections.abc import Mapping

logger = logging.getLogger(__name__)

OVERRIDDEN_KEYS: dict[str, str] = {
    "bootstrap.servers": "the cluster's bootstrap_servers is used",
    "metadata.broker.list": "the cluster's bootstrap_servers is used",
    "group.id": "reads never join a group; name groups in starting_offsets (committed) and the pipeline's commits",
    "auto.offset.reset": "the plan fixes every offset; set starting_offsets instead",
    "enable.auto.commit": "offsets are committed only after the sink's commit",
    "enable.auto.offset.store": "offsets are committed only after the sink's commit",
    "isolation.level": "the pipeline's isolation_level is used",
    "key.deserializer": "records are read as bytes and decoded by the pipeline's format",
    "value.deserializer": "records are read as bytes and decoded by the pipeline's format",
    "interceptor.classes": "the Spark Kafka connector does not allow consumer interceptors",
}
"""Keys the product sets itself, with why: dropped from both clients' properties, reported once as ignored."""

_reported: set[tuple[str, str]] = set()
_reported_lock = threading.Lock()


def report_overridden(properties: Mapping[str, str], *, cluster_id: str) -> None:
    """Logs a warning for each key of :data:`OVERRIDDEN_KEYS` in ``properties``, once per cluster and key in this
    process (a run builds clients many times). Names the key, never its value.
    """
    for key in sorted(properties.keys() & OVERRIDDEN_KEYS.keys()):
        with _reported_lock:
            if (cluster_id, key) in _reported:
                continue
            _reported.add((cluster_id, key))
        logger.warning("cluster %r: property %r is ignored: %s.", cluster_id, key, OVERRIDDEN_KEYS[key])


# Java client names librdkafka spells differently.
_RENAMED = {
    "fetch.max.wait.ms": "fetch.wait.max.ms",
    "receive.buffer.bytes": "socket.receive.buffer.bytes",
    "send.buffer.bytes": "socket.send.buffer.bytes",
}

# Java-only keys librdkafka refuses ("No such configuration property"); they still reach Spark's client.
_JAVA_ONLY = frozenset(
    {
        "sasl.jaas.config",
        "sasl.client.callback.handler.class",
        "sasl.login.callback.handler.class",
        "sasl.login.class",
        "sasl.login.connect.timeout.ms",
        "sasl.login.read.timeout.ms",
        "sasl.login.refresh.buffer.seconds",
        "sasl.login.refresh.min.period.seconds",
        "sasl.login.refresh.window.factor",
        "sasl.login.refresh.window.jitter",
        "sasl.login.retry.backoff.max.ms",
        "sasl.login.retry.backoff.ms",
        "sasl.kerberos.ticket.renew.jitter",
        "sasl.kerberos.ticket.renew.window.factor",
        "sasl.oauthbearer.scope.claim.name",
        "sasl.oauthbearer.sub.claim.name",
        "sasl.oauthbearer.jwks.endpoint.url",
        "sasl.oauthbearer.jwks.endpoint.refresh.ms",
        "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms",
        "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms",
        "sasl.oauthbearer.clock.skew.seconds",
        "sasl.oauthbearer.expected.audience",
        "sasl.oauthbearer.expected.issuer",
        "sasl.oauthbearer.header.urlencode",
        "security.providers",
        "ssl.protocol",
        "ssl.provider",
        "ssl.enabled.protocols",
        "ssl.keystore.type",
        "ssl.keystore.key",
        "ssl.keystore.certificate.chain",
        "ssl.truststore.location",
        "ssl.truststore.type",
        "ssl.truststore.password",
        "ssl.truststore.certificates",
        "ssl.keymanager.algorithm",
        "ssl.trustmanager.algorithm",
        "ssl.secure.random.implementation",
        "ssl.engine.factory.class",
        "default.api.timeout.ms",
        "socket.connection.setup.timeout.max.ms",
        "exclude.internal.topics",
        "max.poll.records",
        "metrics.sample.window.ms",
        "metrics.num.samples",
        "metrics.recording.level",
        "metric.reporters",
        "auto.include.jmx.reporter",
    }
)

_JKS_TRUST_HINT = (
    "librdkafka (the driver's client) reads CA certificates only as PEM. Export them once and add the PEM file "
    "next to the trust store (Spark keeps using the trust store): `keytool -exportcert -rfc -keystore {location} "
    "-alias <alias> -file ca.pem` (`keytool -list -keystore {location}` shows the aliases; keytool asks for the "
    "store password), then set ssl.ca.location: /path/to/ca.pem. Or point ssl.truststore.location at ca.pem with "
    "ssl.truststore.type: PEM, which both clients read."
)
_PKCS12_TRUST_HINT = (
    "librdkafka (the driver's client) reads CA certificates only as PEM. Export them once and add the PEM file "
    "next to the trust store (Spark keeps using the trust store): `openssl pkcs12 -in {location} -nokeys "
    "-out ca.pem` (openssl asks for the store password), then set ssl.ca.location: /path/to/ca.pem. Or point "
    "ssl.truststore.location at ca.pem with ssl.truststore.type: PEM, which both clients read."
)
_JKS_KEY_HINT = (
    "librdkafka (the driver's client) reads key stores only as PKCS12 or PEM. Convert it once: `keytool "
    "-importkeystore -srckeystore {location} -destkeystore client.p12 -deststoretype PKCS12` (keytool asks for "
    "both passwords), then set ssl.keystore.location: /path/to/client.p12 and ssl.keystore.type: PKCS12, which "
    "both clients read."
)


def librdkafka_properties(properties: Mapping[str, str], *, cluster_id: str) -> dict[str, str]:
    """The driver's librdkafka properties from resolved client properties written in either client's language.

    ==============================================================  ===============================================
    Java client                                                     librdkafka
    ==============================================================  ===============================================
    ``sasl.jaas.config`` with ``PlainLoginModule`` /                ``sasl.username`` + ``sasl.password``
    ``ScramLoginModule`` (``username``, ``password``)               (mechanism PLAIN inferred; SCRAM needs it set)
    ``sasl.jaas.config`` with ``OAuthBearerLoginModule`` and        ``sasl.oauthbearer.method: oidc`` + client id,
    ``clientId``/``clientSecret``/``scope``/``extension_*``         secret, scope, extensions
    the same with ``unsecuredLoginStringClaim_sub`` ...              ``enable.sasl.oauthbearer.unsecure.jwt`` +
    (the unsecured JWT, for tests)                                  ``sasl.oauthbearer.config``
    ``sasl.jaas.config`` with ``Krb5LoginModule``                   ``sasl.kerberos.keytab`` + ``.principal``
    ``ssl.truststore.location`` type PEM                            ``ssl.ca.location``
    ``ssl.truststore.certificates``                                 ``ssl.ca.pem``
    ``ssl.keystore.location`` type PKCS12 (+ ``.password``)         the same keys (librdkafka reads PKCS12)
    ``ssl.keystore.location`` type PEM                              ``ssl.certificate.location`` =
                                                                    ``ssl.key.location`` (one file)
    ``ssl.keystore.certificate.chain`` / ``ssl.keystore.key``       ``ssl.certificate.pem`` / ``ssl.key.pem``
    ``ssl.endpoint.identification.algorithm`` empty                 ``none``
    ``fetch.max.wait.ms``, ``{receive,send}.buffer.bytes``          ``fetch.wait.max.ms``,
                                                                    ``socket.{receive,send}.buffer.bytes``
    ==============================================================  ===============================================

    A librdkafka key wins over the translation of a Java one (``sasl.username`` over ``sasl.jaas.config``,
    ``ssl.ca.location`` over ``ssl.truststore.location``). Other Java-only keys (login refresh, trust manager,
    ``max.poll.records``...) are left to Spark's client. :data:`OVERRIDDEN_KEYS` are dropped and reported once.

    Raises:
        ConfigError: a Java setting has no librdkafka equivalent: a JKS or PKCS12 trust store or a JKS key store
            (the hint gives the command that exports a file librdkafka reads), a SCRAM login without
            ``sasl.mechanism``, or a login module librdkafka does not offer. Messages name keys, never values.
    """
    report_overridden(properties, cluster_id=cluster_id)
    props = {k: v for k, v in properties.items() if k not in OVERRIDDEN_KEYS}
    out = {k: v for k, v in props.items() if k not in _JAVA_ONLY and k not in _RENAMED}
    for java, native in _RENAMED.items():
        if java in props and native not in props:
            out[native] = props[java]
    jaas = props.get("sasl.jaas.config")
    if jaas is not None and not {"sasl.username", "sasl.password", "sasl.oauthbearer.config"} & props.keys():
        out.update(_from_jaas(jaas, props, cluster_id=cluster_id))
    out.update(_trust(props, cluster_id=cluster_id))
    out = _key_store(out, props, cluster_id=cluster_id)
    if props.get("ssl.endpoint.identification.algorithm", "x").strip() == "":
        out["ssl.endpoint.identification.algorithm"] = "none"
    return out


def _from_jaas(line: str, props: Mapping[str, str], *, cluster_id: str) -> dict[str, str]:
    jaas = parse_jaas(line, cluster_id=cluster_id)
    mechanism = (props.get("sasl.mechanism") or props.get("sasl.mechanisms") or "").strip().upper()
    options = jaas.options
    out: dict[str, str] = {}
    if jaas.module in {PLAIN_MODULE, SCRAM_MODULE}:
        if jaas.module == SCRAM_MODULE and not mechanism.startswith("SCRAM-"):
            raise ConfigError(
                f"cluster {cluster_id!r}: sasl.jaas.config uses ScramLoginModule but sasl.mechanism is "
                f"{mechanism or 'not set'}.",
                hint="Set sasl.mechanism: SCRAM-SHA-512 (or SCRAM-SHA-256), as the broker's listener expects.",
            )
        out = {"sasl.username": options.get("username", ""), "sasl.password": options.get("password", "")}
        default = "PLAIN"
    elif jaas.module == OAUTH_MODULE:
        out = _oauth(options, props)
        default = "OAUTHBEARER"
    elif jaas.module == KERBEROS_MODULE:
        out = {k: v for k, v in (("sasl.kerberos.keytab", options.get("keyTab")),) if v}
        if "principal" in options:
            out["sasl.kerberos.principal"] = options["principal"]
        default = "GSSAPI"
    else:
        raise ConfigError(
            f"cluster {cluster_id!r}: sasl.jaas.config uses {jaas.module_name}, which librdkafka (the driver's "
            "client) cannot translate.",
            hint="Use PlainLoginModule, ScramLoginModule, OAuthBearerLoginModule or Krb5LoginModule, or write "
            "the librdkafka keys (sasl.username/sasl.password, sasl.oauthbearer.*) next to sasl.jaas.config.",
        )
    if not mechanism:
        out["sasl.mechanism"] = default
    return out


def _oauth(options: Mapping[str, str], props: Mapping[str, str]) -> dict[str, str]:
    if "clientId" in options or "sasl.oauthbearer.token.endpoint.url" in props:
        out = {"sasl.oauthbearer.method": "oidc"}
        for option, key in (
            ("clientId", "sasl.oauthbearer.client.id"),
            ("clientSecret", "sasl.oauthbearer.client.secret"),
            ("scope", "sasl.oauthbearer.scope"),
        ):
            if option in options:
                out[key] = options[option]
        extensions = [f"{k.removeprefix('extension_')}={v}" for k, v in options.items() if k.startswith("extension_")]
        if extensions:
            out["sasl.oauthbearer.extensions"] = ",".join(extensions)
        return out
    # The broker's unsecured JWT (tests and demos): librdkafka builds the same token from sasl.oauthbearer.config.
    principal_claim = options.get("unsecuredLoginPrincipalClaimName", "sub")
    config = [f"principal={options.get(f'unsecuredLoginStringClaim_{principal_claim}', '')}"]
    if principal_claim != "sub":
        config.append(f"principalClaimName={principal_claim}")
    if "unsecuredLoginLifetimeSeconds" in options:
        config.append(f"lifeSeconds={options['unsecuredLoginLifetimeSeconds']}")
    scope_claim = options.get("unsecuredLoginScopeClaimName", "scope")
    scope = options.get(f"unsecuredLoginListClaim_{scope_claim}")
    if scope:
        # The Java option's first character is the list's delimiter.
        config.append(f"scope={','.join(s for s in scope[1:].split(scope[0]) if s)}")
    config.extend(
        f"extension_{k.removeprefix('unsecuredLoginExtension_')}={v}"
        for k, v in options.items()
        if k.startswith("unsecuredLoginExtension_")
    )
    return {"enable.sasl.oauthbearer.unsecure.jwt": "true", "sasl.oauthbearer.config": " ".join(config)}


def _trust(props: Mapping[str, str], *, cluster_id: str) -> dict[str, str]:
    if "ssl.ca.location" in props or "ssl.ca.pem" in props:
        return {}
    if "ssl.truststore.certificates" in props:
        return {"ssl.ca.pem": props["ssl.truststore.certificates"]}
    location = props.get("ssl.truststore.location")
    if location is None:
        return {}
    kind = props.get("ssl.truststore.type", "JKS").strip().upper()
    if kind == "PEM":
        return {"ssl.ca.location": location}
    hint = _PKCS12_TRUST_HINT if kind == "PKCS12" else _JKS_TRUST_HINT
    raise ConfigError(
        f"cluster {cluster_id!r}: ssl.truststore.location is a {kind} trust store"
        f"{'' if 'ssl.truststore.type' in props else ' (the Java default type)'}, which the driver's client cannot "
        "read.",
        hint=hint.format(location=location),
    )


def _key_store(out: dict[str, str], props: Mapping[str, str], *, cluster_id: str) -> dict[str, str]:
    if {"ssl.certificate.location", "ssl.certificate.pem"} & props.keys():
        out.pop("ssl.keystore.location", None)
        out.pop("ssl.keystore.password", None)
        return out
    if "ssl.keystore.certificate.chain" in props:
        out["ssl.certificate.pem"] = props["ssl.keystore.certificate.chain"]
        if "ssl.keystore.key" in props:
            out["ssl.key.pem"] = props["ssl.keystore.key"]
        return out
    location = props.get("ssl.keystore.location")
    kind = props.get("ssl.keystore.type", "PKCS12").strip().upper()
    if location is None or kind == "PKCS12":
        return out
    if kind == "PEM":
        out.pop("ssl.keystore.location")
        out.pop("ssl.keystore.password", None)
        out["ssl.certificate.location"] = out["ssl.key.location"] = location
        return out
    raise ConfigError(
        f"cluster {cluster_id!r}: ssl.keystore.location is a {kind} key store, which the driver's client cannot read.",
        hint=_JKS_KEY_HINT.format(location=location),
    )
