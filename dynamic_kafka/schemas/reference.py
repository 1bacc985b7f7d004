"""The configuration reference of the documentation site, rendered from the JSON Schemas (so from the models).

``make schemas`` writes :func:`render_reference` as ``docs/reference/configuration.md``, committed so that it
reads on the repository too; a unit test fails while the committed page differs from the models, and another
checks that every field of every model is in it.

Example:
    >>> "| `pipelines` |" in render_reference()
    True
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from dynamic_kafka.schemas import METADATA_FILE, PROJECT_CONFIG, metadata_file_schema, project_config_schema


@dataclass
class Section:
    """One block of a file: the keys of one model, reached at ``path`` (e.g. ``pipelines[].sink``)."""

    name: str
    path: str
    description: str
    anchor: str
    rows: list[tuple[str, str, str, str]] = field(default_factory=list)  # key, type, default, description


def _ref_name(schema: dict[str, Any]) -> str | None:
    ref = schema.get("$ref")
    return ref.rsplit("/", 1)[1] if isinstance(ref, str) else None


def _is_block(defs: dict[str, Any], name: str) -> bool:
    return "properties" in defs[name]


def _type(schema: dict[str, Any], defs: dict[str, Any], prefix: str) -> str:
    """A short, readable type: `string`, `earliest | latest`, `list of string`, a link to a block."""
    name = _ref_name(schema)
    if name is not None:
        return f"[{name}](#{prefix}{name.lower()})" if _is_block(defs, name) else _type(defs[name], defs, prefix)
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    if "const" in schema:
        return f"`{schema['const']}`"
    if "anyOf" in schema or "oneOf" in schema:
        options = [o for o in schema.get("anyOf", schema.get("oneOf", [])) if o.get("type") != "null"]
        if any("required" in o and len(o.get("properties", {})) == 1 for o in options):
            return "[offsets initializer](#offsets-initializers)"
        return " or ".join(dict.fromkeys(_type(o, defs, prefix) for o in options))
    kind = schema.get("type")
    if kind == "array":
        return f"list of {_type(schema.get('items', {}), defs, prefix)}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"map of {_type(schema['additionalProperties'], defs, prefix)}"
    return str(kind or "any")


def _default(schema: dict[str, Any], required: bool) -> str:
    if required:
        return "required"
    if "default" not in schema:
        return ""
    value = schema["default"]
    return "" if value in ({}, []) else f"`{json.dumps(value)}`"


def _one_line(text: str) -> str:
    """One table cell: docstring markup (``code``, :func:`name`) as Markdown, on one line."""
    text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text.replace("``", "`"))
    return " ".join(text.split()).replace("|", "\\|")


def _children(schema: dict[str, Any]) -> list[str]:
    """Every $def a property's schema names (through lists, maps and alternatives)."""
    found: list[str] = []
    name = _ref_name(schema)
    if name is not None:
        found.append(name)
    for key in ("anyOf", "oneOf"):
        for option in schema.get(key, []):
            found += _children(option)
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            found += _children(schema[key])
    return found


def sections(schema: dict[str, Any], root: str, prefix: str = "") -> list[Section]:
    """The file's blocks in reading order (breadth first from the top), each listing its keys.

    ``prefix`` starts every block's anchor, so that two files' blocks of the same model have different ones.
    """
    defs = schema.get("$defs", {})
    out: list[Section] = []
    queue: list[tuple[str, dict[str, Any], str]] = [(root, schema, "")]
    seen = {root}
    while queue:
        name, model, path = queue.pop(0)
        section = Section(name, path, _one_line(model.get("description", "")), prefix + name.lower())
        required = set(model.get("required", []))
        for key, prop in model["properties"].items():
            section.rows.append(
                (
                    key,
                    _type(prop, defs, prefix),
                    _default(prop, key in required),
                    _one_line(prop.get("description", "")),
                )
            )
            suffix = "[]" if prop.get("type") == "array" else ".<id>" if "additionalProperties" in prop else ""
            for child in _children(prop):
                if child not in seen and _is_block(defs, child) and not child.endswith("Offsets"):
                    seen.add(child)
                    queue.append((child, defs[child], f"{path}.{key}{suffix}".lstrip(".")))
        out.append(section)
    initializers = [n for n in defs if n.endswith("Offsets")]
    if initializers:
        out.append(_initializers_section(defs, initializers, prefix))
    return out


def _initializers_section(defs: dict[str, Any], names: list[str], prefix: str) -> Section:
    section = Section(
        "Offsets initializers",
        "starting_offsets` / `stopping_offsets",
        "Written in a short form: `earliest`, `latest`, `{timestamp: ...}`, `{committed: {...}}`, "
        "`{specific: {...}}`. The keys of each form:",
        "offsets-initializers",
    )
    for name in names:
        model = defs[name]
        kind = model["properties"]["kind"].get("default", "")
        keys = {k: v for k, v in model["properties"].items() if k != "kind"}
        shown = ", ".join(f"`{k}`: {_type(v, defs, prefix)}" for k, v in keys.items()) or "no keys"
        section.rows.append((kind, shown, "", _one_line(model.get("description", ""))))
    return section


def _table(section: Section, header: tuple[str, str, str, str]) -> list[str]:
    if not section.path:
        heading = "Top level"
    elif section.anchor == "offsets-initializers":
        heading = f"{section.name}: `{section.path}`"
    else:
        heading = f"`{section.path}` ({section.name})"
    lines = [
        f"### {heading} {{#{section.anchor}}}",
        "",
        section.description,
        "",
        "| " + " | ".join(header) + " |",
        "|---|---|---|---|",
    ]
    lines += [f"| `{key}` | {kind} | {default} | {text} |" for key, kind, default, text in section.rows]
    return [*lines, ""]


def render_reference() -> str:
    """The configuration reference page (Markdown)."""
    lines = [
        "# Configuration reference",
        "",
        "Every key of the two files you write, generated from the models that validate them (a test fails while",
        "this page differs from them), so it matches this version. The same descriptions show in your editor once",
        "the first line of a file names its JSON Schema, shipped with the package (`python -m dynamic_kafka.schemas`",
        "prints the paths; [editor validation](../configuration.md#editor-validation)):",
        "",
        "```yaml",
        f"# yaml-language-server: $schema=/path/to/dynamic_kafka/schemas/{PROJECT_CONFIG}",
        "```",
        "",
        "```yaml",
        f"# yaml-language-server: $schema=/path/to/dynamic_kafka/schemas/{METADATA_FILE}",
        "```",
        "",
    ]
    for title, schema, root, prefix in (
        ("Project config (`dynamic_kafka.yaml`)", project_config_schema(), "ProjectConfig", ""),
        ("Metadata file (`type: file` metadata service)", metadata_file_schema(), "MetadataFile", "metadata-"),
    ):
        lines += [f"## {title}", ""]
        for section in sections(schema, root, prefix):
            if section.name == "Offsets initializers":
                if root != "ProjectConfig":
                    continue
                lines += _table(section, ("form", "keys", "", "meaning"))
            else:
                lines += _table(section, ("key", "type", "default", "meaning"))
    return "\n".join(lines)
