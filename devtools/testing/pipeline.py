"""A harness for pipeline tests on real clusters: a metadata file and project config in a folder, a runner, and
the sink read back as exact record sets (through delta-rs, so checking needs no extra Spark job).

Example:
    >>> harness = PipelineHarness(tmp_path, clusters={"east": "127.0.0.1:19092"})  # doctest: +SKIP
    >>> harness.set_streams({"orders": {"east": ["orders-abc"]}})  # doctest: +SKIP
    >>> harness.face().run().records  # doctest: +SKIP
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import yaml

from dynamic_kafka.config.loader import load_project_config
from dynamic_kafka.pipeline import Pipeline
from dynamic_kafka.protocol.context import PipelineContext
from dynamic_kafka.protocol.run import PipelineRunner

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from pathlib import Path

Row = tuple[str, str, int, int, bytes | None]


class PipelineHarness:
    """One pipeline (id ``p``) over named clusters, with its metadata file, config, sink and state in ``folder``."""

    def __init__(
        self,
        folder: Path,
        *,
        clusters: Mapping[str, str | Mapping[str, Any]],
        spark: Callable[[], Any] | None = None,
        spark_config: Mapping[str, Any] | None = None,
        **pipeline: Any,
    ) -> None:
        self.folder = folder
        self.folder.mkdir(parents=True, exist_ok=True)
        self.clusters: dict[str, dict[str, Any]] = {
            name: ({"bootstrap_servers": c} if isinstance(c, str) else dict(c)) for name, c in clusters.items()
        }
        self.spark = spark
        self.spark_config = dict(spark_config or {})
        self.metadata_path = folder / "metadata.yaml"
        self.config_path = folder / "dynamic_kafka.yaml"
        self.pipeline: dict[str, Any] = {"id": "p", "streams": ["orders"], "sink": {"path": "sink"}, **pipeline}
        self.streams: dict[str, dict[str, list[str] | Mapping[str, Any]]] = {}
        self._write_config()
        self.set_streams({})

    def _write_config(self) -> None:
        config: dict[str, Any] = {"metadata_service": {"type": "file", "path": "metadata.yaml"}}
        if self.spark_config:
            config["spark"] = self.spark_config
        config["pipelines"] = [self.pipeline]
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))

    def configure(self, **pipeline: Any) -> None:
        """Changes pipeline settings (e.g. ``drain_removed=True``)."""
        self.pipeline.update(pipeline)
        self._write_config()

    def set_cluster(self, name: str, **entry: Any) -> None:
        """Adds or changes a cluster entry of the metadata file (bootstrap servers, properties, overrides)."""
        self.clusters[name] = entry
        self.set_streams(self.streams)

    def set_streams(self, streams: Mapping[str, Mapping[str, list[str] | Mapping[str, Any]]]) -> None:
        """Rewrites the metadata file's streams (``{stream: {cluster: [topics] or {pattern:, topics:}}}``): a
        metadata change.
        """
        self.streams = {s: dict(placements) for s, placements in streams.items()}
        document = {"clusters": self.clusters, "streams": self.streams}
        self.metadata_path.write_text(yaml.safe_dump(document, sort_keys=False))

    def runner(self) -> PipelineRunner:
        """Return the run protocol's object (``PipelineRunner``) of the pipeline as the config file says now: for
        protocol-level tests (crash points, injected faults, the state store's rows and leases); a test of what a user
        sees goes through :meth:`face`.
        """
        return PipelineRunner(PipelineContext(load_project_config(self.config_path), "p", spark=self.spark))

    def face(self) -> Pipeline:
        """Return the pipeline through the public face (``Pipeline``) as the config file says now: what lands, what
        a run reports, what an operation refuses, read through its public methods.
        """
        return Pipeline(load_project_config(self.config_path), "p", spark=self.spark)

    @property
    def sink_path(self) -> Path:
        """Return the sink table's folder."""
        return self.folder / "sink"

    def sink_rows(self) -> list[Row]:
        """Every sink row as (cluster, topic, partition, offset, value), sorted, duplicates kept."""
        from dynamic_kafka.sink.tables import open_delta_rs

        opened = open_delta_rs(self.face().config.sink_table, doing="reading the sink")
        if opened is None:
            return []
        table = opened.to_pyarrow_table(columns=["cluster", "topic", "partition", "offset", "value"])
        rows = zip(*(table.column(c).to_pylist() for c in table.column_names), strict=True)
        return sorted((c, t, int(p), int(o), v if not isinstance(v, str) else v.encode()) for c, t, p, o, v in rows)

    def sink_values(self) -> list[bytes]:
        """The sink's values, sorted, duplicates kept."""
        return sorted(v for *_, v in self.sink_rows() if v is not None)

    def cli(
        self, *args: str, env: Mapping[str, str] | None = None, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        """Runs ``dynamic-kafka ARGS --config <config> --pipeline p`` in a fresh process."""
        command = [
            sys.executable,
            "-m",
            "dynamic_kafka.cli.main",
            *args,
            "--config",
            str(self.config_path),
            "--pipeline",
            "p",
        ]
        return subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}, check=False
        )
