"""A publication on the session's real clusters: a Delta table (written with delta-rs), a metadata file naming the
stream's one cluster and topic, a project config, and the topic read back as a ``read_committed`` consumer sees it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import yaml
from confluent_kafka import Consumer, KafkaError, TopicPartition
from deltalake import write_deltalake

from devtools.testing.kafka import client_config, create_topic, unique_name
from dynamic_kafka.config.loader import load_project_config
from dynamic_kafka.publish.publisher import Publication

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

Published = tuple[bytes | None, bytes | None, dict[str, bytes]]  # key, value, headers


class PublicationWorld:
    """Publication ``out`` of the Delta table ``table`` (rows ``id``, ``name``, ``ts``) to stream ``out``, whose
    one placement :meth:`place` sets; topics of 3 partitions are created on each named cluster.
    """

    def __init__(
        self,
        folder: Path,
        bootstrap: Mapping[str, str],
        *,
        properties: Mapping[str, Mapping[str, str]] | None = None,
        clients: Mapping[str, Mapping[str, Any]] | None = None,
        registries: Mapping[str, str] | None = None,
        **publication: Any,
    ) -> None:
        """``properties``: a cluster's properties in the metadata file; ``clients``: the test's own client
        settings for a cluster (default: its bootstrap servers alone); ``registries``: a cluster's Schema Registry
        URL."""
        self.registries = dict(registries or {})
        self.folder = folder
        self.bootstrap = dict(bootstrap)
        self.properties = {name: dict(p) for name, p in (properties or {}).items()}
        self.clients: dict[str, Any] = {name: (clients or {}).get(name, servers) for name, servers in bootstrap.items()}
        self.table = folder / "table"
        self.config_path = folder / "dynamic_kafka.yaml"
        self.topics = {cluster: unique_name("published") for cluster in self.bootstrap}
        for cluster, topic in self.topics.items():
            create_topic(self.clients[cluster], topic, 3)
        self.next_id = 0
        config = {
            "metadata_service": {"type": "file", "path": "metadata.yaml"},
            "publications": [
                {
                    "id": "out",
                    "table": "table",
                    "stream": "out",
                    "key": {"format": "string", "column": "name"},
                    "timestamp_column": "ts",
                    "kafka_timeout_seconds": 20,
                    **publication,
                }
            ],
        }
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        self.place(next(iter(self.bootstrap)))

    def place(self, cluster: str) -> None:
        """The stream ``out`` is the topic of ``cluster`` (a metadata change of the write cluster)."""
        document = {
            "clusters": {
                name: {
                    "bootstrap_servers": servers,
                    "properties": self.properties.get(name, {}),
                    **({"schema_registry": {"url": self.registries[name]}} if name in self.registries else {}),
                }
                for name, servers in self.bootstrap.items()
            },
            "streams": {"out": {cluster: [self.topics[cluster]]}},
        }
        (self.folder / "metadata.yaml").write_text(yaml.safe_dump(document, sort_keys=False))

    def append(self, count: int) -> list[int]:
        """Appends ``count`` rows (one table version); returns their ids."""
        ids = list(range(self.next_id, self.next_id + count))
        self.next_id += count
        rows = pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "name": [f"n{i % 5}" for i in ids],
                "ts": pa.array([datetime(2026, 1, 1, tzinfo=UTC)] * count, pa.timestamp("us", tz="UTC")),
            }
        )
        write_deltalake(str(self.table), rows, mode="append")
        return ids

    def publication(self) -> Publication:
        """The publication as the config and metadata files say now."""
        return Publication(load_project_config(self.config_path), "out")

    def cli(self, *args: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """``dynamic-kafka ARGS --config <config> --publication out`` in a fresh process."""
        command = [sys.executable, "-m", "dynamic_kafka.cli.main", *args, "--config", str(self.config_path)]
        command += ["--publication", "out"]
        return subprocess.run(
            command, capture_output=True, text=True, timeout=180, env={**os.environ, **(env or {})}, check=False
        )

    def read(self, cluster: str) -> list[Published]:
        """Every record of ``cluster``'s topic a ``read_committed`` consumer sees, in partition and offset order."""
        consumer = Consumer(
            {
                **client_config(self.clients[cluster]),
                "group.id": unique_name("reader"),
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
            }
        )
        found: list[Published] = []
        partitions = [TopicPartition(self.topics[cluster], p, 0) for p in range(3)]
        try:
            consumer.assign(partitions)
            # A partition's end under read_committed (past aborted records and markers) is its EOF event.
            ended: set[int] = set()
            deadline = time.monotonic() + 30
            while len(ended) < len(partitions):
                if time.monotonic() > deadline:
                    raise AssertionError(f"{cluster}: only partitions {sorted(ended)} were read to their end in 30 s")
                message = consumer.poll(0.2)
                if message is None:
                    continue
                if message.error() is not None:
                    assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                    ended.add(message.partition())
                    continue
                found.append((message.key(), message.value(), dict(message.headers() or [])))
        finally:
            consumer.close()
        return found

    def ids(self, cluster: str) -> list[int]:
        """The ``id`` of every record on ``cluster``, sorted, duplicates kept."""
        import json

        return sorted(json.loads(value)["id"] for _, value, _ in self.read(cluster) if value is not None)
