"""Flink's Kafka source options pasted into client ``properties``: translated where they mean something here,
refused naming this product's key where they do not.

A Flink (Dynamic) Kafka Source job passes its source options through the same ``Properties`` as the Kafka client's
own (``builder.setProperty``), so a team moving a job over pastes them into ``properties``. Neither client knows
them: librdkafka refuses them at the first broker call ("No such configuration property"), late and without saying
what to write instead. So they are handled before any client is built: by ``dynamic-kafka check`` offline, and by
every run for the properties a metadata service returns (:func:`translate_flink_options`).

Example:
    >>> translate_flink_options({"client.id.prefix": "orders-job"}, cluster_id="east")
    {'client.id': 'orders-job-east'}
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from dynamic_kafka.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Mapping

logger = logging.getLogger(__name__)

TRANSLATED: dict[str, str] = {
    "client.id.prefix": "client.id",
}
"""Flink's option -> the client property it becomes (``client.id.prefix: P`` -> ``client.id: P-<cluster_id>``: one
id per cluster, as Flink makes one per subtask). An explicit ``client.id`` wins over it."""

REFUSED: dict[str, str] = {
    "partition.discovery.interval.ms": "every run discovers topics and partitions when it plans, and between runs "
    "the pipeline's `sensor.interval_seconds` sets how often the Dagster sensor looks for metadata changes",
    "commit.offsets.on.checkpoint": "offsets are committed to the pipeline's `consumer_group` after each run's sink "
    "commit (monitoring only); set `consumer_group: null` to commit to no group",
    "register.consumer.metrics": "a run's figures are its summary (`dynamic-kafka run --json`) and, between runs, "
    "`dynamic-kafka health`; the project's `metrics` section sends both to a Prometheus Pushgateway or an "
    "OTLP receiver (docs/metrics.md); the Kafka consumer's own statistics are not exported",
    "stream-metadata-discovery-interval-ms": "the pipeline's `sensor.interval_seconds` (the Dagster sensor's poll)",
    "stream-metadata-discovery-failure-threshold": "the pipeline's `sensor.failure_threshold`",
}
"""Flink's options with no client meaning here -> the product's key (or command) that does their job."""

_noticed: set[tuple[str, str]] = set()


class FlinkOptionError(ConfigError):
    """A Flink source option in client properties that has no meaning here.

    Attributes:
        key: the Flink option.
        cluster_id: the cluster whose properties hold it.
    """

    def __init__(self, key: str, *, cluster_id: str) -> None:
        self.key = key
        self.cluster_id = cluster_id
        super().__init__(
            f"cluster {cluster_id!r}: property {key!r} is a Flink source option, not a Kafka client property.",
            hint=f"Remove it from `properties`: {REFUSED[key]}.",
        )


def flink_option_findings(properties: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """The Flink options of ``properties``: ``(translated, refused)``, each by key, with the one line to show
    (what it becomes, or what to use instead).
    """
    translated = {
        key: f"Flink's {key!r} is translated to this product's {product!r} ('<value>-<cluster_id>')"
        for key, product in TRANSLATED.items()
        if key in properties
    }
    refused = {
        key: f"{key!r} is a Flink source option, not a Kafka client property; remove it: {REFUSED[key]}"
        for key in REFUSED
        if key in properties
    }
    return translated, refused


def translate_flink_options(properties: Mapping[str, str], *, cluster_id: str) -> dict[str, str]:
    """``properties`` with Flink's translated options replaced by the product's keys (a notice logged once per
    cluster and option in this process).

    Raises:
        FlinkOptionError: a Flink option that has no meaning here (:data:`REFUSED`), naming what to use instead.
    """
    refused = sorted(properties.keys() & REFUSED.keys())
    if refused:
        raise FlinkOptionError(refused[0], cluster_id=cluster_id)
    result = dict(properties)
    prefix = result.pop("client.id.prefix", None)
    if prefix is not None:
        result.setdefault("client.id", f"{prefix}-{cluster_id}")
        if ("client.id.prefix", cluster_id) not in _noticed:
            _noticed.add(("client.id.prefix", cluster_id))
            logger.info("cluster %r: Flink's 'client.id.prefix' is translated to 'client.id'", cluster_id)
    return result
