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

STATISTICS_INTERVAL_MS = "100"
"""What ``register.consumer.metrics: true`` sets ``statistics.interval.ms`` to. The product's clients live for a
fraction of a second to a few seconds and each waits at close for one more statistics document, so a short interval
costs least (librdkafka 2.x emits at 100 ms; an explicit ``statistics.interval.ms`` wins). Decision 0108."""

TRANSLATED: dict[str, str] = {
    "client.id.prefix": "'client.id' ('<value>-<cluster_id>')",
    "register.consumer.metrics": f"'statistics.interval.ms' ({STATISTICS_INTERVAL_MS} when true, unset when false): "
    "the statistics of this product's own Kafka clients, per cluster and broker, in the run summary, the health "
    "report and the pushed metrics (docs/metrics.md)",
}
"""Flink's option -> what it becomes here. ``client.id.prefix: P`` -> ``client.id: P-<cluster_id>`` (one id per
cluster, as Flink makes one per subtask; an explicit ``client.id`` wins); ``register.consumer.metrics: true`` ->
``statistics.interval.ms`` (Flink's default is true, this product's is off: the statistics cost a wait at each
client's close)."""

REFUSED: dict[str, str] = {
    "partition.discovery.interval.ms": "every run discovers topics and partitions when it plans, and between runs "
    "the pipeline's `orchestration.sensor.interval_seconds` sets how often the Dagster sensor looks for metadata "
    "changes",
    "commit.offsets.on.checkpoint": "offsets are committed to the pipeline's `consumer_group` after each run's sink "
    "commit (monitoring only); set `consumer_group: null` to commit to no group",
    "stream-metadata-discovery-interval-ms": "the pipeline's `orchestration.sensor.interval_seconds` (the Dagster "
    "sensor's poll)",
    "stream-metadata-discovery-failure-threshold": "the pipeline's `orchestration.sensor.failure_threshold`",
}
"""Flink's options with no client meaning here -> the product's key (or command) that does their job."""

_METRICS = "register.consumer.metrics"
_FLAGS = {"true": True, "false": False}
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
        key: f"Flink's {key!r} is translated to this product's {product}"
        for key, product in TRANSLATED.items()
        if key in properties
    }
    refused = {
        key: f"{key!r} is a Flink source option, not a Kafka client property; remove it: {REFUSED[key]}"
        for key in REFUSED
        if key in properties
    }
    flag = properties.get(_METRICS)
    if flag is not None and flag.strip().lower() not in _FLAGS:
        del translated[_METRICS]
        refused[_METRICS] = f"{_METRICS!r} is true or false, not {flag!r}"
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
        _notice("client.id.prefix", "client.id", cluster_id)
    flag = result.pop(_METRICS, None)
    if flag is not None:
        wanted = _FLAGS.get(flag.strip().lower())
        if wanted is None:
            raise ConfigError(
                f"cluster {cluster_id!r}: property {_METRICS!r} is {flag!r}.",
                hint="Write true (this product's clients report librdkafka's statistics) or false.",
            )
        if wanted:
            result.setdefault("statistics.interval.ms", STATISTICS_INTERVAL_MS)
        _notice(_METRICS, "statistics.interval.ms", cluster_id)
    return result


def _notice(key: str, product: str, cluster_id: str) -> None:
    if (key, cluster_id) not in _noticed:
        _noticed.add((key, cluster_id))
        logger.info("cluster %r: Flink's %r is translated to %r", cluster_id, key, product)
