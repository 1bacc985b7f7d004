"""The only part of dynamic-kafka that talks to confluent-kafka for the driver's questions.

Topic ids and partitions, earliest / latest (last stable) offsets, offsets for timestamps and consumer-group
offsets, each batched into one admin call per cluster and offset kind. confluent-kafka errors are wrapped here
(:mod:`dynamic_kafka.kafka.failures`): nothing above this package sees a ``KafkaException``, and no message
or log line it emits contains a secret value.
"""

from dynamic_kafka.kafka.client import Isolation, KafkaAdmin, OffsetQuery, Partition, TopicDescription
from dynamic_kafka.kafka.snapshot import ClusterRequest, take_broker_snapshot

__all__ = [
    "ClusterRequest",
    "Isolation",
    "KafkaAdmin",
    "OffsetQuery",
    "Partition",
    "TopicDescription",
    "take_broker_snapshot",
]
