"""The one place where library errors become Dagster outcomes.

- A retriable :class:`~dynamic_kafka.errors.DynamicKafkaError` (metadata service down, cluster unreachable, another
  run in progress, a Spark job that failed before the commit) becomes :class:`dagster.RetryRequested`, bounded by
  ``MAX_RETRIES``: the library guarantees such a run wrote nothing or is finished by the next attempt's recovery.
- Any other one (bad config, data loss, recreated topic, bad credentials) becomes :class:`dagster.Failure` with the
  error's message as description and its attributes (cluster, topic, offsets, file) as metadata. Retrying cannot
  help; the message says what to do.

Library messages never hold secrets, so they are safe to show in Dagster.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING

from dagster import Failure, MetadataValue, RetryRequested
from dynamic_kafka import DataLossError, DynamicKafkaError

if TYPE_CHECKING:
    from collections.abc import Iterator

MAX_RETRIES = 3
RETRY_WAIT_SECONDS = 15.0

# Attributes some library errors carry; shown as Failure metadata when present.
_ATTRIBUTES = ("cluster_id", "topic", "partition", "source", "run_seq", "kafka_error", "stream_ids")


def failure_metadata(error: DynamicKafkaError, pipeline_id: str) -> dict[str, MetadataValue]:
    """What a person needs to act on the error, as Dagster metadata."""
    metadata: dict[str, MetadataValue] = {
        "pipeline_id": MetadataValue.text(pipeline_id),
        "error": MetadataValue.text(type(error).__name__),
        "retriable": MetadataValue.bool(error.retriable),
    }
    if error.hint:
        metadata["hint"] = MetadataValue.text(error.hint)
    for name in _ATTRIBUTES:
        value = getattr(error, name, None)
        if value is not None:
            metadata[name] = MetadataValue.text(", ".join(value) if isinstance(value, list) else str(value))
    if isinstance(error, DataLossError):
        metadata["lost_ranges"] = MetadataValue.json([lost.model_dump() for lost in error.losses])
    return metadata


def to_dagster(error: DynamicKafkaError, pipeline_id: str) -> RetryRequested | Failure:
    """The Dagster exception to raise for a library error."""
    if error.retriable:
        return RetryRequested(max_retries=MAX_RETRIES, seconds_to_wait=RETRY_WAIT_SECONDS)
    return Failure(
        description=f"pipeline {pipeline_id!r}: {error}",
        metadata=failure_metadata(error, pipeline_id),
        allow_retries=False,
    )


@contextmanager
def dagster_errors(pipeline_id: str) -> Iterator[None]:
    """Runs a block, raising library errors as their Dagster outcome (the original stays the ``__cause__``).

    Example:
        >>> with dagster_errors("orders"):  # doctest: +SKIP
        ...     pipeline.run()
    """
    try:
        yield
    except DynamicKafkaError as e:
        raise to_dagster(e, pipeline_id) from e
