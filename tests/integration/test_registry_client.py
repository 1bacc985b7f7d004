"""The cached registry client against a real local registry: ids, unknown ids, an unreachable registry, secrets."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from devtools.testing.clusters import distinct_free_ports
from devtools.testing.kafka import unique_name
from dynamic_kafka.errors import SchemaRegistryError, UnknownSchemaError
from dynamic_kafka.registry import RegistryClient, RegistryConfig

if TYPE_CHECKING:
    from devtools.local_registry import LocalRegistry

pytestmark = pytest.mark.integration

CLICK = {"type": "object", "properties": {"user": {"type": "string"}}, "required": ["user"]}


def test_writer_schemas_are_fetched_once_by_id(schema_registries: dict[str, LocalRegistry]) -> None:
    url = schema_registries["east"].url
    subject = unique_name("clicks") + "-value"
    schema_id = SchemaRegistryClient({"url": url}).register_schema(subject, Schema(json.dumps(CLICK), "JSON"))

    client = RegistryClient(RegistryConfig(url=url), owner="east")
    first = client.writer_schema(schema_id)
    assert (first.schema_type, json.loads(first.schema_str)) == ("JSON", CLICK)
    assert client.writer_schema(schema_id) is first
    assert [(version, schema.schema_id) for version, schema in client.subject_schemas(subject)] == [(1, schema_id)]


def test_an_unknown_id_is_not_retriable(schema_registries: dict[str, LocalRegistry]) -> None:
    client = RegistryClient(RegistryConfig(url=schema_registries["east"].url), owner="east")
    with pytest.raises(UnknownSchemaError, match="no schema with id 987654") as caught:
        client.writer_schema(987654)
    assert caught.value.retriable is False


def test_an_unreachable_registry_is_retriable_and_secrets_stay_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    (port,) = distinct_free_ports(1)
    monkeypatch.setenv("DK_TEST_SR_PASSWORD", "pw-not-to-show")
    config = RegistryConfig(url=f"http://127.0.0.1:{port}", username="svc", password="${env:DK_TEST_SR_PASSWORD}")
    client = RegistryClient(config, owner="east")
    with pytest.raises(SchemaRegistryError, match="unreachable") as caught:
        client.writer_schema(1)
    assert caught.value.retriable is True
    assert "pw-not-to-show" not in str(caught.value)
    assert "pw-not-to-show" not in repr(client)
    assert "pw-not-to-show" not in repr(config)
