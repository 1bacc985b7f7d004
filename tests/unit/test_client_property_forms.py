"""Client properties written in either client's language: the driver (librdkafka) and Spark (Java) each get theirs.

The Java forms are the ones the Kafka, Spark and Flink documentation write (``sasl.jaas.config``,
``ssl.truststore.*``, ``ssl.keystore.*``); the librdkafka forms are the ones confluent-kafka users write.
"""

from __future__ import annotations

import logging

import pytest

from dynamic_kafka.errors import ConfigError
from dynamic_kafka.kafka import driver_properties
from dynamic_kafka.kafka.connection import AdminConnection
from dynamic_kafka.kafka.driver_properties import librdkafka_properties
from dynamic_kafka.kafka.jaas import OAUTH_MODULE, PLAIN_MODULE, SCRAM_MODULE, parse_jaas
from dynamic_kafka.kafka.java_properties import java_client_properties
from dynamic_kafka.metadata.models import ClusterMetadata

KRB5 = "com.sun.security.auth.module.Krb5LoginModule"


@pytest.fixture(autouse=True)
def _fresh_reports(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sees the "reported once" bookkeeping empty."""
    monkeypatch.setattr(driver_properties, "_reported", set())


# --- the JAAS line ------------------------------------------------------------------------------------------------


def test_a_jaas_line_parses_quoted_escaped_and_bare_values() -> None:
    parsed = parse_jaas(
        f'{PLAIN_MODULE}  required\n username="ingest" password="a \\"q\\" b\\\\c;=" debug=true ;', cluster_id="e"
    )
    assert parsed.module == PLAIN_MODULE
    assert parsed.options == {"username": "ingest", "password": 'a "q" b\\c;=', "debug": "true"}


@pytest.mark.parametrize(
    "line",
    [
        'username="u" password="topsecret";',
        f'{PLAIN_MODULE} required username="u" password="topsecret"',
        f'{PLAIN_MODULE} required username password="topsecret";',
        f'{PLAIN_MODULE} required username="u" password="topsecret;',
        f"{PLAIN_MODULE} always password=topsecret;",
    ],
    ids=["no-module", "no-semicolon", "option-without-value", "unterminated-quote", "unknown-flag"],
)
def test_a_malformed_jaas_line_fails_without_showing_it(line: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_jaas(line, cluster_id="east")
    assert "sasl.jaas.config" in str(raised.value)
    assert "'east'" in str(raised.value)
    assert "topsecret" not in str(raised.value)


# --- Java forms -> the driver's librdkafka ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("properties", "expected"),
    [
        pytest.param(
            {
                "security.protocol": "SASL_SSL",
                "sasl.jaas.config": f'{PLAIN_MODULE} required username="u" password="p";',
            },
            {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": "p"},
            id="plain-login-module-gives-username-password-and-implies-plain",
        ),
        pytest.param(
            {
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.jaas.config": f'{SCRAM_MODULE} required username="u" password="p";',
            },
            {"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "u", "sasl.password": "p"},
            id="scram-login-module-gives-username-password",
        ),
        pytest.param(
            {
                "sasl.mechanism": "OAUTHBEARER",
                "sasl.jaas.config": f'{OAUTH_MODULE} required unsecuredLoginStringClaim_sub="alice" '
                'unsecuredLoginLifetimeSeconds="60" unsecuredLoginListClaim_scope=",read,write" '
                'unsecuredLoginExtension_traceId="7";',
            },
            {
                "sasl.mechanism": "OAUTHBEARER",
                "enable.sasl.oauthbearer.unsecure.jwt": "true",
                "sasl.oauthbearer.config": "principal=alice lifeSeconds=60 scope=read,write extension_traceId=7",
            },
            id="unsecured-oauthbearer-gives-librdkafkas-unsecured-jwt",
        ),
        pytest.param(
            {
                "sasl.jaas.config": f'{OAUTH_MODULE} required clientId="app" clientSecret="s" scope="kafka" '
                'extension_logicalCluster="lkc-1";',
                "sasl.login.callback.handler.class": "org.apache.kafka.common.security.oauthbearer."
                "OAuthBearerLoginCallbackHandler",
                "sasl.oauthbearer.token.endpoint.url": "https://idp/token",
            },
            {
                "sasl.mechanism": "OAUTHBEARER",
                "sasl.oauthbearer.method": "oidc",
                "sasl.oauthbearer.client.id": "app",
                "sasl.oauthbearer.client.secret": "s",
                "sasl.oauthbearer.scope": "kafka",
                "sasl.oauthbearer.extensions": "logicalCluster=lkc-1",
                "sasl.oauthbearer.token.endpoint.url": "https://idp/token",
            },
            id="oidc-oauthbearer-gives-librdkafkas-oidc-settings",
        ),
        pytest.param(
            {
                "sasl.kerberos.service.name": "kafka",
                "sasl.jaas.config": f'{KRB5} required useKeyTab=true storeKey=true keyTab="/etc/k.keytab" '
                'principal="svc@EXAMPLE.COM";',
            },
            {
                "sasl.kerberos.service.name": "kafka",
                "sasl.mechanism": "GSSAPI",
                "sasl.kerberos.keytab": "/etc/k.keytab",
                "sasl.kerberos.principal": "svc@EXAMPLE.COM",
            },
            id="krb5-login-module-gives-keytab-and-principal",
        ),
        pytest.param(
            {
                "security.protocol": "SSL",
                "ssl.truststore.location": "/etc/ca.pem",
                "ssl.truststore.type": "PEM",
                "ssl.keystore.location": "/etc/client.p12",
                "ssl.keystore.type": "pkcs12",
                "ssl.keystore.password": "kp",
                "ssl.endpoint.identification.algorithm": "",
                "ssl.enabled.protocols": "TLSv1.3",
                "max.poll.records": "10",
                "fetch.max.wait.ms": "0",
            },
            {
                "security.protocol": "SSL",
                "ssl.ca.location": "/etc/ca.pem",
                "ssl.keystore.location": "/etc/client.p12",
                "ssl.keystore.password": "kp",
                "ssl.endpoint.identification.algorithm": "none",
                "fetch.wait.max.ms": "0",
            },
            id="pem-trust-store-pkcs12-key-store-and-java-only-knobs",
        ),
        pytest.param(
            {"ssl.keystore.location": "/etc/client.pem", "ssl.keystore.type": "PEM", "ssl.key.password": "kp"},
            {
                "ssl.certificate.location": "/etc/client.pem",
                "ssl.key.location": "/etc/client.pem",
                "ssl.key.password": "kp",
            },
            id="pem-key-store-is-one-file-with-certificate-and-key",
        ),
        pytest.param(
            {
                "ssl.truststore.certificates": "-----BEGIN CERTIFICATE-----...",
                "ssl.keystore.certificate.chain": "-----BEGIN CERTIFICATE-----...",
                "ssl.keystore.key": "-----BEGIN PRIVATE KEY-----...",
                "ssl.keystore.type": "PEM",
            },
            {
                "ssl.ca.pem": "-----BEGIN CERTIFICATE-----...",
                "ssl.certificate.pem": "-----BEGIN CERTIFICATE-----...",
                "ssl.key.pem": "-----BEGIN PRIVATE KEY-----...",
            },
            id="inline-pem-stores",
        ),
        pytest.param(
            {
                "sasl.mechanism": "PLAIN",
                "sasl.username": "native",
                "sasl.password": "np",
                "sasl.jaas.config": f'{PLAIN_MODULE} required username="java" password="jp";',
                "ssl.ca.location": "/etc/ca.pem",
                "ssl.truststore.location": "/etc/truststore.jks",
                "ssl.truststore.password": "tp",
            },
            {
                "sasl.mechanism": "PLAIN",
                "sasl.username": "native",
                "sasl.password": "np",
                "ssl.ca.location": "/etc/ca.pem",
            },
            id="librdkafka-keys-win-so-a-jks-store-can-sit-beside-its-pem-export",
        ),
    ],
)
def test_java_forms_translate_for_the_driver(properties: dict[str, str], expected: dict[str, str]) -> None:
    assert librdkafka_properties(properties, cluster_id="east") == expected


@pytest.mark.parametrize(
    ("properties", "named", "command"),
    [
        (
            {"ssl.truststore.location": "/etc/kafka/trust.jks", "ssl.truststore.password": "topsecret"},
            "JKS trust store (the Java default type)",
            "keytool -exportcert -rfc -keystore /etc/kafka/trust.jks",
        ),
        (
            {
                "ssl.truststore.location": "/etc/kafka/trust.p12",
                "ssl.truststore.type": "PKCS12",
                "ssl.truststore.password": "topsecret",
            },
            "PKCS12 trust store",
            "openssl pkcs12 -in /etc/kafka/trust.p12 -nokeys -out ca.pem",
        ),
        (
            {
                "ssl.keystore.location": "/etc/kafka/client.jks",
                "ssl.keystore.type": "JKS",
                "ssl.keystore.password": "topsecret",
            },
            "JKS key store",
            "keytool -importkeystore -srckeystore /etc/kafka/client.jks -destkeystore client.p12 -deststoretype PKCS12",
        ),
    ],
    ids=["jks-trust-store", "pkcs12-trust-store", "jks-key-store"],
)
def test_a_store_the_driver_cannot_read_fails_with_the_command_that_exports_one_it_can(
    properties: dict[str, str], named: str, command: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        librdkafka_properties(properties, cluster_id="east")
    message = str(raised.value)
    assert "'east'" in message
    assert named in message
    assert command in message
    assert "topsecret" not in message


@pytest.mark.parametrize(
    ("properties", "named"),
    [
        ({"sasl.jaas.config": f'{SCRAM_MODULE} required username="u" password="topsecret";'}, "sasl.mechanism"),
        ({"sasl.jaas.config": 'com.example.CustomLoginModule required token="topsecret";'}, "CustomLoginModule"),
    ],
    ids=["scram-without-mechanism", "unknown-login-module"],
)
def test_a_jaas_line_librdkafka_cannot_follow_fails_naming_what_to_write(
    properties: dict[str, str], named: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        librdkafka_properties(properties, cluster_id="east")
    assert named in str(raised.value)
    assert "topsecret" not in str(raised.value)


# --- both clients from one map ----------------------------------------------------------------------------------


def test_the_seeds_jaas_line_reaches_both_clients_as_each_expects() -> None:
    properties = {
        "security.protocol": "SASL_SSL",
        "sasl.jaas.config": f'{PLAIN_MODULE} required username="u" password="p";',
        "ssl.truststore.location": "/etc/truststore.jks",
        "ssl.truststore.password": "tp",
        "ssl.ca.location": "/etc/ca.pem",
    }
    java = java_client_properties(properties, cluster_id="east")
    assert java == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": properties["sasl.jaas.config"],
        "ssl.truststore.location": "/etc/truststore.jks",
        "ssl.truststore.password": "tp",
    }
    driver = librdkafka_properties(properties, cluster_id="east")
    assert driver["sasl.username"] == "u"
    assert driver["ssl.ca.location"] == "/etc/ca.pem"


def test_librdkafkas_unsecured_jwt_becomes_the_java_unsecured_login() -> None:
    java = java_client_properties(
        {
            "sasl.mechanism": "OAUTHBEARER",
            "enable.sasl.oauthbearer.unsecure.jwt": "true",
            "sasl.oauthbearer.config": "principal=alice scope=read,write extension_traceId=7",
        },
        cluster_id="east",
    )
    assert java == {
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.jaas.config": f'{OAUTH_MODULE} required unsecuredLoginStringClaim_sub="alice" '
        'unsecuredLoginListClaim_scope=",read,write" unsecuredLoginExtension_traceId="7";',
    }
    back = librdkafka_properties(java, cluster_id="east")
    assert back["sasl.oauthbearer.config"] == "principal=alice scope=read,write extension_traceId=7"


def test_a_java_key_store_wins_over_librdkafka_pem_files_for_spark() -> None:
    java = java_client_properties(
        {
            "ssl.certificate.location": "/etc/cert.pem",
            "ssl.key.location": "/etc/key.pem",
            "ssl.keystore.location": "/etc/client.p12",
            "ssl.keystore.type": "PKCS12",
        },
        cluster_id="east",
    )
    assert java == {"ssl.keystore.location": "/etc/client.p12", "ssl.keystore.type": "PKCS12"}


# --- keys the product overrides -----------------------------------------------------------------------------------


def test_overridden_keys_are_dropped_from_both_clients_and_reported_once(caplog: pytest.LogCaptureFixture) -> None:
    properties = {
        "group.id": "their-group-topsecret",
        "auto.offset.reset": "latest",
        "enable.auto.commit": "true",
        "key.deserializer": "org.apache.kafka.common.serialization.StringDeserializer",
        "value.deserializer": "org.apache.kafka.common.serialization.StringDeserializer",
        "client.id": "kept",
    }
    with caplog.at_level(logging.WARNING, logger="dynamic_kafka.kafka.driver_properties"):
        for _ in range(3):
            assert librdkafka_properties(properties, cluster_id="east") == {"client.id": "kept"}
            assert java_client_properties(properties, cluster_id="east") == {"client.id": "kept"}
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 5
    for key in ("group.id", "auto.offset.reset", "enable.auto.commit", "key.deserializer", "value.deserializer"):
        assert sum(key in w and "ignored" in w and "'east'" in w for w in warnings) == 1
    assert not any("topsecret" in w for w in warnings)


# --- the driver's client accepts the translation ----------------------------------------------------------------


def test_the_driver_builds_its_client_from_the_seeds_java_properties() -> None:
    """Before: librdkafka refused the map ("Java JAAS configuration is not supported")."""
    cluster = ClusterMetadata(
        cluster_id="east",
        bootstrap_servers="127.0.0.1:1",
        properties={
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": f'{SCRAM_MODULE} required username="u" password="p";',
            "sasl.kerberos.service.name": "kafka",
            "sasl.login.refresh.buffer.seconds": "300",
            "key.deserializer": "org.apache.kafka.common.serialization.ByteArrayDeserializer",
        },
    )
    with AdminConnection(cluster, timeout_s=1) as connection:
        assert connection._client() is not None
        assert "p" in connection._secrets
