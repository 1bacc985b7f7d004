"""References in config values: ``${env:NAME}``, ``${env:NAME:-default}`` and ``${file:PATH}``.

Any string value of the project config or a ``file`` metadata file may hold references. When they are resolved
depends on whether the value may be a secret (:func:`is_deferred`):

- a value that may be a secret (under a sensitive key at any place, a Kafka client property, an OTLP export's
  header, a registry's username, an object store's key id) keeps its references in every model, log line, error,
  state row and Dagster metadata value; it is resolved only where a client is built, so loading a config reads no
  secret;
- every other value (a sink path, ``bootstrap_servers``, a schedule...) is resolved when the file is loaded, so one
  config serves several environments (``path: "s3://lake-${env:DEPLOY_ENV}/orders"``).

A reference of any other kind (``${envv:X}``, a typo) is an error in both cases, never a literal. ``${file:PATH}``
reads the file's text without its trailing newline; a relative path is relative to the working directory.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

KINDS = ("env", "file")
ORCHESTRATOR_KINDS = ("airflow",)
"""Kinds an orchestrator's integration resolves inside its own tasks (:func:`reference_kind`): accepted in any
secret value, resolved only there; outside such a task a reference of these kinds is kept as written."""
ReferenceResolver = Callable[[str], "str | None"]
"""Resolves the name of a ``${kind:name}`` reference to its secret, or None when nothing has that name."""
_RESOLVERS: dict[str, ReferenceResolver] = {}
# Any `${kind:...}`, so a mistyped kind is found rather than kept as text. The body may hold `:-` (a default).
_ANY_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*):([^}]*)\}")
# Keys that are not sensitive by name, but whose values are resolved where the client is built (see the docstring).
_DEFERRED_KEYS = frozenset({"username", "access_key_id"})
_DEFERRED_SECTIONS = frozenset({"properties", "headers"})


class UnresolvableReferenceError(ValueError):
    """A reference that cannot be resolved; the message names the reference (never a value) and the fix."""


@dataclass(frozen=True)
class Reference:
    """One ``${kind:name}`` (or ``${env:name:-default}``) found in a value."""

    kind: str
    name: str
    default: str | None

    @property
    def text(self) -> str:
        """The reference as written, without its default (a default may be a literal secret)."""
        return f"${{{self.kind}:{self.name}}}"


def references_in(value: str) -> list[Reference]:
    """Every reference in ``value``, unknown kinds included (see :func:`check_reference`).

    Example:
        >>> references_in("s3://lake-${env:DEPLOY_ENV:-dev}/orders")
        [Reference(kind='env', name='DEPLOY_ENV', default='dev')]
    """
    return [_parse(m) for m in _ANY_REFERENCE.finditer(value)]


def _parse(match: re.Match[str]) -> Reference:
    kind, body = match.group(1), match.group(2)
    name, separator, default = body.partition(":-") if kind == "env" else (body, "", "")
    return Reference(kind, name.strip(), default if separator else None)


@contextmanager
def reference_kind(kind: str, resolve: ReferenceResolver) -> Iterator[None]:
    """Resolves ``${kind:name}`` references with ``resolve`` inside the block, and only there: an orchestrator's
    task registers its own store of secrets this way (the Airflow integration: ``${airflow:conn/NAME}``), so the
    reference is resolved where a client is built inside the task, never when the config is loaded or shown.

    Example:
        >>> with reference_kind("airflow", {"conn/kafka": "s3cr3t"}.get):
        ...     substitute("${airflow:conn/kafka}")
        's3cr3t'
    """
    if kind in KINDS:
        raise ValueError(f"reference kind {kind!r} is built in and cannot be replaced")
    _RESOLVERS[kind] = resolve
    try:
        yield
    finally:
        _RESOLVERS.pop(kind, None)


def check_kind(reference: Reference) -> None:
    """Refuses a reference of an unknown kind (a typo such as ``${envv:X}``).

    Raises:
        UnresolvableReferenceError: names the reference and the kinds there are.
    """
    if reference.kind not in KINDS and reference.kind not in ORCHESTRATOR_KINDS and reference.kind not in _RESOLVERS:
        near = " (did you mean ${env:...}?)" if reference.kind.lower().startswith("env") else ""
        raise UnresolvableReferenceError(
            f"{reference.text} is not a reference dynamic-kafka knows{near}; write ${{env:NAME}}, "
            "${env:NAME:-default} or ${file:PATH}"
        )


def lookup(reference: Reference) -> str:
    """The value ``reference`` names on this host.

    Raises:
        UnresolvableReferenceError: an unknown kind, an unset variable without a default, or an unreadable file.
    """
    check_kind(reference)
    if reference.kind not in KINDS:
        return _registered(reference)
    if reference.kind == "env":
        found = os.environ.get(reference.name, reference.default)
        if found is None:
            raise UnresolvableReferenceError(
                f"environment variable {reference.name!r} is not set; export it, "
                f"or give a default: ${{env:{reference.name}:-VALUE}}"
            )
        return found
    try:
        return Path(reference.name).expanduser().read_text(encoding="utf-8").strip()
    except OSError as e:
        raise UnresolvableReferenceError(
            f"file {reference.name!r} cannot be read ({e.strerror}); create it or fix the path"
        ) from e


def _registered(reference: Reference) -> str:
    resolve = _RESOLVERS.get(reference.kind)
    if resolve is None:
        return reference.text
    found = resolve(reference.name)
    if found is None:
        raise UnresolvableReferenceError(
            f"references {reference.kind} secret {reference.name!r}, which does not exist; create it in "
            f"{reference.kind} or fix the reference"
        )
    return found


def substitute(value: str) -> str:
    """``value`` with every reference replaced by what it names.

    Raises:
        UnresolvableReferenceError: the first reference that cannot be resolved.
    """
    return _ANY_REFERENCE.sub(lambda m: lookup(_parse(m)), value)


def is_reference(value: str) -> bool:
    """Whether ``value`` is references and nothing else (a secret written as a reference, not as a literal)."""
    return bool(value.strip()) and not _ANY_REFERENCE.sub("", value).strip()


def is_deferred(path: tuple[str | int, ...], *, sensitive: Callable[[str], bool]) -> bool:
    """Whether the value at ``path`` (its keys from the document's top) keeps its references until a client is
    built (see the module's docstring); ``sensitive`` tells a key that names a secret.
    """
    keys = [k for k in path if isinstance(k, str)]
    if not keys:
        return False
    return sensitive(keys[-1]) or keys[-1] in _DEFERRED_KEYS or (len(keys) > 1 and keys[-2] in _DEFERRED_SECTIONS)


Problem = tuple[str, str]
"""A key path (``pipelines[0].sink.path``) and what is wrong there."""


def expand(
    document: Any, *, sensitive: Callable[[str], bool], check_deferred: bool = False
) -> tuple[Any, list[Problem]]:
    """``document`` (parsed YAML) with the references of every value that is not deferred (:func:`is_deferred`)
    resolved, and every reference problem: unknown kinds anywhere, unresolvable references in resolved values and,
    with ``check_deferred``, in deferred ones too (looked up, not kept). A value with a problem is left as written.
    """
    problems: list[Problem] = []

    def walk(value: Any, path: tuple[str | int, ...]) -> Any:
        if isinstance(value, Mapping):
            return {k: walk(v, (*path, str(k))) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, (*path, i)) for i, v in enumerate(value)]
        if not isinstance(value, str) or "${" not in value:
            return value
        try:
            if is_deferred(path, sensitive=sensitive):
                for reference in references_in(value):
                    (lookup if check_deferred else check_kind)(reference)
                return value
            return substitute(value)
        except UnresolvableReferenceError as e:
            problems.append((location(path), str(e)))
            return value

    return walk(document, ()), problems


def location(path: tuple[str | int, ...]) -> str:
    """A key path as the user reads it: ``pipelines[0].sink.path``."""
    text = "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in path).removeprefix(".")
    return text or "(top level)"
