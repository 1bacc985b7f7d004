"""The only part of dynamic-kafka that talks to confluent-kafka for the driver's questions.

Topic ids and partitions, earliest / latest (last stable) offsets, offsets for timestamps and consumer-group
offsets, each batched into one admin call per cluster and offset kind. confluent-kafka errors are wrapped here
(:mod:`dynamic_kafka.kafka.failures`): nothing above this package sees a ``KafkaException``, and no message
or log line it emits contains a secret value.
"""

from dynamic_kafka.kafka.client import KafkaAdmin, OffsetQuery, Partition, TopicDescription, list_topic_names
from dynamic_kafka.kafka.requests import run_requests, status_requests
from dynamic_kafka.kafka.snapshot import ClusterRequest, take_broker_snapshot

__all__ = [
    "ClusterRequest",
    "KafkaAdmin",
    "OffsetQuery",
    "Partition",
    "TopicDescription",
    "list_topic_names",
    "run_requests",
    "status_requests",
    "take_broker_snapshot",
]
