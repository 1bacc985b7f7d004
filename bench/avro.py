"""Registry-encoded Avro end to end: ours (``dynamic-kafka run``) beside the hand-written ``from_avro`` job.

``python -m bench.avro [--records 1000000] [--repeats 2]`` starts (or reuses) one local Kafka cluster on
127.0.0.1:19492 and one local Schema Registry on 127.0.0.1:18492 under ``.cache/bench/avro/``, produces the data
set once (an 8-partition topic of Confluent wire-format Avro records: magic byte, schema id, an ``Order`` record of
a long, a double, a string and a nullable string, ~60 bytes), then alternates (rotating the order each repeat):

- **ours**: ``dynamic-kafka run --json`` in a fresh process, ``value_format: avro`` with the registry, from an
  empty state and sink to a committed run (fields as top-level columns, dead-letter routing, the run summary);
- **ours-fail**: the same with ``on_decode_error: fail`` (an undecodable record fails the run);
- **baseline**: ``python -m bench.avro baseline SPEC`` in a fresh process: the same session builder, one
  ``spark.read.format("kafka")`` over the same offsets, ``from_avro(substring(value, 6), <schema>)``, the fields
  beside the Kafka columns, one Delta append. What a user would write knowing the one schema in advance.

Prints the medians (wall; CPU of the process and its JVM, which on a shared machine moves much less than wall
time), each of ours' ratios to the baseline, and where ours' wall time went (the run summary's stages). Stops
what it started unless ``--keep``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.measure import run_measured

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
# The measured jobs: ours under each decode policy (the default first), and the hand-written one (None).
VARIANTS: dict[str, str | None] = {"ours": "dead_letter", "ours-fail": "fail", "baseline": None}


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


def partition_ranges(bootstrap: str, topic: str, partitions: int = 8) -> dict[str, list[int]]:
    """``[low, high]`` of each partition of ``topic``, keyed by the partition's number as text."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-ranges"})
    ranges = {}
    for p in range(partitions):
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
        ranges[str(p)] = [low, high]
    consumer.close()
    return ranges


def measure_command(command: list[str]) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds of the process and its JVM (sampled from /proc: the JVM is not a child that this
    process reaps, so ``os.times`` would miss it), stdout.
    """
    done = run_measured(command, cwd=ROOT).check()
    return done.wall_s, done.driver_cpu_s + (done.jvm_cpu_s or 0.0), done.stdout


def _run_ours(work: Path, bootstrap: str, url: str, topic: str, policy: str) -> tuple[float, float, Any]:
    """``dynamic-kafka run --json`` in a fresh process with ``on_decode_error: policy``; wall, CPU, summary."""
    (work / "metadata.yaml").write_text(
        json.dumps(
            {
                "clusters": {"east": {"bootstrap_servers": bootstrap, "schema_registry": {"url": url}}},
                "streams": {"orders": {"east": [topic]}},
            }
        )
    )
    pipeline = {"id": "p", "streams": ["orders"], "sink": {"path": "sink"}, "value": {"format": "avro"},
                "on_decode_error": policy}  # fmt: skip
    config: dict[str, Any] = {
        "metadata_service": {"type": "file", "path": "metadata.yaml"},
        "spark": SPARK,
        "pipelines": [pipeline],
    }
    (work / "dynamic_kafka.yaml").write_text(json.dumps(config))
    command = [sys.executable, "-m", "dynamic_kafka.cli.main", "run", "--json"]
    command += ["--config", str(work / "dynamic_kafka.yaml"), "--pipeline", "p"]
    wall, cpu, out = measure_command(command)
    return wall, cpu, json.loads(out)


def _stages(summary: dict[str, Any], wall: float) -> dict[str, float]:
    """Where one run's wall time went, from its summary: planning; registry fetch, Spark session start and schema
    check (until the job starts); the Spark job (read, decode, writes); the state commit; the rest (process start,
    imports, JVM exit).
    """
    plan, spark, commit = summary["plan_seconds"], summary["spark_seconds"], summary["commit_seconds"]
    before_job = summary["total_seconds"] - plan - spark - commit
    return {
        "plan": plan,
        "registry_session_schema": before_job,
        "spark_job": spark,
        "state_commit": commit,
        "process_and_jvm_exit": wall - summary["total_seconds"],
    }


def baseline(spec_path: str) -> None:
    """The hand-written job."""
    spec = json.loads(Path(spec_path).read_text())
    from pyspark.sql import functions as sf
    from pyspark.sql.avro.functions import from_avro

    from dynamic_kafka.config.models import SparkConfig
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

    from devtools.local_kafka import start_clusters, stop_clusters
    from devtools.local_registry import start_registries, stop_registries

    clusters = start_clusters([("bench-avro", KAFKA_PORT)], base_dir=BASE / "kafka")
    registries = start_registries([("bench-avro", REGISTRY_PORT)], base_dir=BASE / "registry")
    try:
        bootstrap = clusters["bench-avro"].bootstrap_servers
        url = registries["bench-avro"].url
        topic = f"avro-{args.records}r-8p"
        setup = time.perf_counter()
        _produce(bootstrap, url, topic, args.records)
        print(f"setup (produce if needed): {time.perf_counter() - setup:.1f}s", flush=True)
        ranges = partition_ranges(bootstrap, topic)
        total = sum(h - low for low, h in ranges.values())
        runs: dict[str, list[tuple[float, float]]] = {who: [] for who in VARIANTS}
        stages: dict[str, list[dict[str, float]]] = {who: [] for who, policy in VARIANTS.items() if policy}
        for i in range(args.repeats):
            # Rotated each repeat so that no variant always runs first (or right after the same other one).
            names = list(VARIANTS)
            for who in names[i % len(names) :] + names[: i % len(names)]:
                work = Path(tempfile.mkdtemp(prefix=f"{who}-", dir=BASE))
                policy = VARIANTS[who]
                if policy is None:
                    spec = {"spark": SPARK, "topic": topic, "ranges": ranges, "bootstrap_servers": bootstrap,
                            "sink": str(work / "sink")}  # fmt: skip
                    (work / "spec.json").write_text(json.dumps(spec))
                    command = [sys.executable, "-m", "bench.avro", "baseline", str(work / "spec.json")]
                    wall, cpu, _ = measure_command(command)
                else:
                    wall, cpu, summary = _run_ours(work, bootstrap, url, topic, policy)
                    if (summary["records"], summary["dead_letters"]) != (total, 0):
                        raise RuntimeError(f"{who} landed {summary}")
                    stages[who].append(_stages(summary, wall))
                runs[who].append((wall, cpu))
                print(f"{who}: {wall:.1f}s wall, {cpu:.1f}s cpu, load {os.getloadavg()[0]:.1f}", flush=True)
        base_wall = statistics.median(w for w, _ in runs["baseline"])
        base_cpu = statistics.median(c for _, c in runs["baseline"])
        figures: dict[str, Any] = {"records": total, "baseline_wall_s": round(base_wall, 1),
                                   "baseline_cpu_s": round(base_cpu, 1)}  # fmt: skip
        for who, policy in VARIANTS.items():
            if policy is None:
                continue
            wall = statistics.median(w for w, _ in runs[who])
            cpu = statistics.median(c for _, c in runs[who])
            figures[who] = {
                "on_decode_error": policy,
                "wall_s": round(wall, 1),
                "ratio_wall": round(wall / base_wall, 3),
                "cpu_s": round(cpu, 1),
                "ratio_cpu": round(cpu / base_cpu, 3),
                "stages_s": {k: round(statistics.median(s[k] for s in stages[who]), 1) for k in stages[who][0]},
            }
        figures["load_avg_1m"] = os.getloadavg()[0]
        print(json.dumps(figures, indent=1))
    finally:
        if not args.keep:
            stop_registries(["bench-avro"], base_dir=BASE / "registry")
            stop_clusters(["bench-avro"], base_dir=BASE / "kafka")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "baseline":
        baseline(sys.argv[2])
    else:
        main()
