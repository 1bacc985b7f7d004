"""Splits -> one Spark DataFrame: one bounded ``kafka`` read per cluster, unioned.

Invariants:

- Every read names its partitions with ``assign`` and exact numeric ``startingOffsets`` / ``endingOffsets``
  taken from the splits (start inclusive, stop exclusive; never the -2/-1 sentinels), so a re-executed plan reads
  exactly the same records.
- ``failOnDataLoss`` is on: a planned offset that the broker no longer has fails the job instead of silently
  landing fewer records than the plan promised.
- Nothing is collected to the driver; the result is lazy.
- Resolved client properties (secrets) exist only inside the reader's options. They are never logged, and Spark
  redacts every option whose key or value matches ``spark.redaction.regex`` (the JAAS config carries
  ``password=``, which Spark's default pattern already matches; :mod:`dynamic_kafka.spark.session` adds
  ``sasl.jaas.config`` explicitly).

Output columns: :data:`dynamic_kafka.spark.schema.OUTPUT_COLUMNS` (Spark's Kafka columns, plus the logical
``cluster_id`` and the split's ``stream_id``).

Client properties are written librdkafka-style (the driver uses confluent-kafka with the same metadata); the Spark
connector runs the Java client, so :func:`dynamic_kafka.kafka.java_properties.java_client_properties` translates
them. See its docstring for the table.
"""

from __future__ import annotations

import json
import logging
import math
from collections import defaultdict
from functools import reduce
from typing import TYPE_CHECKING

from dynamic_kafka.errors import ConfigError
from dynamic_kafka.kafka.java_properties import java_client_properties
from dynamic_kafka.secrets import guard_py4j_logging
from dynamic_kafka.spark.schema import CLUSTER, KAFKA_COLUMNS, OUTPUT_FIELDS, STREAM

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from dynamic_kafka.metadata.models import ClusterMetadata
    from dynamic_kafka.model.plan import Split

logger = logging.getLogger(__name__)


# The Java consumer's fetch.max.wait.ms (default 500) unless the cluster's properties set it. After each poll the
# consumer sends the next fetch ahead (pipelining), and Spark then asks the broker for the partition's earliest and
# latest offsets on the same connection; at the end of a planned range that fetch finds no new data, so the broker
# holds it for the whole wait and the offset request queues behind it. Every partition range therefore paid one
# full wait (measured: 500 ms per task at the default; at 10 ms, a 10,000-record run of 16 ranges in one task spent
# 0.55 s in its task, 0.37 s at 0). The planned ranges exist on the broker, so a fetch never needs to wait for data.
FETCH_MAX_WAIT_MS = 0

SMALL_TASK_RECORDS = 50_000
"""A read is coalesced to one task per this many records when that gives fewer tasks than its partition ranges:
each task has a fixed cost (a Kafka consumer, generated code, one more file in the sink and in every
later snapshot of it) that dominates a small run, while a large read keeps one task per range."""


def kafka_read_options(
    cluster: ClusterMetadata,
    splits: Sequence[Split],
    *,
    isolation_level: str,
    min_partitions: int | None = None,
) -> dict[str, str]:
    """The ``spark.read.format("kafka")`` options for one cluster's splits.

    Resolves the cluster's secret references: the result holds secrets, so never log it.

    Raises:
        ConfigError: a secret reference cannot be resolved, a property has no Java equivalent, or a split
            belongs to another cluster.
    """
    assign: dict[str, list[int]] = defaultdict(list)
    starting: dict[str, dict[str, int]] = defaultdict(dict)
    ending: dict[str, dict[str, int]] = defaultdict(dict)
    for split in sorted(splits, key=lambda s: (s.topic, s.partition)):
        if split.cluster_id != cluster.cluster_id:
            raise ConfigError(
                f"split {split.key} does not belong to cluster {cluster.cluster_id!r}; this is a bug in the caller."
            )
        if split.partition in assign[split.topic]:
            raise ConfigError(f"partition {split.key} is planned twice; this is a bug in the caller.")
        assign[split.topic].append(split.partition)
        starting[split.topic][str(split.partition)] = split.start_offset
        ending[split.topic][str(split.partition)] = split.stop_offset

    options = {
        f"kafka.{name}": value
        for name, value in java_client_properties(cluster.client_properties(), cluster_id=cluster.cluster_id).items()
    }
    options.update(
        {
            "kafka.bootstrap.servers": cluster.bootstrap_servers,
            "kafka.isolation.level": isolation_level,
            "assign": json.dumps(assign, sort_keys=True),
            "startingOffsets": json.dumps(starting, sort_keys=True),
            "endingOffsets": json.dumps(ending, sort_keys=True),
            "includeHeaders": "true",
            "failOnDataLoss": "true",
        }
    )
    options.setdefault("kafka.fetch.max.wait.ms", str(FETCH_MAX_WAIT_MS))
    if min_partitions is not None:
        options["minPartitions"] = str(min_partitions)
    return options


def read_splits(
    spark: SparkSession,
    splits: Sequence[Split],
    clusters: Mapping[str, ClusterMetadata],
    *,
    isolation_level: str,
    min_partitions: int | None,
) -> DataFrame:
    """Reads exactly the planned ranges: one Kafka read per cluster, unioned by name. Lazy; collects nothing.

    Args:
        spark: the session (with the Kafka connector on its classpath).
        splits: the ranges to read (a plan's ``read_splits``); empty ranges are ignored.
        clusters: connection metadata by ``cluster_id``; the current bootstrap servers and properties are used,
            so changed credentials apply to the next run (and to a recovered one).
        isolation_level: ``read_committed`` or ``read_uncommitted``: must be the one the plan's stop offsets were
            computed with.
        min_partitions: Spark's ``minPartitions`` for the whole read; it is shared among the clusters in
            proportion to their planned records (at least 1 each). Without it, a small read is coalesced into
            one task per :data:`SMALL_TASK_RECORDS` records.

    Returns:
        A DataFrame with :data:`~dynamic_kafka.spark.schema.OUTPUT_COLUMNS`; with no splits, an empty one with the
        same schema.

    Raises:
        ConfigError: a split's cluster is missing from ``clusters``, a secret reference cannot be resolved, or a
            property has no Java client equivalent.

    Example:
        >>> df = read_splits(spark, plan.read_splits, clusters, isolation_level="read_committed",
        ...                  min_partitions=None)  # doctest: +SKIP
    """
    from pyspark.sql import functions as sf

    guard_py4j_logging()  # the options below carry credentials; the session may have been built by the caller
    by_cluster: dict[str, list[Split]] = defaultdict(list)
    for split in splits:
        if split.stop_offset > split.start_offset:
            by_cluster[split.cluster_id].append(split)
    missing = sorted(set(by_cluster) - set(clusters))
    if missing:
        raise ConfigError(
            f"no connection metadata for cluster(s) {', '.join(map(repr, missing))} of the splits to read.",
            hint="Pass the ClusterMetadata of every cluster in the plan.",
        )
    if not by_cluster:
        return empty_output(spark)

    total = sum(s.record_count for group in by_cluster.values() for s in group)
    frames = []
    for cluster_id in sorted(by_cluster):
        group = by_cluster[cluster_id]
        share = None
        if min_partitions is not None:
            share = max(1, math.ceil(min_partitions * sum(s.record_count for s in group) / total))
        options = kafka_read_options(clusters[cluster_id], group, isolation_level=isolation_level, min_partitions=share)
        logger.info(
            "reading %d partition range(s), %d offsets, from cluster %r (topics: %s)",
            len(group),
            sum(s.record_count for s in group),
            cluster_id,
            ", ".join(sorted({s.topic for s in group})),
        )
        frame = spark.read.format("kafka").options(**options).load()
        frames.append(
            frame.select(
                *KAFKA_COLUMNS,
                sf.lit(cluster_id).alias(CLUSTER),
                _stream_column(group).alias(STREAM),
            )
        )
    rows = reduce(lambda a, b: a.unionByName(b), frames)
    tasks = max(1, math.ceil(total / SMALL_TASK_RECORDS))
    ranges = sum(len(group) for group in by_cluster.values())
    if min_partitions is None and tasks < ranges:
        logger.info("%d offsets in %d ranges: read in %d task(s)", total, ranges, tasks)
        rows = rows.coalesce(tasks)
    return rows


def _stream_column(splits: Sequence[Split]) -> Column:
    """``stream`` for one cluster's rows: the ``stream_id`` of the row's split. The splits of one topic usually
    agree (a map by topic); a drained partition keeps the stream it was landed under while the topic's other
    partitions follow the metadata, so a topic whose splits disagree is mapped by partition. With a table per
    stream this column picks the row's table, so it must be the split's own stream: the plan's table of that
    split, the one its recovery and completeness check.
    """
    from pyspark.sql import functions as sf

    by_partition = {(split.topic, split.partition): split.stream_id for split in splits}
    if len(set(by_partition.values())) == 1:
        return sf.lit(next(iter(by_partition.values())))
    by_topic: dict[str, set[str]] = defaultdict(set)
    for (topic, _), stream in by_partition.items():
        by_topic[topic].add(stream)
    agreeing = {topic: streams.pop() for topic, streams in by_topic.items() if len(streams) == 1}
    column = _mapped(agreeing, sf.col("topic"))
    split_topics = {key: stream for key, stream in by_partition.items() if key[0] not in agreeing}
    if not split_topics:
        return column
    partition_key = sf.concat_ws(_KEY_SEPARATOR, sf.col("partition").cast("string"), sf.col("topic"))
    keyed = {f"{partition}{_KEY_SEPARATOR}{topic}": stream for (topic, partition), stream in split_topics.items()}
    return sf.coalesce(_mapped(keyed, partition_key), column)


# Between the partition number and the topic in a key of the partition map (Kafka topic names never hold it).
_KEY_SEPARATOR = "/"


def _mapped(streams: Mapping[str, str], key: Column) -> Column:
    """The stream of ``key`` in ``streams`` (null for a key not in it, or when ``streams`` is empty)."""
    from pyspark.sql import functions as sf

    if not streams:
        return sf.lit(None).cast("string")
    pairs = [sf.lit(x) for name in sorted(streams) for x in (name, streams[name])]
    return sf.create_map(*pairs)[key]


def empty_output(spark: SparkSession) -> DataFrame:
    """An empty frame of the reader's output schema: what a run's rows are analysed over before anything is read.

    Its schema is built here, not given as DDL, which a Spark Connect client sends to the server to parse (one
    round trip per frame).
    """
    return spark.createDataFrame([], schema=output_schema())


def output_schema() -> StructType:
    """The reader's output schema (:data:`~dynamic_kafka.spark.schema.OUTPUT_FIELDS`) as a StructType."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    types = {
        "BINARY": BinaryType(),
        "STRING": StringType(),
        "INT": IntegerType(),
        "BIGINT": LongType(),
        "TIMESTAMP": TimestampType(),
        "ARRAY<STRUCT<key: STRING, value: BINARY>>": ArrayType(header),
    }
    return StructType([StructField(name, types[ddl]) for name, ddl in OUTPUT_FIELDS])
