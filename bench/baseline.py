"""The baseline: the PySpark job a user would write by hand, without dynamic-kafka.

``python -m bench.baseline SPEC.json`` reads the exact offset ranges from the spec (the harness takes them from the
brokers, as ours plans them), then per cluster one ``spark.read.format("kafka")`` with ``assign`` and numeric
starting/ending offsets, a literal ``cluster`` column, a union, and one ``write.format("delta")`` append. The
session comes from the same builder as ours (same jars, same settings); the read asks for what ours asks for
(headers, ``read_committed``), so both land the same records with the same Kafka columns. What it does not do:
plan, keep offsets, guard against concurrent runs, make the write idempotent, or count what it wrote.

Prints one JSON line: seconds to import, to start Spark, and for the job.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def main(spec_path: str) -> None:
    """Run the hand-written PySpark job described by the spec file (a baseline to compare with)."""
    spec, spark, times = start(spec_path)
    started = time.perf_counter()
    kafka_rows(spark, spec["sources"]).write.format("delta").mode("append").save(spec["sink"])
    print(json.dumps({**times, "job_s": time.perf_counter() - started}))


def start(spec_path: str) -> tuple[dict[str, Any], SparkSession, dict[str, float]]:
    """The spec, a session built from its ``spark`` section by ours' builder (same jars and settings), and the
    seconds to import (``import_s``, since this call) and to start the session (``spark_start_s``).
    """
    began = time.perf_counter()
    spec = json.loads(Path(spec_path).read_text())
    from dynamic_kafka.config.models import SparkConfig
    from dynamic_kafka.spark.session import build_spark_session

    imported = time.perf_counter()
    spark = build_spark_session(SparkConfig.model_validate(spec["spark"]))
    return spec, spark, {"import_s": imported - began, "spark_start_s": time.perf_counter() - imported}


def kafka_rows(spark: SparkSession, sources: dict[str, Any], *, stream: bool = False) -> DataFrame:
    """Per cluster of the spec's ``sources``, one Kafka source over its ranges (``assign``, numeric offsets, the
    Kafka options ours sets: headers, ``read_committed``) with a literal ``cluster`` column, unioned by name.
    ``stream``: a streaming source from the ranges' starts (it reads up to the latest offsets when its query
    starts), else a batch read of exactly the ranges.
    """
    from functools import reduce

    from pyspark.sql import functions as sf

    frames = []
    for cluster, source in sorted(sources.items()):
        topic = source["topic"]
        ranges = {int(p): r for p, r in source["ranges"].items()}
        reader = (
            (spark.readStream if stream else spark.read)
            .format("kafka")
            .option("kafka.bootstrap.servers", source["bootstrap_servers"])
            .option("kafka.isolation.level", "read_committed")
            .option("includeHeaders", "true")
            .option("assign", json.dumps({topic: sorted(ranges)}))
            .option("startingOffsets", json.dumps({topic: {str(p): r[0] for p, r in ranges.items()}}))
        )
        if not stream:
            reader = reader.option("endingOffsets", json.dumps({topic: {str(p): r[1] for p, r in ranges.items()}}))
        frames.append(reader.load().withColumn("cluster", sf.lit(cluster)))
    return reduce(lambda a, b: a.unionByName(b), frames)


if __name__ == "__main__":
    main(sys.argv[1])
