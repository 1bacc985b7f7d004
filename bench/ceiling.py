"""The ceiling: how fast one Python process can consume the same ranges with confluent-kafka, values discarded.

``python -m bench.ceiling SPEC.json`` (same spec as the baseline) assigns every range of each cluster to one
consumer, one thread per cluster (librdkafka fetches in its own threads; ``consume`` releases the GIL), and
consumes in batches of 10,000 until every range is done. Prints one JSON line with the records, bytes and the
consume time (from the assignment to the last record, without the interpreter's start).

``python -m bench.ceiling SPEC.json --land DIR`` is the *landing ceiling*: the same consumers also keep every
record (cluster, topic, partition, offset, timestamp, key, value) and write them with pyarrow to one Parquet file
per cluster under DIR (row groups of 100,000 records, snappy, as Spark writes), so the time includes landing the
bytes in a columnar file: the fastest plain way to land these ranges, without exactly-once, Delta or Spark.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

_ROW_GROUP = 100_000


class _Lander:
    """Collects consumed records into columns and writes them to a Parquet file, a row group at a time."""

    def __init__(self, path: Path, cluster: str) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.pa = pa
        self.cluster = cluster
        self.schema = pa.schema(
            [
                ("cluster", pa.string()),
                ("topic", pa.string()),
                ("partition", pa.int32()),
                ("offset", pa.int64()),
                ("timestamp", pa.timestamp("ms", tz="UTC")),
                ("key", pa.binary()),
                ("value", pa.binary()),
            ]
        )
        self.writer = pq.ParquetWriter(str(path), self.schema, compression="snappy")
        self._clear()

    def _clear(self) -> None:
        self.topics: list[str] = []
        self.partitions: list[int] = []
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []

    def add(self, message: Any) -> None:
        self.topics.append(message.topic())
        self.partitions.append(message.partition())
        self.offsets.append(message.offset())
        self.timestamps.append(message.timestamp()[1])
        self.keys.append(message.key())
        self.values.append(message.value())
        if len(self.offsets) >= _ROW_GROUP:
            self.flush()

    def flush(self) -> None:
        if not self.offsets:
            return
        pa = self.pa
        columns = [
            pa.array([self.cluster] * len(self.offsets), pa.string()),
            pa.array(self.topics, pa.string()),
            pa.array(self.partitions, pa.int32()),
            pa.array(self.offsets, pa.int64()),
            pa.array(self.timestamps, pa.timestamp("ms", tz="UTC")),
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
        ]
        self.writer.write_table(pa.Table.from_arrays(columns, schema=self.schema))
        self._clear()

    def close(self) -> None:
        self.flush()
        self.writer.close()


def _consume(
    bootstrap: str, topic: str, ranges: dict[int, list[int]], out: dict[str, Any], lander: _Lander | None = None
) -> None:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-ceiling",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "fetch.max.bytes": 64 * 1024 * 1024,
            "max.partition.fetch.bytes": 8 * 1024 * 1024,
            "queued.max.messages.kbytes": 256 * 1024,
        }
    )
    todo = {p: stop for p, (start, stop) in ranges.items() if stop > start}
    consumer.assign([TopicPartition(topic, p, ranges[p][0]) for p in todo])
    records = size = 0
    while todo:
        for message in consumer.consume(num_messages=10_000, timeout=1.0):
            if message.error():
                raise RuntimeError(f"{bootstrap} {topic}: {message.error()}")
            partition, offset = message.partition(), message.offset()
            stop = todo.get(partition) if partition is not None else None
            if partition is None or offset is None or stop is None or offset >= stop:
                continue
            records += 1
            size += len(message.value() or b"") + len(message.key() or b"")
            if lander is not None:
                lander.add(message)
            if offset == stop - 1:
                del todo[partition]
    consumer.close()
    if lander is not None:
        lander.close()
    out["records"], out["bytes"] = records, size


def main(spec_path: str, land: str | None = None) -> None:
    """Consume the ranges of the spec file with confluent-kafka and report the throughput ceiling (``land``: also
    write them to Parquet under that folder).
    """
    spec = json.loads(Path(spec_path).read_text())
    import confluent_kafka  # noqa: F401  (imported before the clock starts)

    if land is not None:
        import pyarrow.parquet  # noqa: F401  (likewise)

        Path(land).mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[str, Any]] = {c: {} for c in spec["sources"]}
    began = time.perf_counter()
    threads = [
        threading.Thread(
            target=_consume,
            args=(
                s["bootstrap_servers"],
                s["topic"],
                {int(p): r for p, r in s["ranges"].items()},
                results[c],
                _Lander(Path(land) / f"{c}.parquet", c) if land is not None else None,
            ),
        )
        for c, s in spec["sources"].items()
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    if any("records" not in r for r in results.values()):
        raise SystemExit("a consumer thread failed")
    records = sum(r["records"] for r in results.values())
    size = sum(r["bytes"] for r in results.values())
    print(json.dumps({"records": records, "bytes": size, "consume_s": elapsed}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[3] if len(sys.argv) > 3 and sys.argv[2] == "--land" else None)
