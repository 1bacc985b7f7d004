"""Real local Schema Registries (Apicurio, Confluent-compatible API): serializers, ids, CLI, restarts, failures."""

from __future__ import annotations

import json
import socket
import stat
import struct
from pathlib import Path

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from devtools.cli.main import main
from devtools.errors import LocalRegistryError
from devtools.local_registry import LocalRegistry, registry_status, start_registries, stop_registries
from devtools.testing.clusters import distinct_free_ports
from devtools.testing.kafka import unique_name
from dynamic_kafka.errors import SchemaRegistryError
from dynamic_kafka.registry import RegistryClient, RegistryConfig

pytestmark = pytest.mark.integration

ORDER_V1 = {
    "type": "record",
    "name": "Order",
    "namespace": "demo",
    "fields": [{"name": "id", "type": "long"}, {"name": "amount", "type": "double"}],
}
ORDER_V2 = {**ORDER_V1, "fields": [*ORDER_V1["fields"], {"name": "note", "type": ["null", "string"], "default": None}]}


def _schema_id(framed: bytes) -> int:
    assert framed[0] == 0, "Confluent wire format starts with magic byte 0"
    schema_id: int = struct.unpack(">I", framed[1:5])[0]
    return schema_id


def test_avro_schema_registered_by_the_serializer_is_fetched_by_its_wire_id(
    schema_registries: dict[str, LocalRegistry],
) -> None:
    client = SchemaRegistryClient({"url": schema_registries["east"].url})
    topic = unique_name("orders")
    context = SerializationContext(topic, MessageField.VALUE)

    first = AvroSerializer(client, json.dumps(ORDER_V1))({"id": 1, "amount": 2.5}, context)
    second = AvroSerializer(client, json.dumps(ORDER_V2))({"id": 2, "amount": 3.5, "note": "hi"}, context)
    assert first is not None
    assert second is not None

    ids = [_schema_id(first), _schema_id(second)]
    assert ids[0] != ids[1]
    assert [json.loads(client.get_schema(i).schema_str or "") for i in ids] == [ORDER_V1, ORDER_V2]
    assert client.get_versions(f"{topic}-value") == [1, 2]
    assert [client.get_version(f"{topic}-value", v).schema_id for v in (1, 2)] == ids
    assert AvroDeserializer(client)(first, context) == {"id": 1, "amount": 2.5}


def test_registries_are_independent(schema_registries: dict[str, LocalRegistry]) -> None:
    subject = unique_name("only-east") + "-value"
    SchemaRegistryClient({"url": schema_registries["east"].url}).register_schema(
        subject, Schema(json.dumps(ORDER_V1), "AVRO")
    )
    assert subject not in SchemaRegistryClient({"url": schema_registries["west"].url}).get_subjects()


def test_up_on_running_registries_changes_nothing_and_status_lists_them(
    schema_registries: dict[str, LocalRegistry], capsys: pytest.CaptureFixture[str]
) -> None:
    base_dir = schema_registries["east"].registry_dir.parent
    again = start_registries([(r.name, r.port) for r in schema_registries.values()], base_dir=base_dir)
    assert again == schema_registries
    assert {s.registry.name: s.running for s in registry_status(base_dir)} == {"east": True, "west": True}

    east = schema_registries["east"]
    assert main(["local-registry", "up", f"east:{east.port}", "--base-dir", str(base_dir), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"east": east.url}
    assert main(["local-registry", "status", "--base-dir", str(base_dir), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {name: r.url for name, r in schema_registries.items()}


def test_up_refuses_a_running_registry_on_another_port(schema_registries: dict[str, LocalRegistry]) -> None:
    east = schema_registries["east"]
    with pytest.raises(LocalRegistryError, match=r"'east' already runs with other settings \(port .*down east"):
        start_registries([("east", east.port + 1)], base_dir=east.registry_dir.parent)


def test_up_refuses_a_port_in_use(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        assert main(["local-registry", "up", f"busy:{port}", "--base-dir", str(tmp_path)]) == 1
    assert f"port {port} (registry busy) is already in use" in capsys.readouterr().err


def test_a_registry_that_does_not_come_up_in_time_is_stopped_with_its_log_tail(tmp_path: Path) -> None:
    (port,) = distinct_free_ports(1)
    with pytest.raises(LocalRegistryError, match=r"(?s)'slow' .* did not come up: .*Last lines of .*registry\.log"):
        start_registries([("slow", port)], base_dir=tmp_path, start_timeout_s=0.5)
    assert [s.running for s in registry_status(tmp_path)] == [False]
    stop_registries(base_dir=tmp_path, purge=True)


def test_schemas_and_ids_survive_a_restart(schema_registries: dict[str, LocalRegistry]) -> None:
    west = schema_registries["west"]
    base_dir = west.registry_dir.parent
    subject = unique_name("kept") + "-value"
    schema_id = SchemaRegistryClient({"url": west.url}).register_schema(subject, Schema(json.dumps(ORDER_V1), "AVRO"))

    assert stop_registries(["west"], base_dir=base_dir) == ["west"]
    assert {s.registry.name: s.running for s in registry_status(base_dir)}["west"] is False
    start_registries([("west", west.port)], base_dir=base_dir)

    client = SchemaRegistryClient({"url": west.url})
    assert json.loads(client.get_schema(schema_id).schema_str or "") == ORDER_V1
    assert client.get_versions(subject) == [1]


def test_basic_auth_registry_refuses_anonymous_calls_and_hides_the_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (port,) = distinct_free_ports(1)
    password = "pw-" + unique_name("s")
    registry = start_registries([("secured", port)], base_dir=tmp_path, basic_auth=("svc", password))["secured"]
    try:
        assert registry.basic_auth_user == "svc"
        with pytest.raises(SchemaRegistryError, match="HTTP 401") as caught:
            RegistryClient(RegistryConfig(url=registry.url), owner="east").subject_schemas("x-value")
        assert caught.value.retriable is False

        monkeypatch.setenv("DK_TEST_REGISTRY_PASSWORD", password)
        config = RegistryConfig(url=registry.url, username="svc", password="${env:DK_TEST_REGISTRY_PASSWORD}")
        schema_id = SchemaRegistryClient(
            {"url": registry.url, "basic.auth.user.info": f"svc:{password}"}
        ).register_schema("secured-value", Schema(json.dumps(ORDER_V1), "AVRO"))
        assert RegistryClient(config, owner="east").writer_schema(schema_id).schema_type == "AVRO"

        auth_file = registry.registry_dir / "config" / "application.properties"
        assert stat.S_IMODE(auth_file.stat().st_mode) == 0o600
        assert registry.pid is not None
        command_line = Path(f"/proc/{registry.pid}/cmdline").read_bytes().decode()
        for shown in (
            command_line,
            (registry.registry_dir / "registry.json").read_text(),
            registry.log_file.read_text(),
        ):
            assert password not in shown
        with pytest.raises(LocalRegistryError, match="already runs with other settings"):
            start_registries([("secured", port)], base_dir=tmp_path)
    finally:
        stop_registries(base_dir=tmp_path, purge=True)
