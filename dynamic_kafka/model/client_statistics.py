"""The Kafka client's own statistics (librdkafka's ``statistics.interval.ms``) of the clients this process used
during one run or health check, per cluster and broker: what ``register.consumer.metrics: true`` adds to the run
summary, the health report and the pushed metrics (docs/metrics.md; decision 0108).
"""

from __future__ import annotations

from pydantic import Field

from dynamic_kafka.frozen import FrozenModel


class BrokerClientStatistics(FrozenModel):
    """One broker connection's figures, summed over the clients that talked to it."""

    broker: str = Field(
        description="librdkafka's name of the connection: ``host:port/<node id>``, or ``GroupCoordinator`` for the "
        "group coordinator's own connection."
    )
    requests_sent: int = Field(0, description="Requests sent (librdkafka: tx).")
    bytes_sent: int = Field(0, description="Bytes sent (txbytes).")
    responses_received: int = Field(0, description="Responses received (rx).")
    bytes_received: int = Field(0, description="Bytes received (rxbytes).")
    errors: int = Field(0, description="Transmission and receive errors (txerrs + rxerrs).")
    request_timeouts: int = Field(0, description="Requests that timed out (req_timeouts).")
    rtt_avg_seconds: float | None = Field(
        None, description="Mean round-trip time of the responses received (None: no response was timed)."
    )
    rtt_p99_seconds: float | None = Field(
        None,
        description="The highest 99th percentile round-trip time of librdkafka's statistics windows (an upper "
        "bound of the whole's: windows' percentiles do not combine exactly).",
    )


class ClusterClientStatistics(FrozenModel):
    """The statistics of every client this process used on one cluster during one run or health check."""

    cluster_id: str
    clients: int = Field(description="Client handles that reported statistics (an admin client, consumers).")
    brokers: tuple[BrokerClientStatistics, ...] = Field((), description="Per broker connection, by name.")
