"""Benchmark 9, ``publish``: the same Delta rows published to Kafka three ways, side by side in one run.

- **ours**: ``dynamic-kafka publish --json`` (fresh process): exactly once, the records in Kafka transactions
  with the publication's progress, from wherever the default ``executor_rows`` sends a run of this size;
- **ours-executors**: the same with ``executor_rows: 0``: every run's rows produced from Spark's executors, a
  transaction per slice;
- **spark**: ``python -m bench.publish spark SPEC``: Spark's own Kafka writer (``df.write.format("kafka")``, at
  least once) through the same session builder (same jars and settings) as our runs;
- **loop**: ``python -m bench.publish loop SPEC``: a plain confluent-kafka producer loop (no transactions, the
  idempotent producer's defaults) over the same rows read with pyarrow.

Each variant writes the whole table (key: the ``id`` column; value: every column as one JSON object) to a fresh
topic of the benchmark's ``east`` cluster (8 partitions), which is counted and deleted afterwards. The table,
``rows`` rows of ~200 B in 10 appended versions, is written once under ``.cache/bench/publish-<rows>`` and
reused. ``DYNAMIC_KAFKA_BENCH_PUBLISH_ROWS`` in the environment sets the size (default 1,000,000; quick
200,000) for a quick check.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from bench.env import BENCH_DIR, bench_environ, fresh_dir, spark_settings
from bench.measure import run_measured

if TYPE_CHECKING:
    from bench.env import BenchEnv
    from bench.suite import Settings

PYTHON = sys.executable
CLUSTER = "east"
PARTITIONS = 8
VERSIONS = 10
ROWS_ENV = "DYNAMIC_KAFKA_BENCH_PUBLISH_ROWS"
VARIANTS = ("ours", "ours-executors", "spark", "loop")
OURS = ("ours", "ours-executors")


def publish_rows(settings: Settings) -> int:
    """The table's size: the environment's override, else 1,000,000 (quick: 200,000)."""
    override = os.environ.get(ROWS_ENV)
    if override:
        return int(override)
    return 200_000 if settings.quick else 1_000_000


def ensure_table(rows: int) -> Path:
    """The benchmark's Delta table of ``rows`` rows in :data:`VERSIONS` appends, written once and reused."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    path = BENCH_DIR / f"publish-{rows}"
    if (path / "_delta_log").exists() and DeltaTable(str(path)).version() == VERSIONS - 1:
        return path
    shutil.rmtree(path, ignore_errors=True)
    filler = ("lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor " * 4).encode()
    step = -(-rows // VERSIONS)
    for start in range(0, rows, step):
        ids = range(start, min(rows, start + step))
        batch = pa.table(
            {
                "id": [f"k{i:09d}" for i in ids],
                "n": pa.array(list(ids), pa.int64()),
                # ~150 characters, varying by row, so that the JSON value is ~200 B and compresses like text.
                "text": [filler[i % 97 : i % 97 + 130 + i % 41].decode() for i in ids],
                "at": pa.array([1_767_225_600_000 + i for i in ids], pa.timestamp("ms", tz="UTC")),
            }
        )
        write_deltalake(str(path), batch, mode="append")
    return path


def bench_publish(env: BenchEnv, settings: Settings) -> dict[str, Any]:
    """9. The table published by ours, Spark's Kafka writer and a producer loop, rotating the order each repeat."""
    rows = publish_rows(settings)
    table = ensure_table(rows)
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    for rep in range(settings.repeats):
        order = VARIANTS[rep % len(VARIANTS) :] + VARIANTS[: rep % len(VARIANTS)]
        for variant in order:
            topic = f"publish-{variant}-{rep}-{rows}"
            env.delete_topics(CLUSTER, list(env.offsets(CLUSTER, [topic])))
            env.create_topics(CLUSTER, [topic], PARTITIONS)
            try:
                run = _run(variant, env, table, topic, f"publish-{variant}")
                landed = sum(hi for _, hi in env.offsets(CLUSTER, [topic])[topic].values())
            finally:
                env.delete_topics(CLUSTER, [topic])
            # Our topic also holds one commit marker per partition and transaction; the others hold the rows only.
            if (variant in OURS and run["records"] != rows) or (variant not in OURS and landed != rows):
                raise RuntimeError(f"publish {variant} landed {run.get('records', landed)} records, not {rows}")
            runs[variant].append({**run, "rows": rows, "records_per_s": rows / run["wall_s"], "offsets": landed})
            print(f"  .. publish {variant} #{rep + 1}: {run['wall_s']:.1f}s", file=sys.stderr, flush=True)
    wall = {v: statistics.median(r["wall_s"] for r in runs[v]) for v in VARIANTS}
    return {
        "rows": rows,
        "table": str(table),
        "runs": runs,
        "wall_s": wall,
        "ratios": {f"{v}/{peer}": wall[v] / wall[peer] for v in OURS for peer in ("spark", "loop")},
    }


def _run(variant: str, env: BenchEnv, table: Path, topic: str, label: str) -> dict[str, Any]:
    from bench.suite import figures

    folder = fresh_dir(label)
    bootstrap = env.bootstrap(CLUSTER)
    if variant in OURS:
        config = _write_project(folder, bootstrap, table, topic, executor_rows=0 if variant != "ours" else None)
        argv = [PYTHON, "-m", "dynamic_kafka.cli.main", "publish", "--config", str(config), "--json"]
        measured = run_measured(argv, cwd=folder, env=bench_environ(), timeout_s=3600).check()
        outcome = json.loads(measured.stdout)
        return {**figures(measured), "records": outcome["records"], "transactions": outcome["transactions"]}
    spec = folder / "spec.json"
    spec.write_text(
        json.dumps({"table": str(table), "bootstrap": bootstrap, "topic": topic, "spark": spark_settings()})
    )
    measured = run_measured([PYTHON, "-m", "bench.publish", variant, str(spec)], env=bench_environ(), timeout_s=3600)
    measured.check()
    return {**figures(measured), **json.loads(measured.stdout.strip().splitlines()[-1])}


def _write_project(folder: Path, bootstrap: str, table: Path, topic: str, *, executor_rows: int | None) -> Path:
    metadata = {"clusters": {CLUSTER: {"bootstrap_servers": bootstrap}}, "streams": {"out": {CLUSTER: [topic]}}}
    (folder / "metadata.yaml").write_text(yaml.safe_dump(metadata, sort_keys=False))
    config = {
        "metadata_service": {"type": "file", "path": "metadata.yaml"},
        "spark": spark_settings(),
        "publications": [
            {
                "id": "bench",
                "table": str(table),
                "stream": "out",
                "key": {"format": "string", "column": "id"},
                "value": {"format": "json"},
                "state_path": str(folder / "moves"),
                # ours: the default threshold decides; ours-executors: every run from Spark's executors.
                **({} if executor_rows is None else {"executor_rows": executor_rows}),
            }
        ],
    }
    path = folder / "dynamic_kafka.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


# ------------------------------------------------------------------------------------------ the peers' jobs


def spark_job(spec: dict[str, Any]) -> dict[str, float]:
    """Spark's own Kafka writer over the table: at least once, no progress kept."""
    began = time.perf_counter()
    from dynamic_kafka.config.models import SparkConfig
    from dynamic_kafka.spark.session import build_spark_session

    spark = build_spark_session(SparkConfig.model_validate(spec["spark"]))
    started = time.perf_counter()
    (
        spark.read.format("delta")
        .load(spec["table"])
        .selectExpr("id AS key", "to_json(struct(*)) AS value")
        .write.format("kafka")
        .option("kafka.bootstrap.servers", spec["bootstrap"])
        .option("topic", spec["topic"])
        .save()
    )
    return {"spark_start_s": started - began, "job_s": time.perf_counter() - started}


def loop_job(spec: dict[str, Any]) -> dict[str, float]:
    """A confluent-kafka producer loop over the table's rows (read with delta-rs and pyarrow), no transactions."""
    began = time.perf_counter()
    from confluent_kafka import Producer
    from deltalake import DeltaTable

    producer = Producer({"bootstrap.servers": spec["bootstrap"], "partitioner": "murmur2_random", "linger.ms": 5})
    failures: list[Any] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(err)

    for batch in DeltaTable(spec["table"]).to_pyarrow_dataset().to_batches():
        for row in batch.to_pylist():
            value = json.dumps(row, default=str, separators=(",", ":")).encode()
            while True:
                try:
                    producer.produce(spec["topic"], value, row["id"].encode(), on_delivery=delivered)
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)
    left = producer.flush(300)
    if failures or left:
        raise RuntimeError(f"{len(failures)} records failed, {left} undelivered")
    return {"job_s": time.perf_counter() - began}


if __name__ == "__main__":
    job = {"spark": spark_job, "loop": loop_job}[sys.argv[1]]
    print(json.dumps(job(json.loads(Path(sys.argv[2]).read_text()))))
