"""Bootstrap from an archive, end to end: an archive of Parquet files plus a topic, landing as one table.

1. starts its own local Kafka cluster ``east`` on a free port (stopped and deleted at the end), writes
   ``work/metadata.yaml`` naming it and ``work/archive/`` (two Parquet files: orders of December 2025, plus one of
   1 January 2026 that Kafka also holds) and produces orders around the switch point to ``orders-live``;
2. runs the pipeline twice: the first run lands the archive's rows before ``until`` and Kafka's from ``until``
   (one Delta commit), the second reads nothing new;
3. prints where each order came from.

Run ``.venv/bin/python examples/bootstrap/run.py`` from the repository. It starts over each time (new cluster, new
sink); like the tests it takes a free port, so it runs beside other local clusters.
"""

from __future__ import annotations

import shutil
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from devtools.testing.clusters import local_test_clusters
from devtools.testing.kafka import Record, create_topic, produce
from dynamic_kafka import Pipeline
from dynamic_kafka.config.loader import load_project_config
from dynamic_kafka.sink.tables import open_delta_rs

HERE = Path(__file__).resolve().parent
WORK = HERE / "work"
UNTIL = datetime(2026, 1, 1, tzinfo=UTC)


def write_archive() -> None:
    """Orders 1-5 on the last days of 2025; order 6 at the switch point (Kafka has it, so it is not landed)."""
    archive = WORK / "archive"
    archive.mkdir(parents=True)
    for part, numbers in enumerate([(1, 2, 3), (4, 5, 6)]):
        table = pa.table(
            {
                "order": [f"order-{n}" for n in numbers],
                "created_at": pa.array([UNTIL - timedelta(days=6 - n) for n in numbers], pa.timestamp("ms", "UTC")),
                "source_system": ["legacy"] * len(numbers),
            }
        )
        pq.write_table(table, archive / f"orders-{part}.parquet")


def write_metadata(bootstrap_servers: str) -> None:
    """The metadata file the project config names: stream ``orders`` is topic ``orders-live`` on ``east``."""
    metadata = {
        "clusters": {"east": {"bootstrap_servers": bootstrap_servers}},
        "streams": {"orders": {"east": ["orders-live"]}},
    }
    schema = "# yaml-language-server: $schema=../../../dynamic_kafka/schemas/metadata.schema.json\n"
    (WORK / "metadata.yaml").write_text(schema + yaml.safe_dump(metadata, sort_keys=False))


def produce_live(bootstrap_servers: str) -> None:
    """Orders 5-9 in Kafka: 5 is older than `until` (the archive has it), 6-9 are not."""
    create_topic(bootstrap_servers, "orders-live", 1)
    start = int(UNTIL.timestamp() * 1000)
    produce(
        bootstrap_servers,
        "orders-live",
        [Record(value=f"order-{n}".encode(), timestamp_ms=start + (n - 6) * 3_600_000) for n in range(5, 10)],
    )


def main() -> None:
    """Start a cluster, write the archive and the topic, run the pipeline twice, show where each order landed."""
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir()
    write_archive()
    print("Starting a local Kafka cluster on a free port...", flush=True)
    with (
        tempfile.TemporaryDirectory(prefix="dk-bootstrap-example-") as kafka_dir,
        local_test_clusters(["east"], Path(kafka_dir)) as clusters,
    ):
        servers = clusters["east"].bootstrap_servers
        print(f"  east: {servers}")
        write_metadata(servers)
        produce_live(servers)
        land()


def land() -> None:
    """Run the pipeline twice and show where each order landed from."""
    project = load_project_config(HERE / "dynamic_kafka.yaml")
    pipeline = project.pipeline("orders_history")
    for folder in (pipeline.sink.path, pipeline.resolved_state_path):
        shutil.rmtree(str(folder), ignore_errors=True)
    first = Pipeline(project, "orders_history").run()
    print(f"run 1: {first.records} records, {first.bootstrap_records} of them from {first.bootstrap_source}")
    second = Pipeline(project, "orders_history").run()
    print(f"run 2: {second.status}, {second.records} records")
    sink = open_delta_rs(pipeline.sink_table, doing="reading the example's sink")
    assert sink is not None
    rows = sink.to_pyarrow_table(columns=["value", "cluster", "offset"]).to_pylist()
    for row in sorted(rows, key=lambda r: int(r["value"].split("-")[1])):
        where = "archive" if row["offset"] is None else f"Kafka offset {row['offset']}"
        print(f"  {row['value']}: {where}")


if __name__ == "__main__":
    main()
