"""Secret references and redaction.

Connection properties may hold ``${env:NAME}`` or ``${file:PATH}`` references. They stay references in every
model, log line, error, state row and Dagster metadata value; :func:`resolve_properties` turns them into real
values only where a Kafka or Spark client is built. Independently of references, any value under a key that looks
sensitive is masked by :func:`redact`, so a literal password in a config is never shown either.

What "sensitive" means is spelled once, :data:`SENSITIVE_KEY_PATTERN`: it decides which property keys are masked,
which ``key=value`` assignments inside a text are masked (:func:`mask_secrets`, for foreign error texts and
librdkafka logs) and, as ``spark.redaction.regex``, which options Spark masks in its UI and logs.
"""

from __future__ import annotations

import fnmatch
import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field

from dynamic_kafka.errors import ConfigError
from dynamic_kafka.frozen import FrozenModel
from dynamic_kafka.references import KINDS, UnresolvableReferenceError, is_reference, references_in, substitute

if TYPE_CHECKING:
    from collections.abc import Iterable

REDACTED = "***"

SENSITIVE_KEY_PATTERN = r"password|secret|token|credential|access[.]?key|keytab|sasl[.]jaas[.]config|ssl[.]key"
"""Key names that hold secrets (case-insensitive). Plain alternation, valid as a Python and a Java regex."""
SPARK_REDACTION_REGEX = f"(?i){SENSITIVE_KEY_PATTERN}"
"""``spark.redaction.regex``: Spark masks options whose key or value matches it."""
SPARK_OPTIONS_REDACTION_REGEX = f"(?i)url|{SENSITIVE_KEY_PATTERN}"
"""``spark.sql.redaction.options.regex``: the data source options Spark masks in the plans it shows (explain, the
UI's SQL tab), such as the Kafka reader's ``kafka.sasl.jaas.config`` and ``kafka.ssl.keystore.password``. Spark's
default, ``(?i)url``, is kept. A runtime setting, so a Spark Connect session sets it itself."""
SPARK_STRING_REDACTION_REGEX = rf"""(?i)(?:{SENSITIVE_KEY_PATTERN})[\w.-]*\s*[=:]\s*\\?["']?[^\s"'\\;,]+"""
"""``spark.sql.redaction.string.regex``: what Spark masks inside plan and statement texts. Those print a reader's
options as ``key: "..."`` and ``value: "..."`` on separate lines, out of reach of ``spark.redaction.regex``'s
key/value pairing, so the assignment inside the value (``password=\"...\"`` of a JAAS line) is matched itself.
Valid as a Java and a Python regex."""

_SENSITIVE_KEY = re.compile(SENSITIVE_KEY_PATTERN, re.IGNORECASE)
# ``<sensitive key>[more key] = <value>`` (or ``:``) inside a text: a JAAS line, a foreign error message. The value
# is a quoted string (group 2 or 3) or a bare word (group 4).
_ASSIGNMENT = re.compile(
    rf"""((?:{SENSITIVE_KEY_PATTERN})[\w.-]*\s*[=:]\s*)(?:"((?:[^"\\]|\\.)*)"|'([^']*)'|([^\s"';,]+))""",
    re.IGNORECASE,
)


def is_sensitive_key(key: str) -> bool:
    """Whether a client property key names a secret (password, token, JAAS config, private key...)."""
    return bool(_SENSITIVE_KEY.search(key))


def redact(value: Any, *, key: str = "") -> Any:
    """``value`` made safe to show, for structures (a model field, a parsed YAML section): under a sensitive
    ``key``, or a sensitive key at any depth of nested mappings and sequences, the value becomes ``***``.
    Anything else is returned as is (a nested pydantic model masks itself in its own ``repr``).

    Example:
        >>> redact({"conf": {"spark.hadoop.fs.s3a.secret.key": "abc", "spark.master": "local"}})
        {'conf': {'spark.hadoop.fs.s3a.secret.key': '***', 'spark.master': 'local'}}
    """
    if key and is_sensitive_key(key) and value is not None:
        return REDACTED
    if isinstance(value, Mapping):
        return {k: redact(v, key=str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(redact(v) for v in value)
    return value


def masked_repr_args(args: Iterable[tuple[str | None, Any]]) -> Iterable[tuple[str | None, Any]]:
    """A pydantic model's ``__repr_args__`` with :func:`redact` applied to every field: what every config and
    metadata model shows in ``repr`` and ``str``.
    """
    for name, value in args:
        yield name, redact(value, key=name or "")


def fingerprint_form(key: str, value: str) -> str:
    """What a metadata fingerprint hashes for one property: the value, except that a sensitive literal becomes
    ``***`` (its references stay, they are names, not secrets), so no hash is ever computed over a secret.
    """
    if not is_sensitive_key(key):
        return value
    return value if is_reference(value) else REDACTED


class SecretReferencePolicy(FrozenModel):
    """Which ``${env:...}`` / ``${file:...}`` references a metadata service the user does not write by hand may
    make the host resolve (the project config's ``secret_references``).

    References in the user's own files (the project config and a ``file`` metadata service it names) are always
    honoured. Every other service (``python`` import paths, an in-memory service given by a program, a future
    remote service) is a source the host does not control: honouring any reference it returns would let it make
    the host send ``${env:ANY_VAR}`` or ``${file:~/.ssh/id_rsa}`` to a broker it names. Such a reference is
    resolved only if listed here.

    Example:
        >>> SecretReferencePolicy(env=("EAST_KAFKA_PASSWORD",)).allows("env", "EAST_KAFKA_PASSWORD")
        True
    """

    env: tuple[str, ...] = Field((), description="Environment variables such services may reference.")
    files: tuple[str, ...] = Field(
        (), description="Files such services may reference (shell-style patterns, e.g. '/run/secrets/kafka-*')."
    )

    def allows(self, kind: str, name: str) -> bool:
        """Whether the reference ``${kind:name}`` may be resolved."""
        if kind == "env":
            return name in self.env
        path = str(Path(name).expanduser())
        return any(fnmatch.fnmatchcase(path, str(Path(p).expanduser())) for p in self.files)


def check_references(
    properties: Mapping[str, str], *, cluster_id: str, policy: SecretReferencePolicy, source: str
) -> None:
    """Refuses every reference in ``properties`` that ``policy`` does not list.

    Raises:
        ConfigError: names the cluster, the key and the reference (a name, never a value), and the fix.
    """
    for key, value in properties.items():
        for reference in references_in(value):
            kind, name = reference.kind, reference.name
            if kind not in KINDS:
                # An orchestrator's store (Airflow connections...) holds every secret of the deployment: a service
                # the host does not control never names one of them.
                raise ConfigError(
                    f"property {key!r} of cluster {cluster_id!r} from {source} references {reference.text}: only "
                    f"your own config files may use {kind} references.",
                    hint="Write the reference in the project config or its file metadata service instead.",
                )
            if not policy.allows(kind, name):
                listed = "env" if kind == "env" else "files"
                raise ConfigError(
                    f"property {key!r} of cluster {cluster_id!r} from {source} references "
                    f"${{{kind}:{name}}}, which that service may not use: only references written in your own "
                    "config files, or listed in secret_references, are resolved.",
                    hint=f"If the reference is expected, add {name!r} to secret_references.{listed} in the "
                    "project config.",
                )


def resolve_value(value: str, *, key: str, cluster_id: str) -> str:
    """Replaces every ``${env:NAME}`` / ``${env:NAME:-default}`` / ``${file:PATH}`` reference in ``value`` with
    what it names (see :mod:`dynamic_kafka.references`).

    Raises:
        ConfigError: a reference is of an unknown kind, names an unset variable or an unreadable file. The message
            names the reference, never its value.
    """
    try:
        return substitute(value)
    except UnresolvableReferenceError as e:
        raise ConfigError(f"property {key!r} of cluster {cluster_id!r}: {e}.") from e


def resolve_properties(properties: Mapping[str, str], *, cluster_id: str) -> dict[str, str]:
    """Resolves all secret references in a cluster's client properties. Call only when building a client."""
    return {k: resolve_value(v, key=k, cluster_id=cluster_id) for k, v in properties.items()}


def secrets_in_text(text: str) -> list[str]:
    """The values a text assigns to sensitive keys (``password="p"`` in a JAAS line gives ``p``)."""
    return [next(g for g in m.groups()[1:] if g is not None) for m in _ASSIGNMENT.finditer(text)]


def mask_secrets(text: str, known: Iterable[str] = ()) -> str:
    """The one masking function for texts from foreign libraries (error messages, log lines): every ``known``
    secret value (longest first, so a secret containing another is masked whole) and the value of every
    sensitive ``key=value`` assignment become ``***``.

    Example:
        >>> mask_secrets('login failed: password="hunter2" user=u1', known=["u1"])
        'login failed: password=*** user=***'
    """
    for secret in sorted((s for s in known if s), key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return _ASSIGNMENT.sub(lambda m: m.group(1) + REDACTED, text)


# py4j's loggers that dump every Python -> JVM command and its answer at DEBUG.
_PY4J_PROTOCOL_LOGGERS = ("py4j.clientserver", "py4j.java_gateway")


class _Py4JDebugFilter(logging.Filter):
    """Drops the py4j protocol loggers' DEBUG records. Their command dumps carry every argument passed to the JVM
    verbatim, one per line, so a Kafka option's key and its secret value sit on separate lines where no masking
    pattern can pair them; their other DEBUG records are gateway chatter nobody needs next to a run's log.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno > logging.DEBUG


_PY4J_FILTER = _Py4JDebugFilter()


def guard_py4j_logging() -> None:
    """Keeps Kafka credentials out of py4j's DEBUG logging (which would otherwise print the JAAS line and every
    other connector option a read passes to Spark). Idempotent; called when a Spark session is built and before
    a read is planned on a session built elsewhere.
    """
    for name in _PY4J_PROTOCOL_LOGGERS:
        logger = logging.getLogger(name)
        if _PY4J_FILTER not in logger.filters:
            logger.addFilter(_PY4J_FILTER)
