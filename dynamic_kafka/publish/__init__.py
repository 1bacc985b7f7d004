"""Publications: a Delta table's new rows published to a logical stream, exactly once (docs/publish.md).

The operation is :func:`dynamic_kafka.publish.publisher.publish`; its protocol is in
:mod:`dynamic_kafka.publish.protocol`.
"""
