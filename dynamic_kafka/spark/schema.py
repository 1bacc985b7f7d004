"""The columns dynamic-kafka reads and writes, spelled once: every other module derives its column lists here.

- The reader's output (:data:`OUTPUT_FIELDS`): Spark's Kafka source columns (:data:`KAFKA_FIELDS`) plus
  ``cluster`` (the logical ``cluster_id``) and ``stream`` (the split's ``stream_id``).
- The sink (:data:`SINK_COLUMNS`): the output columns, with ``key`` binary, string or a struct per ``key.format`` and
  ``value`` binary, string or a struct per ``value.schema``, then ``_run_seq`` (bigint; null for backfill rows
  unless the caller gives one).
- The dead-letter table (:data:`DEAD_LETTER_COLUMNS`): where the record came from, its raw ``key``/``value``
  bytes and headers, the decode ``error`` and ``_run_seq``.
- Statistics (:data:`STATS_COLUMNS`): tables dynamic-kafka creates collect file statistics on every column but the
  payload (``key``, ``value``, ``headers``, ``error``), so MERGE and coordinate lookups skip files however wide a
  JSON ``value`` struct is.

Pure: no Spark import.
"""

from __future__ import annotations

# Spark's Kafka source schema (with includeHeaders), in the source's order, as (name, Spark DDL type).
KAFKA_FIELDS: tuple[tuple[str, str], ...] = (
    ("key", "BINARY"),
    ("value", "BINARY"),
    ("topic", "STRING"),
    ("partition", "INT"),
    ("offset", "BIGINT"),
    ("timestamp", "TIMESTAMP"),
    ("timestampType", "INT"),
    ("headers", "ARRAY<STRUCT<key: STRING, value: BINARY>>"),
)
CLUSTER = "cluster"
STREAM = "stream"
RUN_SEQ = "_run_seq"
ERROR = "error"
DECODE_ERROR = "_decode_error"
"""The decoded frame's column holding why a record did not decode (null when it did); never landed."""
# The decoded frame's columns holding a record's original key and value bytes (the dead-letter table lands them).
RAW_KEY = "_raw_key"
RAW_VALUE = "_raw_value"

OUTPUT_FIELDS: tuple[tuple[str, str], ...] = (*KAFKA_FIELDS, (CLUSTER, "STRING"), (STREAM, "STRING"))
KAFKA_COLUMNS: tuple[str, ...] = tuple(name for name, _ in KAFKA_FIELDS)
OUTPUT_COLUMNS: tuple[str, ...] = tuple(name for name, _ in OUTPUT_FIELDS)

SINK_COLUMNS: tuple[str, ...] = (*OUTPUT_COLUMNS, RUN_SEQ)
# A record's identity in the sink: MERGE matches on it, and overlap checks look it up.
MERGE_KEYS: tuple[str, ...] = (CLUSTER, "topic", "partition", "offset")
# Origin and coordinates first, then the raw payload, then why it is here.
_PAYLOAD = ("key", "value", "headers")
DEAD_LETTER_COLUMNS: tuple[str, ...] = (
    CLUSTER,
    STREAM,
    *(name for name in KAFKA_COLUMNS if name not in _PAYLOAD),
    *_PAYLOAD,
    ERROR,
    RUN_SEQ,
)
STATS_COLUMNS = ",".join(name for name in DEAD_LETTER_COLUMNS if name not in (*_PAYLOAD, ERROR))
"""The ``delta.dataSkippingStatsColumns`` of the sink and dead-letter tables dynamic-kafka creates."""
