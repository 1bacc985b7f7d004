"""Helpers for the Dagster end-to-end tests: per-test project files, topics, producing, reading the sink.

The clusters (``kafka_clusters``) and the Spark session (``spark``) are the session fixtures of tests/conftest.py.
Every test writes its own config and metadata file under ``tmp_path`` and uses topics named ``<prefix>-<uuid>``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from confluent_kafka.admin import AdminClient, NewTopic

from devtools.testing.kafka import client_config, drop_producer, kept_producer, send
from dynamic_kafka.dagster.build import build_definitions
from dynamic_kafka.dagster.names import RESOURCE_KEY
from dynamic_kafka.dagster.resources import DynamicKafkaResource

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from dagster import Definitions

REPO_ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 30.0


def unique_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def create_topic(cluster: str | Mapping[str, str], topic: str, partitions: int) -> None:
    admin = AdminClient(client_config(cluster))
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    futures[topic].result(timeout=TIMEOUT_S)


@dataclass(frozen=True)
class Record:
    """One record to produce; ``timestamp_ms`` None lets the producer stamp it now."""

    partition: int
    value: str
    key: str | None = None
    timestamp_ms: int | None = None


@dataclass(frozen=True, order=True)
class Landed:
    """A produced record's identity in the sink: its coordinates and value."""

    cluster: str
    topic: str
    partition: int
    offset: int
    value: str


def produce(cluster_id: str, cluster: str | Mapping[str, str], topic: str, records: Iterable[Record]) -> list[Landed]:
    """Produces ``records`` in order, waits for every ack, and returns where each landed."""
    producer = kept_producer(cluster)
    landed: list[Landed] = []
    errors: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            landed.append(Landed(cluster_id, msg.topic(), msg.partition(), msg.offset(), msg.value().decode()))

    for r in records:
        kwargs: dict[str, Any] = {"partition": r.partition, "value": r.value.encode(), "on_delivery": on_delivery}
        if r.key is not None:
            kwargs["key"] = r.key.encode()
        if r.timestamp_ms is not None:
            kwargs["timestamp"] = r.timestamp_ms
        send(producer, topic, **kwargs)
        # One record in flight at a time keeps the offsets in the order given (idempotence keeps it anyway).
        producer.flush(TIMEOUT_S)
    remaining = producer.flush(TIMEOUT_S)
    if errors or remaining:
        drop_producer(cluster)
    assert not errors, f"produce failed: {errors}"
    assert remaining == 0, f"{remaining} record(s) not acknowledged"
    return landed


def sasl_project(root: Path, cluster: Any, password: str, **settings: Any) -> Project:
    """A project whose one cluster ``secured`` is the session's SASL/PLAIN cluster, its password ``password``
    (a reference such as ``${env:NAME}``)."""
    properties = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": cluster.sasl_user,
        "sasl.password": password,
    }
    return Project(
        root=root, clusters={"secured": cluster.bootstrap_servers}, properties={"secured": properties}, **settings
    )


def sink_rows(path: Path) -> list[Landed]:
    """Every row of a sink table (via delta-rs, no Spark job), in sink order."""
    from deltalake import DeltaTable

    table = DeltaTable(str(path)).to_pyarrow_table(columns=["cluster", "topic", "partition", "offset", "value"])
    return [Landed(r["cluster"], r["topic"], r["partition"], r["offset"], r["value"]) for r in table.to_pylist()]


@dataclass
class Project:
    """One test's project: a config file and a metadata file in a temporary folder."""

    root: Path
    clusters: Mapping[str, str]  # cluster id -> bootstrap servers
    pipelines: list[dict[str, Any]] = field(default_factory=list)
    publications: list[dict[str, Any]] = field(default_factory=list)
    properties: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # cluster id -> client properties
    spark: Mapping[str, Any] = field(default_factory=lambda: {"master": "local[2]"})  # the config's spark section

    @property
    def config_path(self) -> Path:
        return self.root / "dynamic_kafka.yaml"

    @property
    def metadata_path(self) -> Path:
        return self.root / "metadata.yaml"

    def sink_path(self, pipeline_id: str) -> Path:
        return self.root / "data" / pipeline_id

    def write_metadata(self, streams: Mapping[str, Mapping[str, list[str]]]) -> None:
        clusters: dict[str, dict[str, Any]] = {cid: {"bootstrap_servers": s} for cid, s in self.clusters.items()}
        for cid, properties in self.properties.items():
            clusters[cid]["properties"] = dict(properties)
        text = yaml.safe_dump({"clusters": clusters, "streams": {k: dict(v) for k, v in streams.items()}})
        self.metadata_path.write_text(text, encoding="utf-8")

    def add_pipeline(self, pipeline_id: str, streams: list[str], **settings: Any) -> None:
        self.pipelines.append(
            {
                "id": pipeline_id,
                "streams": streams,
                "value": {"format": "string"},
                "sink": {"path": f"data/{pipeline_id}"},
                # One attempt: tests that break the metadata file should not wait for backoffs.
                "metadata_retries": {"attempts": 1, "backoff_seconds": 0},
                **settings,
            }
        )
        self.write_config()

    def write_config(self) -> None:
        config = {
            "metadata_service": {"type": "file", "path": "metadata.yaml"},
            "spark": dict(self.spark),
            "pipelines": self.pipelines,
            **({"publications": self.publications} if self.publications else {}),
        }
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")

    def definitions(self) -> Definitions:
        return build_definitions(self.config_path)

    def resources(self) -> dict[str, Any]:
        return {RESOURCE_KEY: DynamicKafkaResource()}
