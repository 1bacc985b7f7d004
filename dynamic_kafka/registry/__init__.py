"""Schema Registry payloads: the Confluent wire format and a cached, typed registry client.

Pure parts only so far; decoding in Spark builds on them (see docs/formats.md).
"""

from dynamic_kafka.errors import WireFormatError
from dynamic_kafka.registry.client import RegistryClient, RegistryConfig, WriterSchema
from dynamic_kafka.registry.wire import (
    MAGIC_BYTE,
    FramedHeader,
    encode_header,
    encode_message_indexes,
    parse_header,
    parse_message_indexes,
)

__all__ = [
    "MAGIC_BYTE",
    "FramedHeader",
    "RegistryClient",
    "RegistryConfig",
    "WireFormatError",
    "WriterSchema",
    "encode_header",
    "encode_message_indexes",
    "parse_header",
    "parse_message_indexes",
]
