"""Pipeline keys that moved into a section, still read where they were (docs/decisions/0114-pipeline-sections.md).

A pipeline used to hold its value format, key format and orchestration knobs as flat keys (``value_format``,
``key_format``, ``schedule``, ...) and a ``formats`` entry its value format as ``value_*`` keys. They now live in
``value:``, ``key:`` and ``orchestration:``. :func:`lift_moved_keys` puts each old key in its new place before the
models validate, and says for each one what to write instead: the file keeps loading into the same model, and the
user learns of the change from a warning (``dynamic-kafka check`` lists them as notes). Giving a key both ways is an
error naming both.
"""

from __future__ import annotations

from typing import Any

MOVED: dict[str, tuple[str, str]] = {
    "value_format": ("value", "format"),
    "value_schema": ("value", "schema"),
    "value_schema_file": ("value", "schema_file"),
    "value_expression": ("value", "expression"),
    "value_subject_name_strategy": ("value", "subject_name_strategy"),
    "value_record_name": ("value", "record_name"),
    "key_format": ("key", "format"),
    "key_subject_name_strategy": ("key", "subject_name_strategy"),
    "key_record_name": ("key", "record_name"),
    "schedule": ("orchestration", "schedule"),
    "sensor": ("orchestration", "sensor"),
    "automation_default_status": ("orchestration", "automation_default_status"),
    "backfill": ("orchestration", "backfill"),
}
"""A pipeline's old flat key -> (its section, its key there)."""

MOVED_IN_FORMATS: dict[str, str] = {old: new for old, (section, new) in MOVED.items() if section == "value"}
"""A ``formats`` entry's old key -> its key now (the entry is written like the pipeline's ``value``)."""


def lift_moved_keys(data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``data``, one pipeline as written, with every moved key in its new place, and per moved key what to write
    instead.

    Raises:
        ValueError: a key is given both in its old and its new place (the message names both).
    """
    pipeline = f"pipeline {data['id']!r}" if isinstance(data.get("id"), str) else "a pipeline"
    lifted = dict(data)
    messages: list[str] = []
    for old, (section, new) in MOVED.items():
        if old not in lifted:
            continue
        target = lifted.get(section, {})
        if not isinstance(target, dict):
            continue  # the section itself is malformed: validation names it
        if new in target:
            raise ValueError(
                f"{pipeline}: both `{old}` and `{section}.{new}` are given; `{old}` is the old place of "
                f"`{section}.{new}`: remove `{old}`"
            )
        lifted[section] = {**target, new: lifted.pop(old)}
        messages.append(_moved(pipeline, old, f"{section}.{new}", f"write it under `{section}:` as `{new}:`"))
    formats = lifted.get("formats")
    if isinstance(formats, dict):
        lifted["formats"] = {
            stream: _lift_format_entry(pipeline, str(stream), entry, messages) for stream, entry in formats.items()
        }
    return lifted, messages


def _lift_format_entry(pipeline: str, stream: str, entry: Any, messages: list[str]) -> Any:
    if not isinstance(entry, dict):
        return entry
    lifted = dict(entry)
    for old, new in MOVED_IN_FORMATS.items():
        if old not in lifted:
            continue
        where = f"formats.{stream}"
        if new in lifted:
            raise ValueError(
                f"{pipeline}: both `{where}.{old}` and `{where}.{new}` are given; `{old}` is the old name of "
                f"`{new}`: remove `{old}`"
            )
        lifted[new] = lifted.pop(old)
        messages.append(_moved(pipeline, f"{where}.{old}", f"{where}.{new}", f"rename it to `{new}:`"))
    return lifted


def _moved(pipeline: str, old: str, new: str, fix: str) -> str:
    return (
        f"{pipeline}: `{old}` is deprecated and was read as `{new}`; {fix} (docs/configuration.md; the old key "
        "stops loading in a later release)"
    )
