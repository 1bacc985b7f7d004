"""Every decode input of a run is pinned in its plan (issue 24, item 4): ``json_strict``, each read stream's resolved
value format, a ``schema_file``'s contents and a registry subject's versions (by their immutable ids). A
recovery decodes with the pinned inputs or refuses naming what changed; plans written before the pins recover.

No JVM, no broker, no registry: the registry client is a stand-in holding schemas by id and by subject."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import pytest

from dynamic_kafka.config.models import ProjectConfig
from dynamic_kafka.decoding.prepared import PreparedDecoding, prepare_decoding
from dynamic_kafka.errors import ConfigError, UnknownSchemaError
from dynamic_kafka.metadata.models import ClusterMetadata
from dynamic_kafka.model.plan import DecodePin, PinnedVersion, Plan, Split
from dynamic_kafka.plan.planner import config_pins
from dynamic_kafka.protocol.context import PipelineContext
from dynamic_kafka.protocol.recovery import check_config
from dynamic_kafka.registry.client import RegistryClient, WriterSchema
from dynamic_kafka.registry.config import RegistryConfig
from tests.support.builders import a_split

V1 = {"type": "record", "name": "O", "fields": [{"name": "id", "type": "long"}]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "note", "type": ["null", "string"], "default": None}]}
V3 = {**V1, "fields": [*V2["fields"], {"name": "qty", "type": "int", "default": 0}]}
REGISTRY = "http://registry.invalid"


def project(tmp_path: Path, **pipeline: Any) -> ProjectConfig:
    return ProjectConfig.model_validate(
        {
            "metadata_service": {"type": "file", "path": str(tmp_path / "metadata.yaml")},
            "pipelines": [
                {"id": "p", "streams": ["orders", "clicks"], "sink": {"path": str(tmp_path / "sink")}, **pipeline}
            ],
        }
    )


def split(stream: str = "orders", topic: str = "t", stop: int = 5) -> Split:
    return a_split(0, 0, stop, topic=topic, streams=(stream,))


def planned(config: ProjectConfig, *splits: Split, decoding: tuple[DecodePin, ...] = ()) -> Plan:
    """A plan as a run of ``config`` writes it (pins of its read streams)."""
    pins = config_pins(config.pipeline("p"), {s.stream_id for s in splits if s.stop_offset > s.start_offset})
    return Plan(
        pipeline_id="p",
        run_seq=2,
        splits=splits,
        config_pins=pins,
        decoding=decoding,
        planned_at=datetime.now(UTC),
    )


def refusal(config: ProjectConfig, plan: Plan) -> str | None:
    """The ConfigError a recovery of ``plan`` under ``config`` raises before writing anything, if any."""
    try:
        check_config(PipelineContext(config, "p"), plan)
    except ConfigError as e:
        error = e
    else:
        return None
    assert "dynamic-kafka abandon" in str(error), "the hint names the other way out"
    return str(error)


# --- local settings: refused, naming exactly what changed ---------------------------------------------------------


def test_a_json_strict_flip_under_a_crashed_run_is_refused_naming_json_strict(tmp_path: Path) -> None:
    json_pipeline = {"value": {"format": "json", "schema": "id INT"}, "on_decode_error": "dead_letter"}
    plan = planned(project(tmp_path, **json_pipeline), split())

    error = refusal(project(tmp_path, **json_pipeline, json_strict=True), plan)

    assert error is not None
    assert "json_strict changed" in error
    assert refusal(project(tmp_path, **json_pipeline), plan) is None


def test_each_read_streams_resolved_format_is_pinned_not_the_other_streams(tmp_path: Path) -> None:
    base = {"value": {"format": "json", "schema": "id INT"}}
    plan = planned(project(tmp_path, **base), split("orders"), split("clicks", topic="c", stop=0))
    assert "format:orders" in plan.config_pins
    assert "format:clicks" not in plan.config_pins  # nothing of it is read: its format decides nothing

    # The read stream's own entry changes its schema, the pipeline's default stays: still refused, by name.
    error = refusal(project(tmp_path, **base, formats={"orders": {"format": "json", "schema": "n INT"}}), plan)
    assert error is not None
    assert "the value format of stream 'orders' changed" in error
    # The stream that reads nothing may change.
    assert refusal(project(tmp_path, **base, formats={"clicks": {"format": "string"}}), plan) is None


def test_a_plan_written_before_pins_existed_still_recovers(tmp_path: Path) -> None:
    old = project(tmp_path, value={"format": "json", "schema": "id INT"})
    pins = config_pins(old.pipeline("p"))
    older_keys = ("sink", "key_format", "value_format", "value_schema", "isolation_level", "on_decode_error")
    document = json.loads(planned(old, split()).model_dump_json(exclude={"decoding"}))
    document["config_pins"] = {k: pins[k] for k in older_keys}
    plan = Plan.model_validate(document)  # as an older version wrote it: no decoding, fewer pins
    assert plan.decoding == ()

    assert refusal(project(tmp_path, value={"format": "json", "schema": "id INT"}, json_strict=True), plan) is None
    assert refusal(project(tmp_path, value={"format": "string"}), plan) is not None  # what it pinned is still checked


def test_an_avro_schema_file_is_pinned_by_contents_not_path(tmp_path: Path) -> None:
    first, moved = tmp_path / "item.avsc", tmp_path / "moved.avsc"
    first.write_text(json.dumps(V1))
    moved.write_text(json.dumps(V1))
    config = project(tmp_path, value={"format": "avro", "schema_file": str(first)})
    prepared = prepare_decoding(config.pipeline("p"), [split()], {})
    plan = planned(config, split(), decoding=prepared.pins())
    assert [(p.value_format, p.subject, p.versions) for p in plan.decoding] == [("avro_file", None, ())]

    assert refusal(project(tmp_path, value={"format": "avro", "schema_file": str(moved)}), plan) is None

    first.write_text(json.dumps(V2))
    error = refusal(config, plan)
    assert error is not None
    assert f"the contents of schema_file {str(first)!r} of stream 'orders' changed" in error
    with pytest.raises(ConfigError, match="was edited since the run being finished was planned"):
        prepare_decoding(config.pipeline("p"), [split()], {}, pins=plan.decoding)

    first.unlink()
    error = refusal(config, plan)
    assert error is not None
    assert "(unreadable: No such file or directory)" in error


# --- registry formats: decoded with the pinned ids --------------------------------------------------------------


class Registry:
    """A stand-in for a Schema Registry: schemas by id (never forgotten, as after a soft delete) and the versions a
    subject lists now."""

    def __init__(self) -> None:
        self.by_id: dict[int, WriterSchema] = {}
        self.subjects: dict[str, list[tuple[int, int]]] = {}  # subject -> [(version, id)] listed now

    def register(self, subject: str, version: int, schema_id: int, schema: dict[str, Any]) -> None:
        self.by_id[schema_id] = WriterSchema(schema_id=schema_id, schema_type="AVRO", schema_str=json.dumps(schema))
        self.subjects.setdefault(subject, []).append((version, schema_id))

    def soft_delete(self, subject: str, version: int) -> None:
        self.subjects[subject] = [(v, i) for v, i in self.subjects[subject] if v != version]

    def subject_schemas(self, subject: str) -> list[tuple[int, WriterSchema]]:
        return [(v, self.by_id[i]) for v, i in self.subjects.get(subject, [])]

    def writer_schema(self, schema_id: int) -> WriterSchema:
        if schema_id not in self.by_id:
            raise UnknownSchemaError(schema_id, url=REGISTRY)
        return self.by_id[schema_id]


def prepare(registry: Registry, pins: tuple[DecodePin, ...] = ()) -> PreparedDecoding:
    """The decoding of one planned range of stream ``orders`` (topic ``t``, Avro from ``registry``)."""
    config = project(Path("/nonexistent"), value={"format": "avro"}, schema_registry={"url": REGISTRY})
    clients = {RegistryConfig(url=REGISTRY): cast("RegistryClient", registry)}
    clusters = {"east": ClusterMetadata(cluster_id="east", bootstrap_servers="east:9092")}
    return prepare_decoding(config.pipeline("p"), [split()], clusters, clients=clients, pins=pins)


def registry_pin(*versions: tuple[int, int]) -> DecodePin:
    """The pin of stream ``orders``' topic ``t`` on ``east`` with these ``(version, schema id)``."""
    return DecodePin(
        cluster_id="east",
        topic="t",
        stream_id="orders",
        value_format="avro",
        subject="t-value",
        versions=tuple(PinnedVersion(version=v, schema_id=i) for v, i in versions),
    )


def test_a_recovery_decodes_with_the_pinned_ids_whatever_the_subject_lists_now() -> None:
    registry = Registry()
    registry.register("t-value", 1, 11, V1)
    registry.register("t-value", 2, 12, V2)
    first = prepare(registry)
    pins = first.pins()
    assert pins == (registry_pin((1, 11), (2, 12)),)

    registry.register("t-value", 3, 13, V3)  # a new latest: another reader schema, another set of ids
    registry.soft_delete("t-value", 1)  # records written with id 11 are still in the crashed run's ranges
    assert [v.schema_id for v in prepare(registry).sources[0].versions] == [12, 13]  # a fresh preparation

    assert prepare(registry, pins) == first  # the same versions, the same reader: the same verdict per record


def test_a_pinned_id_gone_from_the_registry_is_refused_naming_it() -> None:
    registry = Registry()
    registry.register("t-value", 1, 11, V1)
    pin = registry_pin((1, 11), (2, 99))
    with pytest.raises(ConfigError, match=r"version 2 \(schema id 99\) of subject 't-value'") as info:
        prepare(registry, (pin,))
    assert info.value.hint is not None
    assert "dynamic-kafka abandon" in info.value.hint
