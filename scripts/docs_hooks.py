"""MkDocs hooks (mkdocs.yml `hooks:`): the configuration reference is rendered from the config models at every build."""

from __future__ import annotations

from typing import Any

from mkdocs.structure.files import File, Files

from dynamic_kafka.schemas.reference import render_reference

REFERENCE = "reference/configuration.md"


def on_files(files: Files, config: Any) -> Files:
    files.append(File.generated(config, REFERENCE, content=render_reference()))
    return files
