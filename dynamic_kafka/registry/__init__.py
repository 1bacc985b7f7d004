"""Schema Registry payloads: the Confluent wire format and a cached, typed registry client.

The client (and confluent-kafka's registry module with its HTTP stack) is imported on first use of
``RegistryClient`` / ``WriterSchema``, so the config models can import :mod:`dynamic_kafka.registry.config`
cheaply.
"""

from typing import TYPE_CHECKING, Any

from dynamic_kafka.errors import WireFormatError
from dynamic_kafka.registry.config import RegistryConfig
from dynamic_kafka.registry.wire import (
    MAGIC_BYTE,
    FramedHeader,
    encode_header,
    encode_message_indexes,
    parse_header,
    parse_message_indexes,
)

if TYPE_CHECKING:
    from dynamic_kafka.registry.client import RegistryClient, WriterSchema

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


def __getattr__(name: str) -> Any:
    if name in ("RegistryClient", "WriterSchema"):
        from dynamic_kafka.registry import client

        return getattr(client, name)
    raise AttributeError(name)
