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

Output columns, in order: ``key, value, topic, partition, offset, timestamp, timestampType, headers, cluster,
stream`` (Spark's Kafka columns, plus the logical ``cluster_id`` and the split's ``stream_id``).

Client properties are written librdkafka-style (the driver uses confluent-kafka with the same metadata); the Spark
connector runs the Java client, so :func:`java_client_properties` translates them. See its docstring for the table.
"""

from __future__ import annotations

import json
import logging
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from functools import reduce
from typing import TYPE_CHECKING

from dynamic_kafka.errors import ConfigError
from dynamic_kafka.metadata.models import ClusterMetadata
from dynamic_kafka.plan.model import Split

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

logger = logging.getLogger(__name__)


class _NoPy4jCommandTraces(logging.Filter):
    """Drops py4j's DEBUG records: py4j logs every command it sends to the JVM in clear text, and the Kafka read
    options carry the resolved ``kafka.sasl.jaas.config``, so with DEBUG logging on the password would be logged."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno > logging.DEBUG


for _py4j_logger in ("py4j.clientserver", "py4j.java_gateway"):
    logging.getLogger(_py4j_logger).addFilter(_NoPy4jCommandTraces())

KAFKA_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers")
OUTPUT_COLUMNS = (*KAFKA_COLUMNS, "cluster", "stream")

# The Java consumer's fetch.max.wait.ms (default 500) unless the cluster's properties set it. Every Spark Kafka
# task of a bounded read spent one full wait idle (measured: 6 records in 4 tasks on 2 cores, 1.2 s -> 0.2 s;
# 1,000,000 records in 16 tasks, 6-8 s -> 2-3 s, same CPU). The planned ranges exist on the broker, so a short
# wait costs nothing: fetches return as soon as any data is there.
FETCH_MAX_WAIT_MS = 10

# librdkafka name -> Java client name, where only the name differs.
_RENAMED = {
    "sasl.mechanisms": "sasl.mechanism",
    "fetch.wait.max.ms": "fetch.max.wait.ms",
    "fetch.message.max.bytes": "max.partition.fetch.bytes",
    "socket.receive.buffer.bytes": "receive.buffer.bytes",
    "socket.send.buffer.bytes": "send.buffer.bytes",
    "socket.timeout.ms": "request.timeout.ms",
    "topic.metadata.refresh.interval.ms": "metadata.max.age.ms",
}

# Keys never passed to Spark: set by the reader itself, forbidden by the Spark connector (it manages groups,
# offsets and deserializers), or librdkafka-only knobs the Java client does not know.
_DROPPED = frozenset(
    {
        "bootstrap.servers",
        "metadata.broker.list",
        "isolation.level",  # the pipeline's isolation_level wins: the plan's stop offsets were computed under it
        "group.id",
        "auto.offset.reset",
        "enable.auto.commit",
        "enable.auto.offset.store",
        "key.deserializer",
        "value.deserializer",
        "interceptor.classes",
        "enable.partition.eof",
        "partition.assignment.strategy",
        "debug",
        "log_level",
        "log.connection.close",
        "statistics.interval.ms",
        "api.version.request",
        "broker.version.fallback",
        "socket.keepalive.enable",
        "socket.nagle.disable",
        "broker.address.family",
        "queued.min.messages",
        "queued.max.messages.kbytes",
        "sasl.oauthbearer.method",
    }
)

_SASL_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
_OAUTH_LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
_OAUTH_CALLBACK_HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
_KERBEROS_LOGIN_MODULE = "com.sun.security.auth.module.Krb5LoginModule"


def java_client_properties(properties: Mapping[str, str], *, cluster_id: str) -> dict[str, str]:
    """Translates librdkafka-style client properties into Java Kafka client properties (without ``kafka.``).

    Names the two clients share (``security.protocol``, ``sasl.mechanism``, ``ssl.key.password``,
    ``ssl.keystore.location``, ``client.id``, timeouts...) pass through, as do names this function does not know
    (so Java-only properties such as ``ssl.truststore.location`` can be written directly). The differences:

    ==========================================================  ==================================================
    librdkafka                                                  Java client
    ==========================================================  ==================================================
    ``sasl.username`` + ``sasl.password`` (mechanism PLAIN)     ``sasl.jaas.config`` = ``...plain.PlainLoginModule
                                                                required username="u" password="p";``
    same, mechanism SCRAM-SHA-256 / SCRAM-SHA-512               ``sasl.jaas.config`` with ``...scram.ScramLoginModule``
    ``sasl.oauthbearer.client.id`` / ``.client.secret`` /       ``sasl.jaas.config`` with ``OAuthBearerLoginModule``
    ``.scope`` / ``.extensions`` (method oidc)                  (clientId, clientSecret, scope, extensions),
                                                                ``sasl.login.callback.handler.class``, and
                                                                ``sasl.oauthbearer.token.endpoint.url`` as is
    ``sasl.kerberos.keytab`` + ``sasl.kerberos.principal``      ``sasl.jaas.config`` with ``Krb5LoginModule``
    ``sasl.mechanisms``                                         ``sasl.mechanism``
    ``security.protocol`` (any case)                            upper case (the Java client requires it)
    ``ssl.ca.location`` (a PEM file)                            ``ssl.truststore.location`` + ``type=PEM``
    ``ssl.certificate.location`` = ``ssl.key.location``         ``ssl.keystore.location`` + ``type=PEM``
    ``ssl.endpoint.identification.algorithm: none``             the same key, empty value
    ``fetch.wait.max.ms``, ``fetch.message.max.bytes``,          ``fetch.max.wait.ms``, ``max.partition.fetch.bytes``,
    ``socket.{receive,send}.buffer.bytes``,                      ``{receive,send}.buffer.bytes``,
    ``socket.timeout.ms``, ``topic.metadata.refresh.interval.ms``  ``request.timeout.ms``, ``metadata.max.age.ms``
    ==========================================================  ==================================================

    An explicit ``sasl.jaas.config`` wins over ``sasl.username``/``sasl.password``. Dropped: connection keys the
    reader sets itself (``bootstrap.servers``, ``isolation.level``), keys the Spark connector forbids or manages
    (``group.id``, ``auto.offset.reset``, ``enable.auto.commit``, deserializers, interceptors) and librdkafka-only
    knobs (``debug``, ``statistics.interval.ms``, ``socket.keepalive.enable``...).

    Args:
        properties: resolved client properties (may hold secrets: never log the result).
        cluster_id: for error messages.

    Returns:
        Java client properties.

    Raises:
        ConfigError: a librdkafka setting has no Java equivalent (``enable.ssl.certificate.verification: false``,
            separate PEM certificate and key files, an unknown SASL mechanism with username/password). The message
            names the key, never its value.

    Example:
        >>> java_client_properties(
        ...     {"security.protocol": "sasl_plaintext", "sasl.mechanism": "PLAIN",
        ...      "sasl.username": "u", "sasl.password": "p"}, cluster_id="east")["sasl.jaas.config"]
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="p";'
    """
    props = dict(properties)
    out: dict[str, str] = {}

    def take(key: str) -> str | None:
        return props.pop(key, None)

    mechanism = take("sasl.mechanism") or take("sasl.mechanisms")
    if mechanism is not None:
        mechanism = mechanism.strip().upper()
        out["sasl.mechanism"] = mechanism
    protocol = take("security.protocol")
    if protocol is not None:
        out["security.protocol"] = protocol.strip().upper()

    username, password = take("sasl.username"), take("sasl.password")
    jaas = take("sasl.jaas.config")
    oauth = {k: props.pop(k) for k in list(props) if k.startswith("sasl.oauthbearer.") and k in _OAUTH_JAAS_KEYS}
    keytab, principal = take("sasl.kerberos.keytab"), take("sasl.kerberos.principal")
    if jaas is not None:
        out["sasl.jaas.config"] = jaas
        if username is not None or password is not None:
            logger.warning(
                "cluster %r: both sasl.jaas.config and sasl.username/sasl.password are set; using sasl.jaas.config",
                cluster_id,
            )
    elif username is not None or password is not None:
        module = _SASL_LOGIN_MODULES.get(mechanism or "PLAIN")
        if module is None:
            raise ConfigError(
                f"cluster {cluster_id!r}: sasl.username/sasl.password cannot be used with sasl.mechanism "
                f"{mechanism!r} by the Spark (Java) Kafka client.",
                hint="Use PLAIN or SCRAM-SHA-256/512, or set sasl.jaas.config in the Java client's syntax.",
            )
        out["sasl.jaas.config"] = _jaas(module, {"username": username or "", "password": password or ""})
    elif oauth:
        options = {
            "clientId": oauth.get("sasl.oauthbearer.client.id"),
            "clientSecret": oauth.get("sasl.oauthbearer.client.secret"),
            "scope": oauth.get("sasl.oauthbearer.scope"),
        }
        for item in (oauth.get("sasl.oauthbearer.extensions") or "").split(","):
            name, sep, value = item.partition("=")
            if sep and name.strip():
                options[f"extension_{name.strip()}"] = value.strip()
        out["sasl.jaas.config"] = _jaas(_OAUTH_LOGIN_MODULE, {k: v for k, v in options.items() if v is not None})
        out["sasl.login.callback.handler.class"] = _OAUTH_CALLBACK_HANDLER
    elif keytab is not None or principal is not None:
        out["sasl.jaas.config"] = _jaas(
            _KERBEROS_LOGIN_MODULE,
            {"useKeyTab": "true", "storeKey": "true", "keyTab": keytab or "", "principal": principal or ""},
        )

    ca = take("ssl.ca.location")
    if ca is not None:
        out["ssl.truststore.location"] = ca
        out["ssl.truststore.type"] = "PEM"
    certificate, key = take("ssl.certificate.location"), take("ssl.key.location")
    if certificate is not None or key is not None:
        if certificate is None or certificate != key:
            raise ConfigError(
                f"cluster {cluster_id!r}: ssl.certificate.location and ssl.key.location name different files; the "
                "Java client reads a PEM client certificate and its key from one file.",
                hint="Concatenate the key and the certificate chain into one PEM file and point both keys at it, "
                "or use ssl.keystore.location with a PKCS12 keystore.",
            )
        out["ssl.keystore.location"] = certificate
        out["ssl.keystore.type"] = "PEM"
    verification = take("enable.ssl.certificate.verification")
    if verification is not None and verification.strip().lower() in {"false", "0"}:
        raise ConfigError(
            f"cluster {cluster_id!r}: enable.ssl.certificate.verification=false has no equivalent in the Spark "
            "(Java) Kafka client.",
            hint="Trust the broker's CA with ssl.ca.location instead.",
        )
    algorithm = take("ssl.endpoint.identification.algorithm")
    if algorithm is not None:
        out["ssl.endpoint.identification.algorithm"] = "" if algorithm.strip().lower() == "none" else algorithm

    for name, value in props.items():
        if name in _DROPPED:
            continue
        out[_RENAMED.get(name, name)] = value
    return out


_OAUTH_JAAS_KEYS = frozenset(
    {
        "sasl.oauthbearer.client.id",
        "sasl.oauthbearer.client.secret",
        "sasl.oauthbearer.scope",
        "sasl.oauthbearer.extensions",
    }
)


def _jaas(module: str, options: Mapping[str, str]) -> str:
    """A JAAS config line. Values are double-quoted, with ``\\`` and ``"`` escaped as the Java parser expects."""
    rendered = " ".join(f'{name}="{_quote(value)}"' for name, value in options.items())
    return f"{module} required {rendered};"


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


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
            proportion to their planned records (at least 1 each).

    Returns:
        A DataFrame with :data:`OUTPUT_COLUMNS`; with no splits, an empty one with the same schema.

    Raises:
        ConfigError: a split's cluster is missing from ``clusters``, a secret reference cannot be resolved, or a
            property has no Java client equivalent.

    Example:
        >>> df = read_splits(spark, plan.read_splits, clusters, isolation_level="read_committed",
        ...                  min_partitions=None)  # doctest: +SKIP
    """
    from pyspark.sql import functions as sf

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
        return _empty(spark)

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
                sf.lit(cluster_id).alias("cluster"),
                _stream_column(group).alias("stream"),
            )
        )
    return reduce(lambda a, b: a.unionByName(b), frames)


def _stream_column(splits: Sequence[Split]) -> Column:
    """``stream`` for one cluster's rows: the stream id of the row's topic (splits of one topic agree)."""
    from pyspark.sql import functions as sf

    streams: dict[str, str] = {}
    for split in splits:
        # min() keeps the choice deterministic should two splits of one topic ever disagree.
        streams[split.topic] = min(streams.get(split.topic, split.stream_id), split.stream_id)
    if len(set(streams.values())) == 1:
        return sf.lit(next(iter(streams.values())))
    pairs = [sf.lit(x) for topic in sorted(streams) for x in (topic, streams[topic])]
    return sf.create_map(*pairs)[sf.col("topic")]


def _empty(spark: SparkSession) -> DataFrame:
    return spark.createDataFrame([], schema=output_schema_ddl())


def output_schema_ddl() -> str:
    """The reader's output schema as Spark DDL (Spark's Kafka source schema plus ``cluster`` and ``stream``)."""
    return (
        "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, "
        "timestampType INT, headers ARRAY<STRUCT<key: STRING, value: BINARY>>, cluster STRING, stream STRING"
    )
