"""Bootstrap from an archive, end to end: an archive of Parquet files plus a topic, landing as one table.

1. writes ``archive/`` (two Parquet files: orders of December 2025, plus one of 1 January 2026 that Kafka also
   holds) and produces orders around the switch point to ``orders-live`` on the local east cluster;
2. runs the pipeline twice: the first run lands the archive's rows before ``until`` and Kafka's from ``until``
   (one Delta commit), the second reads nothing new;
3. prints where each order came from.

Start the cluster first (``.venv/bin/python -m devtools local-kafka up``), then run
``.venv/bin/python examples/bootstrap/run.py`` from the repository. It starts over each time (new sink).
"""

from __future__ import annotations

import contextlib
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from confluent_kafka import KafkaException

from devtools.testing.kafka import Record, delete_topics, produce, recreate_topic
from dynamic_kafka.config import load_project_config
from dynamic_kafka.runner import PipelineRunner
from dynamic_kafka.sink.tables import open_delta_rs

HERE = Path(__file__).resolve().parent
EAST = "127.0.0.1:19092"
UNTIL = datetime(2026, 1, 1, tzinfo=UTC)


def write_archive() -> None:
    """Orders 1-5 on the last days of 2025; order 6 at the switch point (Kafka has it, so it is not landed)."""
    archive = HERE / "archive"
    shutil.rmtree(archive, ignore_errors=True)
    archive.mkdir()
    for part, numbers in enumerate([(1, 2, 3), (4, 5, 6)]):
        table = pa.table(
            {
                "order": [f"order-{n}" for n in numbers],
                "created_at": pa.array([UNTIL - timedelta(days=6 - n) for n in numbers], pa.timestamp("ms", "UTC")),
                "source_system": ["legacy"] * len(numbers),
            }
        )
        pq.write_table(table, archive / f"orders-{part}.parquet")


def produce_live() -> None:
    """Orders 5-9 in Kafka: 5 is older than `until` (the archive has it), 6-9 are not."""
    with contextlib.suppress(KafkaException):  # absent on the first try
        delete_topics(EAST, ["orders-live"])
    recreate_topic(EAST, "orders-live", 1)
    start = int(UNTIL.timestamp() * 1000)
    produce(
        EAST,
        "orders-live",
        [Record(value=f"order-{n}".encode(), timestamp_ms=start + (n - 6) * 3_600_000) for n in range(5, 10)],
    )


def main() -> None:
    """Write the archive and the topic, run the pipeline twice, show where each order landed from."""
    write_archive()
    produce_live()
    project = load_project_config(HERE / "dynamic_kafka.yaml")
    pipeline = project.pipeline("orders_history")
    for folder in (pipeline.sink.path, pipeline.resolved_state_path):
        shutil.rmtree(str(folder), ignore_errors=True)
    first = PipelineRunner(project, "orders_history").run()
    print(f"run 1: {first.records} records, {first.bootstrap_records} of them from {first.bootstrap_source}")
    second = PipelineRunner(project, "orders_history").run()
    print(f"run 2: {second.status}, {second.records} records")
    sink = open_delta_rs(pipeline.sink_table, doing="reading the example's sink")
    assert sink is not None
    rows = sink.to_pyarrow_table(columns=["value", "cluster", "offset"]).to_pylist()
    for row in sorted(rows, key=lambda r: int(r["value"].split("-")[1])):
        where = "archive" if row["offset"] is None else f"Kafka offset {row['offset']}"
        print(f"  {row['value']}: {where}")


if __name__ == "__main__":
    main()
