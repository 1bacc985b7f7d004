"""The shipped JSON Schemas: generated from the models, valid, and agreeing with the loaders on real files."""

from __future__ import annotations

import re
import typing
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from pydantic import BaseModel

from dynamic_kafka import schemas
from dynamic_kafka.config.loader import load_project_config
from dynamic_kafka.errors import ConfigError
from dynamic_kafka.metadata.file import parse_metadata_file
from dynamic_kafka.schemas.reference import render_reference, sections
from dynamic_kafka.storage import TableLocation

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def validator(name: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(schemas.shipped(name))


def errors(name: str, document: Any) -> list[str]:
    return [e.message for e in validator(name).iter_errors(document)]


@pytest.mark.parametrize("name", [schemas.PROJECT_CONFIG, schemas.METADATA_FILE])
def test_shipped_schema_is_what_the_models_generate(name: str) -> None:
    shipped = schemas.shipped_path(name).read_text(encoding="utf-8")
    assert shipped == schemas.render(schemas.generated()[name]), f"{name} is stale: run `make schemas`"


@pytest.mark.parametrize("name", [schemas.PROJECT_CONFIG, schemas.METADATA_FILE])
def test_shipped_schema_is_a_valid_json_schema_with_a_description_on_every_key(name: str) -> None:
    schema = schemas.shipped(name)
    jsonschema.Draft202012Validator.check_schema(schema)
    undescribed = [
        f"{model.get('title')}.{key}"
        for model in [schema, *schema["$defs"].values()]
        for key, field in model.get("properties", {}).items()
        if not field.get("description")
    ]
    assert undescribed == [], "describe these fields on the model (Field(description=...))"


def test_fallback_descriptions_only_fill_fields_the_models_leave_undescribed() -> None:
    plain = {
        **schemas.ProjectConfig.model_json_schema()["$defs"],
        **schemas.MetadataFile.model_json_schema()["$defs"],
        "ProjectConfig": schemas.ProjectConfig.model_json_schema(),
        "MetadataFile": schemas.MetadataFile.model_json_schema(),
    }
    for title, fields in schemas.FALLBACK_DESCRIPTIONS.items():
        for key in fields:
            assert key in plain[title]["properties"], f"{title}.{key} is no field any more: drop its fallback"
            assert "description" not in plain[title]["properties"][key], f"{title}.{key} is described: drop it"


@pytest.mark.parametrize(
    ("name", "path"),
    [(schemas.PROJECT_CONFIG, p) for p in sorted(EXAMPLES.rglob("dynamic_kafka*.yaml"))]
    + [(schemas.METADATA_FILE, p) for p in sorted(EXAMPLES.rglob("metadata*.yaml"))],
    ids=lambda v: str(v.relative_to(ROOT)) if isinstance(v, Path) else v,
)
def test_example_files_validate_and_name_their_schema(name: str, path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert errors(name, yaml.safe_load(text)) == []
    header = next(line for line in text.splitlines() if line.startswith("# yaml-language-server:"))
    target = (path.parent / header.split("$schema=", 1)[1]).resolve()
    assert target == schemas.shipped_path(name).resolve()


SECRETS = """
metadata_service: {type: single_cluster, cluster_id: east, bootstrap_servers: "127.0.0.1:9092",
                   properties: {sasl.password: "${env:EAST_PW}"}}
pipelines:
  - id: orders
    streams: [orders]
    sink: {path: "s3://lake/orders"}
    storage: {access_key_id: "${env:AWS_ACCESS_KEY_ID}", secret_access_key: "${file:/run/secrets/s3}",
              session_token: "${env:AWS_SESSION_TOKEN}"}
    value: {format: avro}
    schema_registry: {url: "http://127.0.0.1:8081", username: "${env:SR_USER}", password: "${env:SR_PW}"}
"""


def test_secret_references_validate_wherever_the_models_take_them(tmp_path: Path) -> None:
    path = tmp_path / "dynamic_kafka.yaml"
    path.write_text(SECRETS)
    load_project_config(path)
    assert errors(schemas.PROJECT_CONFIG, yaml.safe_load(SECRETS)) == []
    metadata = yaml.safe_load("""
clusters:
  east:
    bootstrap_servers: "127.0.0.1:19092"
    properties: {sasl.jaas.config: "${file:/run/secrets/jaas}"}
    schema_registry: {url: "http://127.0.0.1:8081", password: "${env:SR_PW}"}
streams: {orders: {east: [orders]}}
""")
    assert errors(schemas.METADATA_FILE, metadata) == []


PIPELINE = "metadata_service: {type: file, path: m.yaml}\npipelines:\n  - {id: p, streams: [s], sink: {path: t}, "

# (pipeline keys, accepted by the loader): the schema must say the same.
AGREEMENT = [
    ("starting_offsets: earliest", True),
    ("starting_offsets: latest, stopping_offsets: latest", True),
    ('starting_offsets: {timestamp: "2026-01-01T00:00:00Z"}', True),
    ("starting_offsets: {timestamp: 1700000000000}", True),
    ("starting_offsets: {committed: {group_id: g, reset: earliest}}", True),
    ("starting_offsets: {specific: {offsets: {orders: {'0': 42}}, fallback: latest}}", True),
    ("starting_offsets: {kind: timestamp, timestamp_ms: 1700000000000}", True),
    ("starting_offsets: newest", False),
    ("starting_offsets: {committed: {reset: earliest}}", False),
    ("stopping_offsets: earliest", False),
    ("value: {format: avro}, formats: {clicks: {format: json_schema}}", True),
    ("value: {format: yaml}", False),
    (
        "value: {format: json, schema: 'id INT'}, key: {format: avro, subject_name_strategy: record, record_name: a.K}",
        True,
    ),
    ('orchestration: {backfill: {start: "2026-01-01T00:00:00", granularity: daily}}', True),
    ("orchestration: {backfill: {start: '2026-01-01', granularity: weekly}}", False),
    ("consumer_group: null, max_lag_records: 10", True),
    ("max_records_per_run: 0", False),
    ("sink: {path: t, dead_letter: u}", False),
    ("sinks: {path: t}", False),
    ("storage: {endpoint: 'http://127.0.0.1:9000', path_style: true}", True),
]


@pytest.mark.parametrize(("keys", "accepted"), AGREEMENT)
def test_schema_accepts_and_refuses_what_the_loader_does(tmp_path: Path, keys: str, accepted: bool) -> None:
    text = PIPELINE + keys + "}\n"
    path = tmp_path / "dynamic_kafka.yaml"
    path.write_text(text)
    try:
        load_project_config(path)
        loaded = True
    except ConfigError:
        loaded = False
    assert (loaded, errors(schemas.PROJECT_CONFIG, yaml.safe_load(text)) == []) == (accepted, accepted)


@pytest.mark.parametrize(
    ("cluster", "accepted"),
    [
        ('{bootstrap_servers: "h:9092", starting_offsets: {timestamp: "2026-11-27T12:00:00Z"}}', True),
        ('{bootstrap_servers: "h:9092", properties: {sasl.password: 123}}', False),
        ('{bootstrap_servers: "h:9092", starting_offset: latest}', False),
        ("{properties: {}}", False),
    ],
)
def test_metadata_schema_accepts_and_refuses_what_the_loader_does(tmp_path: Path, cluster: str, accepted: bool) -> None:
    text = f"clusters:\n  east: {cluster}\nstreams: {{orders: {{east: [orders]}}}}\n"
    path = tmp_path / "metadata.yaml"
    path.write_text(text)
    try:
        parse_metadata_file(path)
        loaded = True
    except ConfigError:
        loaded = False
    assert (loaded, errors(schemas.METADATA_FILE, yaml.safe_load(text)) == []) == (accepted, accepted)


def models_in(annotation: Any) -> list[type[BaseModel]]:
    """The config models inside a field's type (through Optional, unions, lists, maps, Annotated)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in models_in(arg)]


def reachable_models(root: type[BaseModel]) -> set[type[BaseModel]]:
    found: set[type[BaseModel]] = set()
    todo = [root]
    while todo:
        model = todo.pop()
        if model in found or model is TableLocation:  # a location is written as text
            continue
        found.add(model)
        todo += [m for f in model.model_fields.values() for m in models_in(f.annotation)]
    return found


def test_committed_configuration_reference_is_what_the_models_render() -> None:
    committed = (Path(__file__).parents[2] / "docs" / "reference" / "configuration.md").read_text(encoding="utf-8")
    assert committed == render_reference(), "docs/reference/configuration.md is stale: run `make schemas`"


def test_configuration_reference_lists_every_field_of_every_model() -> None:
    page = render_reference()
    rows = {
        (section.name, row[0])
        for schema, root in (
            (schemas.project_config_schema(), "ProjectConfig"),
            (schemas.metadata_file_schema(), "MetadataFile"),
        )
        for section in sections(schema, root)
        for row in section.rows
    }
    missing = []
    for root in (schemas.ProjectConfig, schemas.MetadataFile):
        for model in reachable_models(root):
            for field, info in model.model_fields.items():
                if field in schemas.LOADER_FIELDS.get(model, frozenset()):
                    continue
                name = info.alias or field  # as the file writes it (ValueFormatConfig.schema_ddl is `schema`)
                if model.__name__.endswith("Offsets"):
                    kind = model.model_fields["kind"].default
                    ok = ("Offsets initializers", kind) in rows and (name == "kind" or f"`{name}`" in page)
                else:
                    ok = (model.__name__, name) in rows
                if not ok:
                    missing.append(f"{model.__name__}.{name}")
    assert missing == []
    for name in (schemas.PROJECT_CONFIG, schemas.METADATA_FILE):
        assert f"# yaml-language-server: $schema=/path/to/dynamic_kafka/schemas/{name}" in page


HEADED_BLOCK = re.compile(r"```yaml\n(# yaml-language-server: \$schema=\S*/([\w.]+\.schema\.json)\n.*?)```", re.DOTALL)


def test_documented_files_with_a_schema_header_validate() -> None:
    blocks = [
        (page.relative_to(ROOT), name, text)
        for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
        for text, name in HEADED_BLOCK.findall(page.read_text(encoding="utf-8"))
        if yaml.safe_load(text) is not None  # a block showing the header alone
    ]
    assert len(blocks) >= 4  # the README's walkthrough and the getting-started page
    for page, name, text in blocks:
        assert errors(name, yaml.safe_load(text)) == [], f"a {name} example in {page}"
