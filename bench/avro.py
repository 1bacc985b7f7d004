"""Registry-encoded Avro end to end: ours (``dynamic-kafka run``) beside the hand-written ``from_avro`` job.

``python -m bench.avro [--records 1000000] [--repeats 2]`` starts (or reuses) one local Kafka cluster on
127.0.0.1:19492 and one local Schema Registry on 127.0.0.1:18492 under ``.cache/bench/avro/``, produces the data
set once (an 8-partition topic of Confluent wire-format Avro records: magic byte, schema id, an ``Order`` record of
a long, a double, a string and a nullable string, ~60 bytes), then alternates:

- **ours**: ``dynamic-kafka -v run --json`` in a fresh process, ``value_format: avro`` with the registry, from an
  empty state and sink to a committed run (fields as top-level columns, dead-letter routing, the run summary);
- **baseline**: ``python -m bench.avro baseline SPEC`` in a fresh process: the same session builder, one
  ``spark.read.format("kafka")`` over the same offsets, ``from_avro(substring(value, 6), <schema>)``, the fields
  beside the Kafka columns, one Delta append. What a user would write knowing the one schema in advance.

Prints the medians (wall and CPU of process + JVM) and the ratio. Stops what it started unless ``--keep``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BASE = ROOT / ".cache" / "bench" / "avro"
KAFKA_PORT = 19492
REGISTRY_PORT = 18492
SCHEMA = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "amount", "type": "double"},
        {"name": "customer", "type": "string"},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}
SPARK = {"master": "local[2]", "conf": {"spark.driver.memory": "2g"}}


def _produce(bootstrap: str, registry_url: str, topic: str, records: int) -> None:
    import fastavro
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    from dynamic_kafka.registry import encode_header

    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic in admin.list_topics(timeout=30).topics:
        return
    admin.create_topics([NewTopic(topic, 8, 1)])[topic].result(30)
    schema_id = SchemaRegistryClient({"url": registry_url}).register_schema(
        f"{topic}-value", Schema(json.dumps(SCHEMA), "AVRO")
    )
    header = encode_header(schema_id)
    parsed = fastavro.parse_schema(SCHEMA)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 500_000,
        }
    )
    for i in range(records):
        out = io.BytesIO()
        fastavro.schemaless_writer(
            out, parsed, {"id": i, "amount": i / 100, "customer": f"c{i % 5000:05d}", "note": None if i % 3 else "x"}
        )
        while True:
            try:
                producer.produce(topic, header + out.getvalue(), key=str(i % 1000).encode(), partition=i % 8)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(120)


def _ranges(bootstrap: str, topic: str) -> dict[str, list[int]]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-avro"})
    ranges = {}
    for p in range(8):
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
        ranges[str(p)] = [low, high]
    consumer.close()
    return ranges


def _measure(command: list[str]) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds of the process tree (children's user + sys), stdout."""
    before = os.times()
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=ROOT)
    wall = time.perf_counter() - started
    after = os.times()
    if done.returncode != 0:
        raise RuntimeError(f"{command} failed: {done.stderr[-2000:]}")
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return wall, cpu, done.stdout


def baseline(spec_path: str) -> None:
    """The hand-written job."""
    spec = json.loads(Path(spec_path).read_text())
    from pyspark.sql import functions as sf
    from pyspark.sql.avro.functions import from_avro

    from dynamic_kafka.config import SparkConfig
    from dynamic_kafka.spark.session import build_spark_session

    spark = build_spark_session(SparkConfig.model_validate(spec["spark"]))
    topic = spec["topic"]
    ranges = spec["ranges"]
    frame = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", spec["bootstrap_servers"])
        .option("kafka.isolation.level", "read_committed")
        .option("includeHeaders", "true")
        .option("assign", json.dumps({topic: sorted(int(p) for p in ranges)}))
        .option("startingOffsets", json.dumps({topic: {p: r[0] for p, r in ranges.items()}}))
        .option("endingOffsets", json.dumps({topic: {p: r[1] for p, r in ranges.items()}}))
        .load()
    )
    decoded = frame.select(
        "key", "topic", "partition", "offset", "timestamp", "timestampType", "headers",
        sf.lit("east").alias("cluster"),
        from_avro(sf.expr("substring(value, 6)"), json.dumps(SCHEMA)).alias("v"),
    ).select("*", "v.*").drop("v")  # fmt: skip
    decoded.write.format("delta").mode("append").save(spec["sink"])


def main() -> None:
    """Sets up, measures ours and the baseline alternately, prints the medians and the ratio."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--keep", action="store_true", help="leave the cluster and registry running")
    args = parser.parse_args()

    from dynamic_kafka.local_kafka import start_clusters, stop_clusters
    from dynamic_kafka.local_registry import start_registries, stop_registries

    clusters = start_clusters([("bench-avro", KAFKA_PORT)], base_dir=BASE / "kafka")
    registries = start_registries([("bench-avro", REGISTRY_PORT)], base_dir=BASE / "registry")
    try:
        bootstrap = clusters["bench-avro"].bootstrap_servers
        url = registries["bench-avro"].url
        topic = f"avro-{args.records}r-8p"
        setup = time.perf_counter()
        _produce(bootstrap, url, topic, args.records)
        print(f"setup (produce if needed): {time.perf_counter() - setup:.1f}s", flush=True)
        ranges = _ranges(bootstrap, topic)
        total = sum(h - low for low, h in ranges.values())
        ours: list[tuple[float, float]] = []
        base: list[tuple[float, float]] = []
        for i in range(args.repeats):
            for who in ("ours", "baseline") if i % 2 == 0 else ("baseline", "ours"):
                work = Path(tempfile.mkdtemp(prefix=f"{who}-", dir=BASE))
                if who == "ours":
                    (work / "metadata.yaml").write_text(
                        json.dumps(
                            {
                                "clusters": {"east": {"bootstrap_servers": bootstrap, "schema_registry": {"url": url}}},
                                "streams": {"orders": {"east": [topic]}},
                            }
                        )
                    )
                    config: dict[str, Any] = {
                        "metadata_service": {"type": "file", "path": "metadata.yaml"},
                        "spark": SPARK,
                        "pipelines": [
                            {"id": "p", "streams": ["orders"], "sink": {"path": "sink"}, "value_format": "avro"}
                        ],
                    }
                    (work / "dynamic_kafka.yaml").write_text(json.dumps(config))
                    command = [sys.executable, "-m", "dynamic_kafka.cli.main", "run", "--json"]
                    command += ["--config", str(work / "dynamic_kafka.yaml"), "--pipeline", "p"]
                    wall, cpu, out = _measure(command)
                    summary = json.loads(out)
                    if (summary["records"], summary["dead_letters"]) != (total, 0):
                        raise RuntimeError(f"ours landed {summary}")
                    ours.append((wall, cpu))
                else:
                    spec = {"spark": SPARK, "topic": topic, "ranges": ranges, "bootstrap_servers": bootstrap,
                            "sink": str(work / "sink")}  # fmt: skip
                    (work / "spec.json").write_text(json.dumps(spec))
                    wall, cpu, _ = _measure([sys.executable, "-m", "bench.avro", "baseline", str(work / "spec.json")])
                    base.append((wall, cpu))
                print(f"{who}: {wall:.1f}s wall, {cpu:.1f}s cpu, load {os.getloadavg()[0]:.1f}", flush=True)
        ours_wall = statistics.median(w for w, _ in ours)
        base_wall = statistics.median(w for w, _ in base)
        ours_cpu = statistics.median(c for _, c in ours)
        base_cpu = statistics.median(c for _, c in base)
        print(
            json.dumps(
                {
                    "records": total,
                    "ours_wall_s": round(ours_wall, 1),
                    "baseline_wall_s": round(base_wall, 1),
                    "ratio_wall": round(ours_wall / base_wall, 3),
                    "ours_cpu_s": round(ours_cpu, 1),
                    "baseline_cpu_s": round(base_cpu, 1),
                    "ratio_cpu": round(ours_cpu / base_cpu, 3),
                    "load_avg_1m": os.getloadavg()[0],
                }
            )
        )
    finally:
        if not args.keep:
            stop_registries(["bench-avro"], base_dir=BASE / "registry")
            stop_clusters(["bench-avro"], base_dir=BASE / "kafka")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "baseline":
        baseline(sys.argv[2])
    else:
        main()
