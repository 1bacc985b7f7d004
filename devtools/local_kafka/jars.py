"""Kafka's jars for the local brokers.

The broker's classpath is Kafka's own runtime dependencies from Maven Central (see
:mod:`dynamic_kafka._toolchain.ivy`), plus an SLF4J binding so its logs reach log4j2 and the cluster's log file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dynamic_kafka._toolchain.ivy import resolve_jars

if TYPE_CHECKING:
    from pathlib import Path

# Kafka 4.x logs through SLF4J 1.7 and ships no binding in its pom; log4j-slf4j-impl (the SLF4J 1.x binding, not
# log4j-slf4j2-impl) routes it to the log4j-core that kafka-server already depends on, at the same version.
LOG4J_VERSION = "2.24.3"


def kafka_coordinates(kafka_version: str) -> list[str]:
    """Return the Maven coordinates whose runtime closure is a Kafka broker's classpath."""
    return [
        f"org.apache.kafka:kafka_2.13:{kafka_version}",
        f"org.apache.logging.log4j:log4j-slf4j-impl:{LOG4J_VERSION}",
    ]


def resolve_kafka_jars(kafka_version: str) -> Path:
    """Return the folder of a Kafka version's jars (``<cache>/kafka-<version>/libs``), downloading them once.

    Raises:
        ToolchainError: no Java, Maven Central is unreachable and nothing is cached, or a download failed.
    """
    return resolve_jars(f"kafka-{kafka_version}", kafka_coordinates(kafka_version))
