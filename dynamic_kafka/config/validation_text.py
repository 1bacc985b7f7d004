"""Validation errors in the words of the person who wrote the YAML file.

pydantic says "Input should be a valid tuple"; someone who wrote ``streams: orders`` needs "write a list:
[orders]". :func:`plain_message` says what to write for each kind of mistake, and :func:`suggest_key` finds the key
a misspelled one was meant to be, among the keys the model accepts at that place. Leaf module: pydantic only.
"""

from __future__ import annotations

import difflib
import types
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel

_LIST_TYPES = frozenset({"tuple_type", "list_type", "set_type", "frozen_set_type"})
_WHAT_TO_WRITE = {
    "dict_type": "write a mapping (key: value lines, or {key: value})",
    "model_type": "write a mapping (key: value lines, or {key: value})",
    "model_attributes_type": "write a mapping (key: value lines, or {key: value})",
    "int_parsing": "write a whole number",
    "int_type": "write a whole number",
    "int_from_float": "write a whole number (no decimals)",
    "float_parsing": "write a number",
    "float_type": "write a number",
    "bool_parsing": "write true or false",
    "bool_type": "write true or false",
    "string_type": "write text (in quotes if YAML reads it as a number, a boolean or a date)",
    "path_type": "write a path (text)",
    "none_required": "leave it out or write null",
}


def plain_message(error_type: str, pydantic_message: str, ctx: dict[str, Any] | None, example: str | None) -> str:
    """What to write instead, for one pydantic error.

    Args:
        error_type: the error's ``type`` (``tuple_type``, ``literal_error``, ...).
        pydantic_message: pydantic's own message, used for kinds not translated here.
        ctx: the error's ``ctx``.
        example: the wrongly written scalar as it may be shown (None when it must not be echoed): a list
            error then shows the fix itself, ``write a list: [orders]``.

    Example:
        >>> plain_message("tuple_type", "Input should be a valid tuple", None, "orders")
        'write a list: [orders]'
        >>> plain_message("literal_error", "Input should be 'fail' or 'skip'", {"expected": "'fail' or 'skip'"}, None)
        "write 'fail' or 'skip'"
    """
    ctx = ctx or {}
    if error_type in _LIST_TYPES:
        return f"write a list: [{example}]" if example is not None else "write a list, e.g. [a, b]"
    if error_type in _WHAT_TO_WRITE:
        return _WHAT_TO_WRITE[error_type]
    if error_type == "literal_error":
        return f"write {ctx['expected']}"
    if error_type == "union_tag_invalid":
        return f"write one of {ctx['expected_tags']} (not {ctx['tag']!r})"
    if error_type == "union_tag_not_found":
        return f"say which kind with the key {ctx['discriminator']}"
    bounds = {
        "greater_than_equal": ("at least", "ge"),
        "greater_than": ("more than", "gt"),
        "less_than_equal": ("at most", "le"),
        "less_than": ("less than", "lt"),
    }
    if error_type in bounds:
        words, key = bounds[error_type]
        return f"must be {words} {ctx[key]}"
    if error_type == "string_too_short":
        return "must not be empty" if ctx.get("min_length") == 1 else f"needs at least {ctx['min_length']} characters"
    if error_type == "string_pattern_mismatch":
        return f"must match the pattern {ctx['pattern']}"
    return pydantic_message.removeprefix("Value error, ")


def suggest_key(model: type[BaseModel], loc: tuple[int | str, ...]) -> str | None:
    """The accepted key closest to the unknown key at ``loc`` (the last element), or None if none is close.

    Example:
        >>> from dynamic_kafka.config.models import ProjectConfig
        >>> suggest_key(ProjectConfig, ("pipelines", 0, "sink", "dead_leter_path"))
        'dead_letter_path'
    """
    key = loc[-1]
    if not isinstance(key, str):
        return None
    names = sorted({name for m in _models_at(model, loc[:-1]) for name in _keys_of(m)})
    matches = difflib.get_close_matches(key, names, n=1, cutoff=0.75)
    return matches[0] if matches else None


def _keys_of(model: type[BaseModel]) -> set[str]:
    return {field.alias or name for name, field in model.model_fields.items()}


def _models_at(model: type[BaseModel], path: tuple[int | str, ...]) -> list[type[BaseModel]]:
    """The models that may sit at ``path`` inside ``model``. A part no candidate knows (pydantic's union tags such
    as ``file`` or ``function-after[...]``) keeps the candidates, so the walk goes on through it.
    """
    candidates: list[Any] = [model]
    for part in path:
        following = [t for c in _expand(candidates) for t in _step(c, part)]
        candidates = following or candidates
    return [c for c in _expand(candidates) if isinstance(c, type) and issubclass(c, BaseModel)]


def _expand(annotations: list[Any]) -> list[Any]:
    """Annotations with ``Annotated``, ``Optional`` and unions opened up into their member types."""
    found: list[Any] = []
    for annotation in annotations:
        origin = get_origin(annotation)
        if origin is Annotated:
            found += _expand([get_args(annotation)[0]])
        elif origin is Union or origin is types.UnionType:
            found += _expand(list(get_args(annotation)))
        else:
            found.append(annotation)
    return found


def _step(annotation: Any, part: int | str) -> list[Any]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        field = annotation.model_fields.get(str(part))
        return [field.annotation] if field is not None and isinstance(part, str) else []
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (tuple, list, set, frozenset) and isinstance(part, int):
        return [a for a in args if a is not Ellipsis]
    if origin is dict and isinstance(part, str) and len(args) == 2:
        return [args[1]]
    return []
