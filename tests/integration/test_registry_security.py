"""A cluster's Schema Registry over TLS with basic auth (the session's ``secured_registry``: HTTPS only, its own CA,
user ``reader``), end to end: an Avro stream planned on the driver (writer schemas fetched over HTTPS with the
password from a ``${env:...}`` reference) and decoded in Spark. A wrong password and an untrusted certificate each
fail before anything is written, naming the cluster and the fix, and the password shows nowhere.
"""

from __future__ import annotations

import io
import json
import logging
from typing import TYPE_CHECKING, Any

import fastavro
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from deltalake import DeltaTable

from devtools.testing.kafka import Record, create_topic, produce, unique_name
from devtools.testing.leaks import run_texts
from devtools.testing.pipeline import PipelineHarness
from dynamic_kafka.dagster.errors import failure_metadata
from dynamic_kafka.errors import SchemaRegistryError
from dynamic_kafka.registry import encode_header

if TYPE_CHECKING:
    from pathlib import Path

    from devtools.local_kafka import ClusterEndpoint
    from devtools.local_registry import LocalRegistry

pytestmark = pytest.mark.integration

PASSWORD_VAR = "DYNAMIC_KAFKA_TEST_SECURED_REGISTRY_PASSWORD"
ORDER = {
    "type": "record",
    "name": "Order",
    "fields": [{"name": "id", "type": "long"}, {"name": "amount", "type": "double"}],
}


def _avro_topic(bootstrap: str, registry: LocalRegistry, password: str, count: int) -> str:
    """A new topic holding ``count`` Avro orders whose schema is registered, over HTTPS and basic auth, in
    ``registry``."""
    topic = unique_name("secured_orders")
    create_topic(bootstrap, topic)
    client = SchemaRegistryClient(
        {"url": registry.url, "basic.auth.user.info": f"reader:{password}", "ssl.ca.location": str(registry.ca_file)}
    )
    schema_id = client.register_schema(f"{topic}-value", Schema(json.dumps(ORDER), "AVRO"))
    records = []
    for i in range(count):
        out = io.BytesIO()
        fastavro.schemaless_writer(out, fastavro.parse_schema(ORDER), {"id": i, "amount": i + 0.5})
        records.append(Record(encode_header(schema_id) + out.getvalue()))
    produce(bootstrap, topic, records)
    return topic


def _harness(folder: Path, bootstrap: str, registry: LocalRegistry, topic: str, **settings: Any) -> PipelineHarness:
    schema_registry = {
        "url": registry.url,
        "username": "reader",
        "password": f"${{env:{PASSWORD_VAR}}}",
        "ca_location": str(registry.ca_file),
        **settings,
    }
    harness = PipelineHarness(
        folder,
        clusters={"east": {"bootstrap_servers": bootstrap, "schema_registry": schema_registry}},
        value={"format": "avro"},
    )
    harness.set_streams({"orders": {"east": [topic]}})
    return harness


@pytest.mark.timeout(600)
def test_an_avro_stream_decodes_through_a_tls_basic_auth_registry_and_the_password_shows_nowhere(
    tmp_path: Path,
    kafka_clusters: dict[str, ClusterEndpoint],
    secured_registry: LocalRegistry,
    registry_password: str,
    spark: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    bootstrap = kafka_clusters["east"].bootstrap_servers
    topic = _avro_topic(bootstrap, secured_registry, registry_password, 3)
    harness = _harness(tmp_path, bootstrap, secured_registry, topic)
    harness.spark = lambda: spark
    monkeypatch.setenv(PASSWORD_VAR, registry_password)
    caplog.set_level(logging.DEBUG)

    face = harness.face()
    plan, metadata = face.plan(), face.resolve()
    summary = face.run()

    assert secured_registry.url.startswith("https://")
    assert summary.records == 3
    decoded = DeltaTable(str(harness.sink_path)).to_pyarrow_table(columns=["id", "amount"]).to_pylist()
    assert sorted((r["id"], r["amount"]) for r in decoded) == [(0, 0.5), (1, 1.5), (2, 2.5)]
    outputs = {
        **run_texts(caplog, plan=plan, metadata=metadata, summary=summary),
        "registry state": (secured_registry.registry_dir / "registry.json").read_text(),
        "registry log": secured_registry.log_file.read_text(),
    }
    for where, text in outputs.items():
        assert registry_password not in text, f"the registry password appears in the {where}"


def test_a_wrong_registry_password_fails_naming_the_cluster_and_shows_no_secret(
    tmp_path: Path,
    kafka_clusters: dict[str, ClusterEndpoint],
    secured_registry: LocalRegistry,
    registry_password: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    bootstrap = kafka_clusters["east"].bootstrap_servers
    topic = _avro_topic(bootstrap, secured_registry, registry_password, 1)
    harness = _harness(tmp_path, bootstrap, secured_registry, topic)
    wrong = "wrong-" + registry_password[::-1]
    monkeypatch.setenv(PASSWORD_VAR, wrong)
    caplog.set_level(logging.DEBUG)

    with pytest.raises(SchemaRegistryError) as raised:
        harness.face().run()

    error = raised.value
    assert (error.status, error.retriable) == (401, False)
    assert "'east'" in str(error)
    assert "schema_registry.password" in (error.hint or "")
    dagster_metadata = repr(failure_metadata(error, "p"))  # what the Dagster step failure would carry
    assert "SchemaRegistryError" in dagster_metadata
    for text in (str(error), repr(error.__cause__), caplog.text, dagster_metadata):
        assert wrong not in text
        assert registry_password not in text
    assert not harness.sink_path.exists()


def test_an_untrusted_registry_certificate_says_to_set_ca_location(
    tmp_path: Path,
    kafka_clusters: dict[str, ClusterEndpoint],
    secured_registry: LocalRegistry,
    registry_password: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bootstrap = kafka_clusters["east"].bootstrap_servers
    topic = _avro_topic(bootstrap, secured_registry, registry_password, 1)
    harness = _harness(tmp_path, bootstrap, secured_registry, topic, ca_location=None)
    monkeypatch.setenv(PASSWORD_VAR, registry_password)

    with pytest.raises(SchemaRegistryError) as raised:
        harness.face().run()

    assert raised.value.retriable is False
    assert "schema_registry.ca_location of cluster 'east'" in (raised.value.hint or "")
    assert registry_password not in str(raised.value)
    assert not harness.sink_path.exists()
