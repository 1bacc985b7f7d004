"""JSON Schemas of the two files a user writes, generated from the models that validate them.

``dynamic_kafka.schema.json`` describes the project config (:class:`~dynamic_kafka.config.models.ProjectConfig`) and
``metadata.schema.json`` the file metadata service's file (:class:`~dynamic_kafka.metadata.file.MetadataFile`).
Both ship in this package, so an editor validates and completes the files once their first line names one::

    # yaml-language-server: $schema=<path printed by `python -m dynamic_kafka.schemas`>

The models stay the authority: a file the schema accepts can still fail a cross-field rule (a stream on an
undefined cluster, an unknown stream id) that only loading it checks. The schema describes what a user writes
in YAML, which is not always what pydantic's own schema would say: table locations are text, timestamps are
ISO-8601 text, and offsets initializers have short forms (``earliest``, ``{timestamp: ...}``). ``scripts/
generate_schemas.py`` rewrites the shipped files; a unit test fails when they differ from the models.

Example:
    >>> project_config_schema()["properties"]["pipelines"]["type"]
    'array'
"""

from __future__ import annotations

import json
import typing
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic.json_schema import GenerateJsonSchema

from dynamic_kafka.config.models import ProjectConfig
from dynamic_kafka.initializers import AnyInitializer, TimestampOffsets, _expand_short_form
from dynamic_kafka.metadata.file import MetadataFile
from dynamic_kafka.storage import TableLocation

if TYPE_CHECKING:
    from pydantic import BaseModel
    from pydantic.json_schema import JsonSchemaValue
    from pydantic_core import core_schema

PROJECT_CONFIG = "dynamic_kafka.schema.json"
METADATA_FILE = "metadata.schema.json"

# Set by the loader (load_project_config), never written in the file.
LOADER_FIELDS: dict[type[BaseModel], frozenset[str]] = {ProjectConfig: frozenset({"source"})}

_DIALECT = "https://json-schema.org/draft/2020-12/schema"

# Descriptions of fields whose model declares none (by model title, then field), so that every key an editor
# completes explains itself. A description written on the model's Field wins; the unit test fails on an entry here
# that the model has since described, and on any field left without one.
_KIND = "The initializer, in the full form {kind: ..., ...}; the short forms (earliest, {timestamp: ...}) read better."
FALLBACK_DESCRIPTIONS: dict[str, dict[str, str]] = {
    "ProjectConfig": {
        "metadata_service": "Where streams and clusters come from: a `file`, a `single_cluster`, or your own "
        "`python` service.",
        "spark": "How runs reach Spark: an in-process driver (the default) or a Spark Connect server (`remote`).",
        "pipelines": "The pipelines of the project, each landing some streams into one Delta table.",
    },
    "FileMetadataServiceConfig": {"type": "`file`: a YAML file of clusters and streams."},
    "SingleClusterMetadataServiceConfig": {
        "type": "`single_cluster`: every topic of one cluster is a stream of the same name.",
        "cluster_id": "Stable name of the cluster (rows' `cluster` column, the state's key).",
        "bootstrap_servers": "Comma-separated host:port list.",
        "properties": "Kafka client properties (string values; secrets as ${env:NAME} or ${file:PATH}).",
    },
    "PythonMetadataServiceConfig": {"type": "`python`: a KafkaMetadataService built by your own factory."},
    "PipelineConfig": {
        "starting_offsets": "Where a partition with no committed offset starts: earliest (default), latest, "
        "{timestamp: ...}, {committed: {group_id, reset}}, {specific: {offsets, group_id, fallback}} or {custom: "
        "{function, args}} (a Python function of yours).",
        "stopping_offsets": "Where each run stops: latest (default), {timestamp: ...}, {committed: ...}, "
        "{specific: ...} or {custom: {function, args}} (a Python function of yours, asked at every run).",
        "sink": "The Delta table rows land in, and its dead-letter table.",
        "on_decode_error": "A value that cannot be decoded goes to the dead-letter table (default) or fails the run.",
        "on_data_loss": "Offsets lost to retention or truncation: fail the run (default) or skip them and record "
        "the gap.",
        "on_topic_recreated": "A topic deleted and recreated (new topic id): fail (default) or reset to the new "
        "topic's earliest offsets, once.",
        "isolation_level": "read_committed (default: stop at the last stable offset, skip aborted transactions) "
        "or read_uncommitted.",
        "metadata_retries": "Retries and deadline of each metadata-service call.",
    },
    "BackfillConfig": {"granularity": "Partition size: hourly (default) or daily."},
    "RetryConfig": {
        "attempts": "Attempts of a metadata-service call before the run fails (at least 1).",
        "backoff_seconds": "Wait before the first retry; doubled at each further retry.",
    },
    "ClusterEntry": {
        "bootstrap_servers": "Comma-separated host:port list.",
        "properties": "Kafka client properties (string values; secrets as ${env:NAME} or ${file:PATH}).",
        "starting_offsets": "Where this cluster's partitions without a committed offset start, for every "
        "pipeline; wins over the pipeline's starting_offsets (a failover to a mirror hands over by timestamp).",
        "stopping_offsets": "Where runs stop on this cluster; wins over the pipeline's stopping_offsets.",
        "schema_registry": "The Schema Registry of this cluster's registry-encoded topics.",
    },
    "EarliestOffsets": {"kind": _KIND},
    "LatestOffsets": {"kind": _KIND},
    "TimestampOffsets": {"kind": _KIND},
    "CommittedOffsets": {"kind": _KIND},
    "SpecificOffsets": {"kind": _KIND},
    "CustomOffsets": {"kind": _KIND},
    "MetadataFile": {
        "clusters": "The clusters by id: how to reach each one.",
        "streams": "The streams by id: per cluster id, the topics that make up the stream there.",
    },
}


class _WrittenYaml(GenerateJsonSchema):
    """pydantic's schema generator, adjusted to describe the YAML a user writes rather than the parsed values."""

    def datetime_schema(self, schema: core_schema.DatetimeSchema) -> JsonSchemaValue:
        # ISO-8601 text; without an offset it is UTC, which JSON Schema's `date-time` format would refuse.
        return {"type": "string", "examples": ["2026-01-01T00:00:00Z"]}

    def model_schema(self, schema: core_schema.ModelSchema) -> JsonSchemaValue:
        if schema["cls"] is TableLocation:
            # Written as text and parsed by the field's validator (config._location).
            return {"type": "string", "examples": ["data/orders", "s3://lake/orders"]}
        return super().model_schema(schema)

    def function_before_schema(self, schema: core_schema.BeforeValidatorFunctionSchema) -> JsonSchemaValue:
        function = getattr(schema["function"]["function"], "__func__", schema["function"]["function"])
        if function is _expand_short_form:
            return _initializer_forms(self, schema)
        if function is TimestampOffsets._parse_time.__func__:  # type: ignore[attr-defined]
            return {"anyOf": [self.generate_inner(schema["schema"]), {"type": "string"}]}
        return super().function_before_schema(schema)


def _initializer_forms(generator: _WrittenYaml, schema: core_schema.BeforeValidatorFunctionSchema) -> JsonSchemaValue:
    """The short forms ``offsets._expand_short_form`` accepts, then the full form (``{kind: ..., ...}``)."""
    inner = schema["schema"]
    kinds = list(inner["choices"]) if inner["type"] == "tagged-union" else []
    by_kind = {cls.model_fields["kind"].default: cls for cls in typing.get_args(AnyInitializer)}
    bare = [k for k in kinds if not any(f.is_required() for f in by_kind[k].model_fields.values())]
    forms: list[JsonSchemaValue] = [{"type": "string", "enum": bare}] if bare else []
    for kind in kinds:
        body = by_kind[kind].model_json_schema(schema_generator=_WrittenYaml)
        body = _tidy(body)
        body["properties"].pop("kind")
        if kind == "timestamp":
            value = body["properties"]["timestamp_ms"]
            value["description"] = "ISO-8601 text or epoch milliseconds; the first offset at or after it."
        elif len(body["properties"]) > 0:
            value = body
        else:
            continue
        forms.append({"type": "object", "properties": {kind: value}, "required": [kind], "additionalProperties": False})
    forms.append(generator.generate_inner(inner))
    return {"anyOf": forms}


def _tidy(schema: dict[str, Any]) -> dict[str, Any]:
    """Model descriptions without their docstring examples, and the fallback descriptions of fields."""
    for model in [schema, *schema.get("$defs", {}).values()]:
        if "description" in model:
            model["description"] = model["description"].split("\n\nExample:", 1)[0].strip()
        fallback = FALLBACK_DESCRIPTIONS.get(model.get("title", ""), {})
        for name, field in model.get("properties", {}).items():
            if "description" not in field and name in fallback:
                field["description"] = fallback[name]
    return schema


def _file_schema(model: type[BaseModel], title: str, description: str) -> dict[str, Any]:
    schema = model.model_json_schema(schema_generator=_WrittenYaml)
    for name in LOADER_FIELDS.get(model, frozenset()):
        schema["properties"].pop(name)
    schema = _tidy(schema)
    return {"$schema": _DIALECT, **schema, "title": title, "description": description}


def project_config_schema() -> dict[str, Any]:
    """The JSON Schema of a project config (``dynamic_kafka.yaml``)."""
    return _file_schema(
        ProjectConfig,
        "dynamic-kafka project config",
        "dynamic_kafka.yaml: the metadata service, Spark, and the pipelines that land Kafka streams into Delta.",
    )


def metadata_file_schema() -> dict[str, Any]:
    """The JSON Schema of the ``file`` metadata service's file (clusters and streams)."""
    return _file_schema(
        MetadataFile,
        "dynamic-kafka metadata file",
        "The clusters and, per stream, the topics on each cluster; re-read on every call.",
    )


def generated() -> dict[str, dict[str, Any]]:
    """Every shipped schema by file name, as the models describe it now."""
    return {PROJECT_CONFIG: project_config_schema(), METADATA_FILE: metadata_file_schema()}


def render(schema: dict[str, Any]) -> str:
    """The text of a schema file: stable key order, so a regenerated file differs only where the models do."""
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def shipped_path(name: str) -> Path:
    """Where the shipped schema file ``name`` is (inside the installed package)."""
    return Path(str(resources.files(__package__).joinpath(name)))


def shipped(name: str) -> dict[str, Any]:
    """The shipped schema file ``name``, parsed."""
    loaded: dict[str, Any] = json.loads(shipped_path(name).read_text(encoding="utf-8"))
    return loaded
