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


def main(spec_path: str) -> None:
    """Run the hand-written PySpark job described by the spec file (a baseline to compare with)."""
    began = time.perf_counter()
    spec = json.loads(Path(spec_path).read_text())
    from functools import reduce

    from pyspark.sql import DataFrame
    from pyspark.sql import functions as sf

    from dynamic_kafka.config.models import SparkConfig
    from dynamic_kafka.spark.session import build_spark_session

    imported = time.perf_counter()
    spark = build_spark_session(SparkConfig.model_validate(spec["spark"]))
    started = time.perf_counter()
    frames = []
    for cluster, source in sorted(spec["sources"].items()):
        topic = source["topic"]
        ranges = {int(p): r for p, r in source["ranges"].items()}
        frame = (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", source["bootstrap_servers"])
            .option("kafka.isolation.level", "read_committed")
            .option("includeHeaders", "true")
            .option("assign", json.dumps({topic: sorted(ranges)}))
            .option("startingOffsets", json.dumps({topic: {str(p): r[0] for p, r in ranges.items()}}))
            .option("endingOffsets", json.dumps({topic: {str(p): r[1] for p, r in ranges.items()}}))
            .load()
            .withColumn("cluster", sf.lit(cluster))
        )
        frames.append(frame)
    rows: DataFrame = reduce(lambda a, b: a.unionByName(b), frames)
    rows.write.format("delta").mode("append").save(spec["sink"])
    done = time.perf_counter()
    print(json.dumps({"import_s": imported - began, "spark_start_s": started - imported, "job_s": done - started}))


if __name__ == "__main__":
    main(sys.argv[1])
