"""Resolving metadata for a run: the pipeline's subscription, once, with bounded retries."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, TypeVar

from dynamic_kafka.errors import MetadataServiceError
from dynamic_kafka.metadata.models import metadata_fingerprint
from dynamic_kafka.metadata.snapshot import MetadataSnapshot
from dynamic_kafka.metadata.subscriber import subscriber_for

if TYPE_CHECKING:
    from collections.abc import Callable

    from dynamic_kafka.config import PipelineConfig, RetryConfig
    from dynamic_kafka.metadata.service import KafkaMetadataService

log = logging.getLogger(__name__)
T = TypeVar("T")


def with_retries(call: Callable[[], T], retries: RetryConfig, what: str) -> T:
    """Calls ``call``, retrying retriable MetadataServiceErrors with exponential backoff, then re-raises."""
    for attempt in range(1, retries.attempts + 1):
        try:
            return call()
        except MetadataServiceError as e:
            if attempt == retries.attempts:
                raise MetadataServiceError(
                    f"{what} failed {retries.attempts} time(s); last error: {e}",
                    hint="Nothing was written. Check the metadata service and run again.",
                ) from e
            delay = retries.backoff_seconds * 2 ** (attempt - 1)
            log.warning(
                "%s failed (attempt %d of %d), retrying in %.1fs: %s", what, attempt, retries.attempts, delay, e
            )
            time.sleep(delay)
    raise AssertionError("unreachable: the loop returns or raises")


def resolve_metadata(
    service: KafkaMetadataService, pipeline: PipelineConfig, *, source: str | None = None
) -> MetadataSnapshot:
    """Resolves the pipeline's subscription once, with the pipeline's retry policy."""
    subscriber = subscriber_for(pipeline, source=source)
    streams = with_retries(lambda: subscriber.subscribe(service), pipeline.metadata_retries, "resolving metadata")
    return MetadataSnapshot(streams=streams, fingerprint=metadata_fingerprint(streams.values()))
