"""The AvailableNow peer: what a Spark user picks instead of dynamic-kafka for bounded incremental runs.

``python -m bench.available_now SPEC.json`` runs one Structured Streaming query with ``Trigger.AvailableNow``
through the Spark Connect server the spec names: per cluster one ``spark.readStream.format("kafka")`` with
``assign`` and numeric starting offsets (the ranges' starts: the harness takes them from the brokers, as our
planner does), the same Kafka options as ours (headers, ``read_committed``), a literal ``cluster`` column, a union,
and one ``writeStream.format("delta")`` with its checkpoint in the spec's folder. The query reads up to the
offsets that were the latest when it started, which for a data set nobody writes to are the ranges' ends. What it
does not do: plan, guard against concurrent runs, keep a table of its offsets that a user can read, follow topics
that move between clusters.

Prints one JSON line: seconds to import, to connect, for the query, and the records its progress reports counted.
"""

from __future__ import annotations

import json
import sys
import time


def main(spec_path: str) -> None:
    """Run the AvailableNow query described by the spec file (a peer to compare with)."""
    from bench.baseline import kafka_rows, start

    spec, spark, times = start(spec_path)
    started = time.perf_counter()
    query = (
        kafka_rows(spark, spec["sources"], stream=True)
        .writeStream.format("delta")
        .option("checkpointLocation", spec["checkpoint"])
        .trigger(availableNow=True)
        .start(spec["sink"])
    )
    query.awaitTermination()
    records = sum(p.numInputRows for p in query.recentProgress)
    print(json.dumps({**times, "query_s": time.perf_counter() - started, "records": records}))


if __name__ == "__main__":
    main(sys.argv[1])
