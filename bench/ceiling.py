"""The ceiling: how fast one Python process can consume the same ranges with confluent-kafka, values discarded.

``python -m bench.ceiling SPEC.json`` (same spec as the baseline) assigns every range of each cluster to one
consumer, one thread per cluster (librdkafka fetches in its own threads; ``consume`` releases the GIL), and
consumes in batches of 10,000 until every range is done. Prints one JSON line with the records, bytes and the
consume time (from the assignment to the last record, without the interpreter's start).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any


def _consume(bootstrap: str, topic: str, ranges: dict[int, list[int]], out: dict[str, Any]) -> None:
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
            if offset == stop - 1:
                del todo[partition]
    consumer.close()
    out["records"], out["bytes"] = records, size


def main(spec_path: str) -> None:
    """Consume the ranges of the spec file with confluent-kafka and report the throughput ceiling."""
    spec = json.loads(Path(spec_path).read_text())
    import confluent_kafka  # noqa: F401  (imported before the clock starts)

    results: dict[str, dict[str, Any]] = {c: {} for c in spec["sources"]}
    began = time.perf_counter()
    threads = [
        threading.Thread(
            target=_consume,
            args=(s["bootstrap_servers"], s["topic"], {int(p): r for p, r in s["ranges"].items()}, results[c]),
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
    main(sys.argv[1])
