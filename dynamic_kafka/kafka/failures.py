"""Turning confluent-kafka failures into dynamic-kafka errors, and keeping secrets out of their text.

Pure functions (no client, no broker), so unit tests cover every mapping:

- authentication (``_AUTHENTICATION``, ``SASL_AUTHENTICATION_FAILED``, any SASL handshake or mechanism failure)
  -> :class:`~dynamic_kafka.errors.KafkaAuthenticationError`, never retriable;
- transport, resolution, timeouts, all brokers down -> :class:`~dynamic_kafka.errors.ClusterUnreachableError`,
  retriable, naming the bootstrap servers;
- ACL denials -> :class:`~dynamic_kafka.errors.KafkaClientError`, not retriable;
- anything else -> :class:`~dynamic_kafka.errors.KafkaClientError`, retriable when librdkafka says so.

Every text that came from librdkafka passes through :func:`dynamic_kafka.secrets.mask_secrets` with the cluster's
resolved secret values before it reaches a message or a log line. For the same reason the wrapped errors do not
chain the confluent-kafka exception (``from None``): its text is not scrubbed. Its error code stays in ``kafka_error``.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any, Literal

from confluent_kafka import KafkaError, KafkaException

from dynamic_kafka.errors import ClusterUnreachableError, KafkaAuthenticationError, KafkaClientError
from dynamic_kafka.secrets import is_sensitive_key, mask_secrets, secrets_in_text

if TYPE_CHECKING:
    from collections.abc import Mapping

UNREACHABLE_HINT = "Check that the cluster is up and that bootstrap_servers and security.protocol are right."
Failure = Literal["authentication", "unreachable", "authorization", "other"]

_AUTHENTICATION_CODES = frozenset(
    {
        KafkaError._AUTHENTICATION,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError.UNSUPPORTED_SASL_MECHANISM,
        KafkaError.ILLEGAL_SASL_STATE,
    }
)
_UNREACHABLE_CODES = frozenset(
    {
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._RESOLVE,
        KafkaError._TIMED_OUT,
        KafkaError._TIMED_OUT_QUEUE,
        KafkaError._MSG_TIMED_OUT,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.BROKER_NOT_AVAILABLE,
        KafkaError.NETWORK_EXCEPTION,
    }
)
_AUTHORIZATION_CODES = frozenset(
    {
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        KafkaError.DELEGATION_TOKEN_AUTHORIZATION_FAILED,
    }
)
# librdkafka reports some SASL failures under generic codes (_TRANSPORT, _FAIL) with the cause only in the text,
# e.g. "SASL handshake failed (start (-4)): SASL mechanism PLAIN not supported by broker".
_SASL_TEXT = re.compile(r"\bSASL\b.*\b(authenticat\w*|handshake|mechanism)\b", re.IGNORECASE)


def secret_values(raw: Mapping[str, str], resolved: Mapping[str, str]) -> list[str]:
    """The values that must never be shown: every resolved sensitive property, every value that came from a
    ``${env:..}`` / ``${file:..}`` reference, and secrets assigned inside larger values (a JAAS line). Longest
    first, so a secret containing another is scrubbed whole.
    """
    found: set[str] = set()
    for key, value in resolved.items():
        if is_sensitive_key(key) or raw.get(key, value) != value:
            found.add(value)
        found.update(secrets_in_text(value))
    return sorted((s for s in found if s), key=len, reverse=True)


def classify(error: KafkaError) -> Failure:
    """What kind of failure a librdkafka error is."""
    code = error.code()
    if code in _AUTHENTICATION_CODES or _SASL_TEXT.search(error.str() or ""):
        return "authentication"
    if code in _AUTHORIZATION_CODES:
        return "authorization"
    if code in _UNREACHABLE_CODES:
        return "unreachable"
    return "other"


def kafka_error_of(exc: BaseException) -> KafkaError | None:
    """The :class:`KafkaError` a confluent-kafka exception carries, if any."""
    if isinstance(exc, KafkaError):
        return exc
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None


def describe_error(error: KafkaError, secrets: list[str]) -> str:
    """``"<reason> (<CODE>)"`` with secrets scrubbed."""
    return mask_secrets(f"{error.str()} ({error.name()})", secrets)


def to_client_error(
    error: KafkaError,
    *,
    cluster_id: str,
    bootstrap_servers: str,
    operation: str,
    secrets: list[str],
    last_connection_error: KafkaError | None = None,
) -> KafkaClientError:
    """The dynamic-kafka error for a librdkafka error raised while doing ``operation`` on one cluster.

    ``last_connection_error`` (from the error callback) is added to an unreachable cluster's message: a request
    timeout alone does not say why the brokers did not answer.
    """
    text = describe_error(error, secrets)
    kind = classify(error)
    if kind == "authentication":
        return KafkaAuthenticationError(
            f"authentication to {bootstrap_servers} failed while {operation}: {text}",
            cluster_id=cluster_id,
            kafka_error=error.name(),
        )
    if kind == "unreachable":
        if last_connection_error is not None and last_connection_error.code() != error.code():
            text += f"; last connection error: {describe_error(last_connection_error, secrets)}"
        return ClusterUnreachableError(
            f"brokers {bootstrap_servers} did not answer while {operation}: {text}",
            cluster_id=cluster_id,
            kafka_error=error.name(),
            hint=UNREACHABLE_HINT,
        )
    if kind == "authorization":
        return KafkaClientError(
            f"not authorized while {operation} on {bootstrap_servers}: {text}",
            cluster_id=cluster_id,
            retriable=False,
            kafka_error=error.name(),
            hint="Grant the client's principal the ACLs it needs (Describe on topics, Read on the group).",
        )
    return KafkaClientError(
        f"{operation} failed on {bootstrap_servers}: {text}",
        cluster_id=cluster_id,
        retriable=bool(error.retriable()),
        kafka_error=error.name(),
    )


class ScrubbingLogger:
    """What confluent-kafka's ``logger=`` parameter gets: librdkafka's log lines, secrets scrubbed, forwarded to
    Python logging at DEBUG.

    librdkafka logs every failed connection attempt at ERROR; the failures that matter reach the caller as
    exceptions, so these lines are for debugging only and stay quiet by default.
    """

    def __init__(self, target: logging.Logger, secrets: list[str]) -> None:
        self._target = target
        self._secrets = secrets

    def log(self, level: int, msg: str, *args: Any) -> None:
        """Log a librdkafka line with every known secret masked."""
        if not self._target.isEnabledFor(logging.DEBUG):
            return
        text = msg % args if args else msg
        self._target.debug("librdkafka %s: %s", logging.getLevelName(level), mask_secrets(text, self._secrets))
