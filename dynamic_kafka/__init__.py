"""dynamic-kafka: exactly-once batch landing of multi-cluster Kafka streams into Delta Lake."""

__version__ = "0.1.0"
