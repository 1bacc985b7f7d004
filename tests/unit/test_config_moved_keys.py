"""The pipeline keys that moved into `value:`, `key:` and `orchestration:` still load from their old flat places,
into the same model, with a warning naming the pipeline, the old key, its new place and the fix."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from dynamic_kafka.config.loader import load_project_config
from dynamic_kafka.config.moved_keys import MOVED
from dynamic_kafka.errors import ConfigError
from dynamic_kafka.operations.check import check_project
from tests.support.builders import a_pipeline

if TYPE_CHECKING:
    from pathlib import Path

OLD: dict[str, Any] = {
    "value_format": "avro",
    "value_subject_name_strategy": "topic_record",
    "value_record_name": "com.acme.Order",
    "key_format": "avro",
    "key_subject_name_strategy": "record",
    "key_record_name": "com.acme.Key",
    "schedule": "*/5 * * * *",
    "sensor": {"interval_seconds": 10},
    "automation_default_status": "running",
    "backfill": {"start": "2026-01-01T00:00:00Z", "granularity": "daily"},
    "formats": {
        "items": {"value_format": "avro", "value_schema_file": "item.avsc"},
        "notes": {"value_format": "json", "value_schema": "id INT"},
        "calls": {"value_format": "expression", "value_expression": "upper(cast(value AS STRING))"},
    },
}
NEW: dict[str, Any] = {
    "value": {"format": "avro", "subject_name_strategy": "topic_record", "record_name": "com.acme.Order"},
    "key": {"format": "avro", "subject_name_strategy": "record", "record_name": "com.acme.Key"},
    "orchestration": {
        "schedule": "*/5 * * * *",
        "sensor": {"interval_seconds": 10},
        "automation_default_status": "running",
        "backfill": {"start": "2026-01-01T00:00:00Z", "granularity": "daily"},
    },
    "formats": {
        "items": {"format": "avro", "schema_file": "item.avsc"},
        "notes": {"format": "json", "schema": "id INT"},
        "calls": {"format": "expression", "expression": "upper(cast(value AS STRING))"},
    },
}


def _project(folder: Path, name: str, *pipelines: dict[str, Any]) -> Path:
    path = folder / name
    entries = [{"id": f"p{i}", "streams": ["orders"], "sink": {"path": f"s{i}"}, **p} for i, p in enumerate(pipelines)]
    path.write_text(yaml.safe_dump({"metadata_service": {"type": "file", "path": "m.yaml"}, "pipelines": entries}))
    return path


def test_the_old_flat_shape_loads_into_the_same_model_as_the_sections(tmp_path: Path) -> None:
    old = load_project_config(_project(tmp_path, "old.yaml", OLD))
    new = load_project_config(_project(tmp_path, "new.yaml", NEW))
    assert old.pipelines == new.pipelines
    # A relative schema file is relative to the config file in both shapes.
    assert old.pipeline("p0").value_format_of("items").schema_file == tmp_path / "item.avsc"
    assert set(MOVED) <= set(OLD) | {key for entry in OLD["formats"].values() for key in entry}  # every one


def test_each_moved_key_is_a_warning_naming_the_pipeline_the_key_its_place_and_the_fix(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = _project(tmp_path, "old.yaml", {"value_format": "string", "schedule": "0 * * * *"}, {"key_format": "string"})
    with caplog.at_level(logging.WARNING, logger="dynamic_kafka.config"):
        load_project_config(path)
    messages = [r.getMessage() for r in caplog.records if r.name == "dynamic_kafka.config"]
    assert messages == [
        f"{path}: pipeline 'p0': `value_format` is deprecated and was read as `value.format`; write it under "
        "`value:` as `format:` (docs/configuration.md; the old key stops loading in a later release)",
        f"{path}: pipeline 'p0': `schedule` is deprecated and was read as `orchestration.schedule`; write it under "
        "`orchestration:` as `schedule:` (docs/configuration.md; the old key stops loading in a later release)",
        f"{path}: pipeline 'p1': `key_format` is deprecated and was read as `key.format`; write it under `key:` as "
        "`format:` (docs/configuration.md; the old key stops loading in a later release)",
    ]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="dynamic_kafka.config"):
        load_project_config(_project(tmp_path, "new.yaml", NEW))
    assert not caplog.records


def test_a_formats_entry_names_its_stream_and_the_new_key(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = _project(tmp_path, "old.yaml", {"formats": {"notes": {"value_format": "string"}}})
    with caplog.at_level(logging.WARNING, logger="dynamic_kafka.config"):
        config = load_project_config(path)
    assert config.pipeline("p0").value_format_of("notes").format == "string"
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}: pipeline 'p0': `formats.notes.value_format` is deprecated and was read as `formats.notes.format`; "
        "rename it to `format:` (docs/configuration.md; the old key stops loading in a later release)"
    ]


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"value_format": "string", "value": {"format": "json"}}, "both `value_format` and `value.format`"),
        ({"schedule": "0 * * * *", "orchestration": {"schedule": "1 * * * *"}},
         "both `schedule` and `orchestration.schedule`"),
        ({"formats": {"notes": {"value_format": "string", "format": "bytes"}}},
         "both `formats.notes.value_format` and `formats.notes.format`"),
    ],
)  # fmt: skip
def test_a_key_given_in_both_places_is_refused_naming_both(
    tmp_path: Path, settings: dict[str, Any], named: str
) -> None:
    with pytest.raises(ConfigError, match=named) as info:
        load_project_config(_project(tmp_path, "both.yaml", settings))
    assert "pipeline 'p0'" in str(info.value)


def test_an_old_key_joins_a_section_written_with_other_keys(tmp_path: Path) -> None:
    mixed = {"value_schema": "id INT", "value": {"format": "json"}}
    config = load_project_config(_project(tmp_path, "mixed.yaml", mixed))
    assert config.pipeline("p0").value.schema_ddl == "id INT"


def test_check_lists_each_moved_key_as_a_note_and_passes(tmp_path: Path) -> None:
    metadata = {"clusters": {"east": {"bootstrap_servers": "b:1"}}, "streams": {"orders": {"east": ["orders"]}}}
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(metadata))
    report = check_project(_project(tmp_path, "old.yaml", {"value_format": "string"}))
    assert report.problems == ()
    assert report.ok
    assert any("pipeline 'p0': `value_format` is deprecated and was read as `value.format`" in n for n in report.notes)


def test_a_dumped_pipeline_validates_again_into_the_same_pipeline() -> None:
    pipeline = a_pipeline(value={"format": "json", "schema": "id INT"}, formats={"clicks": {"format": "string"}})
    assert pipeline.model_dump(mode="json")["value"]["schema"] == "id INT"
    assert type(pipeline).model_validate(pipeline.model_dump(mode="json")) == pipeline
