"""Secret references and redaction.

Connection properties may hold ``${env:NAME}`` or ``${file:PATH}`` references. They stay references in every
model, log line, error, state row and Dagster metadata value; :func:`resolve_properties` turns them into real
values only where a Kafka or Spark client is built. Independently of references, any property whose key looks
sensitive is masked by :func:`redact_properties`, so a literal password in a config is never shown either.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from dynamic_kafka.errors import ConfigError

REDACTED = "***"

_SENSITIVE_KEY = re.compile(r"password|secret|token|sasl\.jaas\.config|ssl\.key|credential", re.IGNORECASE)
_REFERENCE = re.compile(r"\$\{(env|file):([^}]+)\}")


def is_sensitive_key(key: str) -> bool:
    """Whether a client property key names a secret (password, token, JAAS config, private key...)."""
    return bool(_SENSITIVE_KEY.search(key))


def redact_properties(properties: Mapping[str, str]) -> dict[str, str]:
    """Returns a copy of ``properties`` safe to show: sensitive values replaced by ``***``."""
    return {k: (REDACTED if is_sensitive_key(k) else v) for k, v in properties.items()}


def resolve_value(value: str, *, key: str, cluster_id: str) -> str:
    """Replaces every ``${env:NAME}`` / ``${file:PATH}`` reference in ``value`` with the secret it names.

    Raises:
        ConfigError: a referenced variable is unset or a referenced file cannot be read. The message names the
            reference, never its value.
    """

    def substitute(match: re.Match[str]) -> str:
        kind, name = match.group(1), match.group(2).strip()
        if kind == "env":
            found = os.environ.get(name)
            if found is None:
                raise ConfigError(
                    f"property {key!r} of cluster {cluster_id!r} references environment variable {name!r}, "
                    "which is not set.",
                    hint=f"Export {name} before running.",
                )
            return found
        try:
            return Path(name).expanduser().read_text(encoding="utf-8").strip()
        except OSError as e:
            raise ConfigError(
                f"property {key!r} of cluster {cluster_id!r} references file {name!r}, which cannot be read "
                f"({e.strerror}).",
                hint="Create the file or fix the path.",
            ) from e

    return _REFERENCE.sub(substitute, value)


def resolve_properties(properties: Mapping[str, str], *, cluster_id: str) -> dict[str, str]:
    """Resolves all secret references in a cluster's client properties. Call only when building a client."""
    return {k: resolve_value(v, key=k, cluster_id=cluster_id) for k, v in properties.items()}


def scrub(text: str, secrets: list[str]) -> str:
    """Removes known secret values from a text that came from a foreign library (an error message, a log)."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    return text
