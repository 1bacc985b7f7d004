"""Resolving metadata for a run: the pipeline's subscription, once, with bounded retries."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from dynamic_kafka.errors import MetadataServiceError
from dynamic_kafka.metadata.models import ClusterMetadata, KafkaStream, metadata_fingerprint
from dynamic_kafka.metadata.service import KafkaMetadataService
from dynamic_kafka.metadata.snapshot import MetadataSnapshot
from dynamic_kafka.metadata.subscriber import subscriber_for

if TYPE_CHECKING:
    from collections.abc import Callable, Collection

    from dynamic_kafka.config.models import PipelineConfig, RetryConfig

logger = logging.getLogger(__name__)
T = TypeVar("T")


def with_deadline(call: Callable[[], T], timeout_s: float, what: str) -> T:
    """``call()``, or a retriable MetadataServiceError once ``timeout_s`` passed without an answer.

    The call runs in a daemon thread: Python cannot interrupt a thread blocked in a socket read, so a hung call is
    abandoned (it ends with the process), never waited for.
    """
    outcome: list[T] = []
    failure: list[BaseException] = []

    def target() -> None:
        try:
            outcome.append(call())
        except BaseException as e:  # handed to the caller's thread below
            failure.append(e)

    thread = threading.Thread(target=target, name=f"dynamic-kafka-metadata-call: {what}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise MetadataServiceError(
            f"{what}: the metadata service did not answer within {timeout_s:g}s.",
            hint="Check the service; the deadline is the pipeline's metadata_retries.timeout_seconds.",
        )
    if failure:
        raise failure[0]
    return outcome[0]


def with_retries(call: Callable[[], T], retries: RetryConfig, what: str) -> T:
    """Calls ``call`` with a deadline per attempt, retrying retriable MetadataServiceErrors (a call past its
    deadline is one) with exponential backoff, then re-raises.
    """
    for attempt in range(1, retries.attempts + 1):
        try:
            return with_deadline(call, retries.timeout_seconds, what)
        except MetadataServiceError as e:
            if not e.retriable:
                raise
            if attempt == retries.attempts:
                raise MetadataServiceError(
                    f"{what} failed {retries.attempts} time(s); last error: {e}",
                    hint="Nothing was written. Check the metadata service and run again.",
                ) from e
            delay = retries.backoff_seconds * 2 ** (attempt - 1)
            logger.warning(
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


class BoundedMetadataService(KafkaMetadataService):
    """Another service whose every call has a deadline (:func:`with_deadline`): a call past it raises a retriable
    MetadataServiceError instead of holding the run (and its lock) forever.

    Args:
        inner: the service to call.
        timeout_s: the deadline of each call, in seconds.
    """

    def __init__(self, inner: KafkaMetadataService, timeout_s: float) -> None:
        self.inner = inner
        self.timeout_s = timeout_s

    def get_all_streams(self) -> set[KafkaStream]:
        """Return the inner service's streams, or fail when it does not answer in time."""
        return with_deadline(self.inner.get_all_streams, self.timeout_s, "listing streams")

    def describe_streams(self, stream_ids: Collection[str]) -> dict[str, KafkaStream]:
        """Return the inner service's named streams, or fail when it does not answer in time."""
        return with_deadline(lambda: self.inner.describe_streams(stream_ids), self.timeout_s, "describing streams")

    def is_cluster_active(self, cluster_id: str) -> bool:
        """Ask the inner service whether the cluster is active, or fail when it does not answer in time."""
        return with_deadline(
            lambda: self.inner.is_cluster_active(cluster_id), self.timeout_s, f"asking whether {cluster_id} is active"
        )

    def describe_cluster(self, cluster_id: str) -> ClusterMetadata | None:
        """Return the inner service's cluster, or fail when it does not answer in time."""
        return with_deadline(
            lambda: self.inner.describe_cluster(cluster_id), self.timeout_s, f"describing cluster {cluster_id}"
        )

    def close(self) -> None:
        """Close the inner service."""
        self.inner.close()
