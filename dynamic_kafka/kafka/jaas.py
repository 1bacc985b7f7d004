r"""The Java client's ``sasl.jaas.config`` line: parsed (for the driver's librdkafka) and rendered (for Spark's client).

A line is ``<login module class> <flag> [<option>=<value> ...];`` where a value is a double-quoted string (``\\``
escapes the next character) or a bare word. Pure: the parsed options hold secrets, so nothing here logs, and errors
name the position of a problem, never the text around it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dynamic_kafka.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Mapping

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
KERBEROS_MODULE = "com.sun.security.auth.module.Krb5LoginModule"

_FLAGS = frozenset({"required", "requisite", "sufficient", "optional"})
_TOKEN = re.compile(
    r"""\s*(?:
        (?P<quoted>"(?:[^"\\]|\\.)*")
      | (?P<word>[^\s="';]+)
      | (?P<symbol>[=;])
    )""",
    re.VERBOSE | re.DOTALL,
)


@dataclass(frozen=True)
class JaasConfig:
    """One login module of a ``sasl.jaas.config`` line. ``options`` may hold secrets: never log it."""

    module: str
    options: dict[str, str]

    @property
    def module_name(self) -> str:
        """The class name without its package (``PlainLoginModule``), for messages."""
        return self.module.rsplit(".", 1)[-1]


def parse_jaas(line: str, *, cluster_id: str) -> JaasConfig:
    """Parses a ``sasl.jaas.config`` value with a single login module (what a Kafka client accepts).

    Raises:
        ConfigError: the line is not ``<module> <flag> <option>=<value>...;``. The message names the problem and
            the token's position, never the line (it holds the password).
    """
    tokens = _tokens(line, cluster_id=cluster_id)
    where = f"cluster {cluster_id!r}: sasl.jaas.config"
    hint = 'Write it as the Java client expects: <LoginModule class> required name="value" ...;'
    if len(tokens) < 3 or tokens[0][0] != "word" or tokens[1][0] != "word" or tokens[1][1].lower() not in _FLAGS:
        raise ConfigError(f"{where} does not start with a login module class and a control flag.", hint=hint)
    if tokens[-1] != ("symbol", ";"):
        raise ConfigError(f"{where} does not end with ';'.", hint=hint)
    body = tokens[2:-1]
    options: dict[str, str] = {}
    if len(body) % 3:
        raise ConfigError(f"{where} has an option without a value.", hint=hint)
    for index in range(0, len(body), 3):
        (kind, name), (_, equals), (value_kind, value) = body[index : index + 3]
        if kind != "word" or equals != "=" or value_kind == "symbol":
            raise ConfigError(f"{where}: option {index // 3 + 1} is not name=value.", hint=hint)
        options[name] = value
    return JaasConfig(module=tokens[0][1], options=options)


def render_jaas(module: str, options: Mapping[str, str]) -> str:
    r"""A JAAS config line. Values are double-quoted, with ``\\`` and ``"`` escaped as the Java parser expects."""
    rendered = " ".join(f'{name}="{_quote(value)}"' for name, value in options.items())
    return f"{module} required {rendered};"


def _tokens(line: str, *, cluster_id: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    position = 0
    text = line.rstrip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            raise ConfigError(
                f"cluster {cluster_id!r}: sasl.jaas.config cannot be parsed at character {position + 1}.",
                hint='Quote option values with double quotes and escape " and \\ inside them with a backslash.',
            )
        kind = match.lastgroup or "word"
        value = match.group(kind)
        if kind == "quoted":
            value = re.sub(r"\\(.)", r"\1", value[1:-1], flags=re.DOTALL)
        tokens.append((kind, value))
        position = match.end()
    return tokens


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')
