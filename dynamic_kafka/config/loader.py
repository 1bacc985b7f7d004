"""Reading a project config file: the YAML (a repeated key refused), the references of its values, the paths
relative to the file, and pydantic's errors in the words of the YAML (:func:`load_project_config`).

The models it validates against are :mod:`dynamic_kafka.config.models`; every problem becomes one
:class:`~dynamic_kafka.errors.ConfigError` naming the file, the key path and the fix, before any work starts.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import BaseModel, ValidationError

from dynamic_kafka.config.models import MOVED_KEYS_CONTEXT, ProjectConfig
from dynamic_kafka.config.validation_text import plain_message, suggest_key
from dynamic_kafka.errors import ConfigError
from dynamic_kafka.references import expand
from dynamic_kafka.secrets import is_sensitive_key, mask_secrets

if TYPE_CHECKING:
    from collections.abc import Callable

logger = logging.getLogger("dynamic_kafka.config")

_HAS_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:/")


class _DuplicateKeyError(yaml.constructor.ConstructorError):
    pass


class _StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key repeated in one mapping (plain PyYAML keeps the last one silently,
    so a second ``orders:`` would replace the first stream), or records it in ``duplicates`` when that is a list
    (``check`` reports it with the rest of the file's problems).
    """

    duplicates: list[_DuplicateKeyError] | None = None


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: dict[Any, yaml.Node] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue  # `<<: *defaults` merges, and the keys written after it override on purpose
        key = loader.construct_object(key_node, deep=True)
        try:
            first = seen.get(key)
        except TypeError:
            continue  # an unhashable key: SafeLoader reports it below
        if first is not None:
            error = _DuplicateKeyError(
                None,
                None,
                f"duplicate key {key!r} (first at line {first.start_mark.line + 1}); YAML would keep only the last",
                key_node.start_mark,
            )
            if loader.duplicates is None:
                raise error
            loader.duplicates.append(error)
        seen[key] = key_node
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def parse_yaml(text: str, duplicates: list[_DuplicateKeyError] | None = None) -> Any:
    """Parses YAML like ``yaml.safe_load``, but a key repeated in one mapping is an error (``yaml.YAMLError``), or,
    given a ``duplicates`` list, recorded there (the last one kept, as YAML would).
    """
    loader = _StrictLoader(text)
    loader.duplicates = duplicates
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def load_yaml(path: Path, duplicates: list[ConfigError] | None = None) -> Any:
    """Reads a YAML file, turning I/O and syntax problems into a ConfigError that names the file and line.

    A key repeated in one mapping is refused (naming the key and both lines), not silently replaced; given a
    ``duplicates`` list, each such key is added to it as a ConfigError instead, and the file is read on.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read the file ({e.strerror}).", source=str(path), hint="Check the path.") from e
    found: list[_DuplicateKeyError] | None = None if duplicates is None else []
    try:
        return parse_yaml(text, found)
    except _DuplicateKeyError as e:
        raise _duplicate_key(e, path) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e)
        raise ConfigError(f"malformed YAML{where}: {problem}.", source=str(path), hint="Fix the YAML syntax.") from e
    finally:
        if duplicates is not None and found:
            duplicates += [_duplicate_key(e, path) for e in found]


def _duplicate_key(error: _DuplicateKeyError, path: Path) -> ConfigError:
    mark = error.problem_mark
    where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown line"
    return ConfigError(
        f"{error.problem} at {where}.", source=str(path), hint="Remove or rename one of the two entries."
    )


def expand_references(raw: Any, path: Path) -> Any:
    """``raw``, the parsed file ``path``, with the references of its values resolved (see
    :mod:`dynamic_kafka.references`: secrets stay references until a client is built).

    Raises:
        ConfigError: every reference that cannot be resolved, or is of an unknown kind, each with its key path.
    """
    expanded, problems = expand(raw, sensitive=is_sensitive_key)
    if problems:
        lines = [f"{location}: {message}" for location, message in problems]
        raise ConfigError(
            "unresolvable references:\n  " + "\n  ".join(lines),
            source=str(path),
            hint="\nFix the values listed above.",
        )
    return expanded


def describe_validation_error(error: ValidationError, source: str, model: type[BaseModel] | None = None) -> ConfigError:
    """One ConfigError listing every invalid key as ``a.b[0].c: problem``, in plain words (see
    :func:`validation_problems`).
    """
    lines = [f"{location}: {message}" for location, message in validation_problems(error, model)]
    return ConfigError(
        "invalid configuration:\n  " + "\n  ".join(lines), source=source, hint="\nFix the keys listed above."
    )


def validation_problems(error: ValidationError, model: type[BaseModel] | None = None) -> list[tuple[str, str]]:
    """Every problem of ``error`` as (key path, what to write instead); an unknown key gets the accepted key of
    ``model`` it is closest to ("did you mean"). Values are echoed only where they cannot be secrets.
    """
    problems = []
    for item in error.errors():
        loc = _format_location(item["loc"])
        if item["type"] == "extra_forbidden":
            near = suggest_key(model, item["loc"]) if model is not None else None
            fix = f"did you mean `{near}`?" if near else "remove it or check its spelling"
            problems.append((loc, f"unknown key; {fix}"))
        elif item["type"] == "missing":
            problems.append((loc, "required key is missing"))
        elif "storage" in item["loc"] or isinstance(item.get("input"), dict | list):
            # A storage block may hold credentials, and a whole model's input holds the storage block: never echo.
            problems.append((loc, plain_message(item["type"], item["msg"], item.get("ctx"), None)))
        else:
            shown = _short(item.get("input")) if _may_show(item["loc"], item.get("input")) else None
            example = shown.strip("'\"") if shown is not None else None
            message = plain_message(item["type"], item["msg"], item.get("ctx"), example)
            # Already in the message: a list's fix ("write a list: [orders]"), or a validator quoting the value.
            echoed = message.startswith("write a list:") or (
                item["type"] == "value_error" and example is not None and example in message
            )
            if shown is not None and not echoed:
                message += f" (got {shown})"
            problems.append((loc, mask_secrets(message)))
    return problems


def _format_location(loc: tuple[int | str, ...]) -> str:
    parts: list[str] = []
    for part in loc:
        if isinstance(part, int):
            parts.append(f"[{part}]")
        elif part.startswith(("function-", "tagged-union", "form-")) or part in {"file", "single_cluster", "python"}:
            continue
        else:
            parts.append(("." if parts else "") + part)
    return "".join(parts) or "(top level)"


_OPAQUE_SECTIONS = frozenset({"properties", "conf", "args", "storage", "storage_options", "schema_registry"})
"""Sections whose values may hold credentials under any key name: a validation error never echoes their input."""


def _may_show(loc: tuple[int | str, ...], value: Any) -> bool:
    """Whether a validation error may echo its input: only a scalar (a mapping may hold a secret deeper down), and
    never under a sensitive key or inside a section that holds credentials.
    """
    if not isinstance(value, str | int | float | bool) and value is not None:
        return False
    names = [part for part in loc if isinstance(part, str)]
    return not any(is_sensitive_key(n) or n in _OPAQUE_SECTIONS for n in names)


def _short(value: Any) -> str:
    text = mask_secrets(repr(value))  # e.g. a token among an sc:// URL's parameters
    return text if len(text) <= 60 else text[:57] + "..."


def _resolve_relative(data: dict[str, Any], base: Path) -> dict[str, Any]:
    """Makes relative paths in the raw config relative to the config file's directory."""

    def rebase(value: Any) -> Any:
        # Anything with a scheme ("s3://", or the mistyped "s3:/") is left for the location parser.
        if isinstance(value, str) and not _HAS_SCHEME.match(value) and not Path(value).is_absolute():
            return str(base / value)
        return value

    service = data.get("metadata_service")
    if isinstance(service, dict) and "path" in service:
        data["metadata_service"] = {**service, "path": rebase(service["path"])}
    pipelines = data.get("pipelines")
    if isinstance(pipelines, list):
        rebased = []
        for p in pipelines:
            if isinstance(p, dict):
                p = dict(p)
                if isinstance(p.get("sink"), dict):
                    p["sink"] = {k: (rebase(v) if k.endswith("path") else v) for k, v in p["sink"].items()}
                if "state_path" in p:
                    p["state_path"] = rebase(p["state_path"])
                if isinstance(p.get("bootstrap"), dict) and "path" in p["bootstrap"]:
                    p["bootstrap"] = {**p["bootstrap"], "path": rebase(p["bootstrap"]["path"])}
                if "value_schema_file" in p:  # its old place (config.moved_keys)
                    p["value_schema_file"] = rebase(p["value_schema_file"])
                if isinstance(p.get("value"), dict):
                    p["value"] = _rebase_schema_file(p["value"], rebase)
                if isinstance(p.get("formats"), dict):
                    p["formats"] = {
                        stream: _rebase_schema_file(entry, rebase) if isinstance(entry, dict) else entry
                        for stream, entry in p["formats"].items()
                    }
            rebased.append(p)
        data["pipelines"] = rebased
    publications = data.get("publications")
    if isinstance(publications, list):
        data["publications"] = [
            {k: (rebase(v) if k in ("table", "state_path") else v) for k, v in p.items()} if isinstance(p, dict) else p
            for p in publications
        ]
    return data


def _rebase_schema_file(value_format: dict[str, Any], rebase: Callable[[Any], Any]) -> dict[str, Any]:
    # `value_schema_file` is the old name of a `formats` entry's `schema_file` (config.moved_keys).
    return {k: (rebase(v) if k in ("schema_file", "value_schema_file") else v) for k, v in value_format.items()}


def load_project_config(path: str | Path) -> ProjectConfig:
    """Loads and validates a project config file, resolving the references of its values.

    Raises:
        ConfigError: unreadable file, malformed YAML, unresolvable references, unknown keys, wrong types or invalid
            values; the message names the file and every bad key.

    Example:
        >>> config = load_project_config("dynamic_kafka.yaml")  # doctest: +SKIP
        >>> config.pipeline("orders").sink.path  # doctest: +SKIP
    """
    path = Path(path)
    raw = load_yaml(path)
    if not isinstance(raw, dict):
        raise ConfigError(
            "the file must be a mapping with keys metadata_service, spark and pipelines.",
            source=str(path),
            hint="See the README's 'Project config' section.",
        )
    try:
        return validate_project_data(expand_references(raw, path), path)
    except ValidationError as e:
        raise describe_validation_error(e, str(path), ProjectConfig) from None


def validate_project_data(raw: dict[str, Any], path: Path, moved_keys: list[str] | None = None) -> ProjectConfig:
    """The project config of ``raw``, the parsed content of the file ``path`` (relative paths in it resolved
    against the file's folder).

    A key in its old place (:mod:`dynamic_kafka.config.moved_keys`) is read in its new one, and what to write
    instead goes to ``moved_keys`` when given; else each is logged once, as a warning of the
    ``dynamic_kafka.config`` logger.

    Raises:
        ValidationError: pydantic's, with every problem (see :func:`validation_problems`).
    """
    data = _resolve_relative(dict(raw), path.resolve().parent)
    found: list[str] = []
    try:
        return ProjectConfig.model_validate({**data, "source": str(path)}, context={MOVED_KEYS_CONTEXT: found})
    finally:
        if moved_keys is not None:
            moved_keys += dict.fromkeys(found)
        else:
            for message in dict.fromkeys(found):
                logger.warning("%s: %s", path, message)
