"""Mapping confluent-kafka errors to dynamic-kafka errors, and keeping secrets out of them. No broker."""

from __future__ import annotations

import base64
import logging

import pytest
from confluent_kafka import KafkaError, KafkaException, Uuid

from dynamic_kafka.errors import ClusterUnreachableError, KafkaAuthenticationError, KafkaClientError
from dynamic_kafka.kafka.client import kafka_topic_id
from dynamic_kafka.kafka.failures import (
    ScrubbingLogger,
    classify,
    kafka_error_of,
    secret_values,
    to_client_error,
)

SECRET = "s3cr3t-Pa55-word"


def _wrap(error: KafkaError, **kwargs: object) -> KafkaClientError:
    return to_client_error(
        error,
        cluster_id="east",
        bootstrap_servers="10.0.0.1:9092,10.0.0.2:9092",
        operation="describing 1 topic(s)",
        secrets=[SECRET],
        **kwargs,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("code", "text", "kind"),
    [
        (KafkaError._AUTHENTICATION, "SASL authentication error: Authentication failed", "authentication"),
        (KafkaError.SASL_AUTHENTICATION_FAILED, "Authentication failed", "authentication"),
        (KafkaError.UNSUPPORTED_SASL_MECHANISM, "mechanism", "authentication"),
        (
            KafkaError._TRANSPORT,
            "SASL handshake failed (start (-4)): SASL mechanism PLAIN not supported",
            "authentication",
        ),
        (KafkaError._TRANSPORT, "Connect to ipv4#127.0.0.1:1 failed: Connection refused", "unreachable"),
        (KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down", "unreachable"),
        (KafkaError._TIMED_OUT, "Failed while waiting for controller: Local: Timed out", "unreachable"),
        (KafkaError._RESOLVE, "Failed to resolve 'nowhere:9092'", "unreachable"),
        (KafkaError.REQUEST_TIMED_OUT, "Broker: Request timed out", "unreachable"),
        (KafkaError.TOPIC_AUTHORIZATION_FAILED, "Broker: Topic authorization failed", "authorization"),
        (KafkaError.GROUP_AUTHORIZATION_FAILED, "Broker: Group authorization failed", "authorization"),
        (KafkaError.UNKNOWN_TOPIC_OR_PART, "Broker: Unknown topic or partition", "other"),
        (KafkaError._INVALID_ARG, "No such configuration property", "other"),
    ],
)
def test_classify(code: int, text: str, kind: str) -> None:
    assert classify(KafkaError(code, text)) == kind


def test_authentication_error_is_not_retriable_and_hides_the_password() -> None:
    error = KafkaError(KafkaError._AUTHENTICATION, f"SASL authentication error: bad password {SECRET}")
    wrapped = _wrap(error)
    assert isinstance(wrapped, KafkaAuthenticationError)
    assert wrapped.retriable is False
    assert wrapped.cluster_id == "east"
    assert wrapped.kafka_error == "_AUTHENTICATION"
    assert SECRET not in str(wrapped)
    assert "***" in str(wrapped)
    assert "10.0.0.1:9092,10.0.0.2:9092" in str(wrapped)


def test_unreachable_names_the_brokers_and_the_last_connection_error() -> None:
    wrapped = _wrap(
        KafkaError(KafkaError._TIMED_OUT, "Failed while waiting for controller: Local: Timed out"),
        last_connection_error=KafkaError(KafkaError._TRANSPORT, "Connect to ipv4#10.0.0.1:9092 failed: refused"),
    )
    assert isinstance(wrapped, ClusterUnreachableError)
    assert wrapped.retriable is True
    assert wrapped.kafka_error == "_TIMED_OUT"
    text = str(wrapped)
    assert "brokers 10.0.0.1:9092,10.0.0.2:9092 did not answer while describing 1 topic(s)" in text
    assert "last connection error: Connect to ipv4#10.0.0.1:9092 failed: refused (_TRANSPORT)" in text


def test_authorization_is_a_client_error_that_retrying_does_not_fix() -> None:
    wrapped = _wrap(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "Broker: Topic authorization failed"))
    assert type(wrapped) is KafkaClientError
    assert wrapped.retriable is False
    assert "ACL" in str(wrapped)


@pytest.mark.parametrize("retriable", [True, False])
def test_other_errors_keep_librdkafkas_retriable_flag(retriable: bool) -> None:
    wrapped = _wrap(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, "Broker: Unknown topic", retriable=retriable))
    assert type(wrapped) is KafkaClientError
    assert wrapped.retriable is retriable
    assert wrapped.kafka_error == "UNKNOWN_TOPIC_OR_PART"


def test_kafka_error_of() -> None:
    error = KafkaError(KafkaError._TRANSPORT, "x")
    assert kafka_error_of(KafkaException(error)) is error
    assert kafka_error_of(error) is error
    assert kafka_error_of(KafkaException("plain text")) is None
    assert kafka_error_of(ValueError("x")) is None


def test_secret_values(monkeypatch: pytest.MonkeyPatch) -> None:
    raw = {
        "sasl.username": "${env:KA_USER}",
        "sasl.password": "literal-password",
        "ssl.key.password": "${env:KA_KEY}",
        "security.protocol": "SASL_SSL",
        "sasl.oauthbearer.config": "principal=me password=embedded-one",
    }
    resolved = {**raw, "sasl.username": "svc-user", "ssl.key.password": "key-pass"}
    found = secret_values(raw, resolved)
    assert set(found) == {"svc-user", "literal-password", "key-pass", "embedded-one"}
    assert "SASL_SSL" not in found
    # Longest first, so a secret that contains another is scrubbed whole.
    assert found == sorted(found, key=len, reverse=True)


def test_scrubbing_logger_forwards_at_debug_without_secrets(caplog: pytest.LogCaptureFixture) -> None:
    target = logging.getLogger("test.kafka_admin.librdkafka")
    log = ScrubbingLogger(target, [SECRET])
    with caplog.at_level(logging.DEBUG, logger=target.name):
        log.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#producer-1", f"auth with {SECRET} failed")
    assert [r.levelno for r in caplog.records] == [logging.DEBUG]
    assert caplog.records[0].getMessage() == "librdkafka ERROR: FAIL [rdkafka#producer-1] auth with *** failed"


def test_scrubbing_logger_is_silent_unless_debug(caplog: pytest.LogCaptureFixture) -> None:
    target = logging.getLogger("test.kafka_admin.quiet")
    with caplog.at_level(logging.INFO, logger=target.name):
        ScrubbingLogger(target, []).log(logging.ERROR, "%s", "connection refused")
    assert caplog.records == []


def test_topic_id_uses_kafkas_url_safe_spelling() -> None:
    msb, lsb = -0x0123456789ABCDEF, 0x7EDCBA9876543210
    raw = (msb % 2**64).to_bytes(8, "big") + lsb.to_bytes(8, "big")
    expected = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    assert "+" in str(Uuid(msb, lsb)) or "/" in str(Uuid(msb, lsb))  # the case that needs converting
    assert kafka_topic_id(Uuid(msb, lsb)) == expected
