"""A user's decoder (``value_format: expression``) beside the built-in JSON decoder, on the same JSON values.

``python -m bench.expression [--records 1000000] [--repeats 3]`` starts (or reuses) one local Kafka cluster on
127.0.0.1:19592 under ``.cache/bench/expression/``, produces the data set once (an 8-partition topic of JSON
objects of a long, a double, a string and a nullable string, ~70 bytes), then runs ``dynamic-kafka run --json`` in
a fresh process, from an empty state and sink to a committed run, in three variants (in a rotating order each
repeat):

- **json**: ``value_format: json`` with ``value_schema`` (Spark's ``from_json``, invalid JSON a dead letter);
- **expression**: ``value_format: expression`` whose ``value_expression`` is the same ``from_json`` written by
  the user, so the difference is the cost of the expression path itself (its checks, its null-to-dead-letter
  test), not of a different decoder;
- **bytes**: ``value_format: bytes``, no decoding: the floor of both.

Prints the medians (wall; CPU of the process and its JVM) and the ratios of each variant to ``json``. Stops what
it started unless ``--keep``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.avro import measure_command, partition_ranges

ROOT = Path(__file__).resolve().parent.parent
BASE = ROOT / ".cache" / "bench" / "expression"
KAFKA_PORT = 19592
PARTITIONS = 8
SCHEMA = "id BIGINT, amount DOUBLE, customer STRING, note STRING"
SPARK = {"master": "local[2]", "conf": {"spark.driver.memory": "2g"}}
# Each variant's `value` section; json is the reference the others are divided by.
VARIANTS: dict[str, dict[str, str]] = {
    "json": {"format": "json", "schema": SCHEMA},
    "expression": {"format": "expression", "expression": f"from_json(CAST(value AS STRING), '{SCHEMA}')"},
    "bytes": {"format": "bytes"},
}


def _produce(bootstrap: str, topic: str, records: int) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic in admin.list_topics(timeout=30).topics:
        return
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                         "queue.buffering.max.messages": 500_000})  # fmt: skip
    for i in range(records):
        value = {"id": i, "amount": i / 100, "customer": f"c{i % 5000:05d}", "note": None if i % 3 else "x"}
        while True:
            try:
                producer.produce(topic, json.dumps(value).encode(), key=str(i % 1000).encode(), partition=i % 8)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(120)


def _run(work: Path, bootstrap: str, topic: str, values: dict[str, str]) -> tuple[float, float, Any]:
    """``dynamic-kafka run --json`` in a fresh process with the variant's value settings; wall, CPU, summary."""
    metadata = {"clusters": {"east": {"bootstrap_servers": bootstrap}}, "streams": {"orders": {"east": [topic]}}}
    (work / "metadata.yaml").write_text(json.dumps(metadata))
    pipeline = {"id": "p", "streams": ["orders"], "sink": {"path": "sink"}, "value": values}
    config = {"metadata_service": {"type": "file", "path": "metadata.yaml"}, "spark": SPARK, "pipelines": [pipeline]}
    (work / "dynamic_kafka.yaml").write_text(json.dumps(config))
    command = [sys.executable, "-m", "dynamic_kafka.cli.main", "run", "--json"]
    command += ["--config", str(work / "dynamic_kafka.yaml"), "--pipeline", "p"]
    wall, cpu, out = measure_command(command)
    return wall, cpu, json.loads(out)


def main() -> None:
    """Sets up, runs the variants in a rotating order, prints the medians and the ratios to ``json``."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="leave the cluster running")
    args = parser.parse_args()

    from devtools.local_kafka import start_clusters, stop_clusters

    clusters = start_clusters([("bench-expression", KAFKA_PORT)], base_dir=BASE / "kafka")
    try:
        bootstrap = clusters["bench-expression"].bootstrap_servers
        topic = f"json-{args.records}r-{PARTITIONS}p"
        setup = time.perf_counter()
        _produce(bootstrap, topic, args.records)
        print(f"setup (produce if needed): {time.perf_counter() - setup:.1f}s", flush=True)
        total = sum(high - low for low, high in partition_ranges(bootstrap, topic, PARTITIONS).values())
        runs: dict[str, list[tuple[float, float]]] = {who: [] for who in VARIANTS}
        for i in range(args.repeats):
            names = list(VARIANTS)
            for who in names[i % len(names) :] + names[: i % len(names)]:
                work = Path(tempfile.mkdtemp(prefix=f"{who}-", dir=BASE))
                wall, cpu, summary = _run(work, bootstrap, topic, VARIANTS[who])
                if (summary["records"], summary["dead_letters"]) != (total, 0):
                    raise RuntimeError(f"{who} landed {summary}")
                runs[who].append((wall, cpu))
                print(f"{who}: {wall:.1f}s wall, {cpu:.1f}s cpu, load {os.getloadavg()[0]:.1f}", flush=True)
        reference_wall = statistics.median(w for w, _ in runs["json"])
        reference_cpu = statistics.median(c for _, c in runs["json"])
        figures: dict[str, Any] = {"records": total, "repeats": args.repeats}
        for who in VARIANTS:
            wall = statistics.median(w for w, _ in runs[who])
            cpu = statistics.median(c for _, c in runs[who])
            figures[who] = {
                "wall_s": round(wall, 1),
                "cpu_s": round(cpu, 1),
                "wall_to_json": round(wall / reference_wall, 3),
                "cpu_to_json": round(cpu / reference_cpu, 3),
            }
        figures["load_avg_1m"] = os.getloadavg()[0]
        print(json.dumps(figures, indent=1))
    finally:
        if not args.keep:
            stop_clusters(["bench-expression"], base_dir=BASE / "kafka")


if __name__ == "__main__":
    main()
