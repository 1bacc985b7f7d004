"""The exception hierarchy of the development services (local Kafka, registry, S3, PostgreSQL, Spark Connect) and
the test helpers built on them.

A root of its own, apart from :class:`dynamic_kafka.errors.DynamicKafkaError`: these errors come from tooling that
never ships with the product, so nothing a user of the library catches or maps (the Dagster layer, ``--json``
error documents) ever sees one. Each error says what happened, where, and the fix (``hint=``), as the library's do.
The services also call the library's toolchain (Java, Maven, the jar cache), whose
:class:`~dynamic_kafka.errors.ToolchainError` they let through unchanged.
"""

from __future__ import annotations


class DevtoolsError(Exception):
    """Root of every error raised by the development services and test helpers."""

    retriable: bool = False

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        self.message = message
        """What happened, without the hint (``str()`` of the error is both)."""
        self.hint = hint
        super().__init__(f"{message} {hint}" if hint else message)


class LocalKafkaError(DevtoolsError):
    """The local Kafka tooling could not start, stop or find a broker."""


class LocalS3Error(DevtoolsError):
    """The local S3 API server (``python -m devtools local-s3``) could not start, stop or be found."""


class LocalRegistryError(DevtoolsError):
    """The local Schema Registry tooling could not download, start, stop or find a registry."""


class LocalPostgresError(DevtoolsError):
    """The local PostgreSQL tooling could not find, initialize, start or stop the server."""


class LocalBrowserError(DevtoolsError):
    """The headless Chromium (UI screenshots and render tests) could not start, answer, or show what was expected."""


class LocalSparkConnectError(DevtoolsError):
    """The local Spark Connect server could not be started, stopped or found."""


class LocalSparkClusterError(DevtoolsError):
    """The local Spark standalone cluster (a master and its workers) could not be started, stopped or found."""
