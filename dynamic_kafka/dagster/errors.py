"""The one place where library errors become Dagster outcomes.

- A retriable :class:`~dynamic_kafka.errors.DynamicKafkaError` (metadata service down, cluster unreachable, another
  run in progress, a Spark job that failed before the commit) becomes :class:`dagster.RetryRequested`, bounded by
  ``MAX_RETRIES``: the library guarantees such a run wrote nothing or is finished by the next attempt's recovery.
  Where the user set a :class:`dagster.RetryPolicy` on the step, it becomes a :class:`dagster.Failure` that allows
  retries instead, so the policy (its count, delay, backoff and jitter) decides.
- Any other one (bad config, data loss, recreated topic, bad credentials) becomes :class:`dagster.Failure` with the
  error's message as description and every attribute it carries (cluster, topic, offsets, file, ...) as
  metadata. Retrying cannot help; the message says what to do.

An ``OSError`` no module wrapped (a folder that cannot be made) is taken as :class:`~dynamic_kafka.errors.HostError`
first: retried only for a reset or timed-out connection.

Library messages never hold secrets, so they are safe to show in Dagster.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING

from dagster import Failure, MetadataValue, RetryPolicy, RetryRequested
from pydantic import BaseModel

from dynamic_kafka import as_library_error

if TYPE_CHECKING:
    from collections.abc import Iterator

    from dynamic_kafka import DynamicKafkaError

MAX_RETRIES = 3
RETRY_WAIT_SECONDS = 15.0


def failure_metadata(error: DynamicKafkaError, pipeline_id: str | None) -> dict[str, MetadataValue]:
    """What a person needs to act on the error, as Dagster metadata: its type, whether retrying helps, its hint,
    and every attribute it carries (:meth:`~dynamic_kafka.errors.DynamicKafkaError.attributes`), by name.
    """
    metadata: dict[str, MetadataValue] = {} if pipeline_id is None else {"pipeline_id": MetadataValue.text(pipeline_id)}
    metadata["error"] = MetadataValue.text(type(error).__name__)
    metadata["retriable"] = MetadataValue.bool(error.retriable)
    if error.hint:
        metadata["hint"] = MetadataValue.text(error.hint)
    for name, value in error.attributes().items():
        metadata.setdefault(name, _metadata_value(value))
    return metadata


def _metadata_value(value: object) -> MetadataValue:
    """Models (and lists of them, e.g. lost ranges) as JSON, flags as booleans, lists as text, the rest as text."""
    if isinstance(value, BaseModel):
        return MetadataValue.json(value.model_dump(mode="json"))
    if isinstance(value, list | tuple):
        if all(isinstance(item, BaseModel) for item in value):
            return MetadataValue.json([item.model_dump(mode="json") for item in value])
        return MetadataValue.text(", ".join(str(item) for item in value))
    if isinstance(value, bool):
        return MetadataValue.bool(value)
    return MetadataValue.text(str(value))


def to_dagster(
    error: DynamicKafkaError, pipeline_id: str | None, retry_policy: RetryPolicy | None = None
) -> RetryRequested | Failure:
    """The Dagster exception to raise for a library error, in a step with the given retry policy (if any);
    ``pipeline_id`` None for a step that runs no pipeline (a publication, whose errors name it).
    """
    if error.retriable and retry_policy is None:
        return RetryRequested(max_retries=MAX_RETRIES, seconds_to_wait=RETRY_WAIT_SECONDS)
    return Failure(
        description=str(error) if pipeline_id is None else f"pipeline {pipeline_id!r}: {error}",
        metadata=failure_metadata(error, pipeline_id),
        allow_retries=error.retriable,
    )


@contextmanager
def dagster_errors(pipeline_id: str | None, retry_policy: RetryPolicy | None = None) -> Iterator[None]:
    """Runs a block, raising library errors as their Dagster outcome (the original stays the ``__cause__``); a
    step with a user's retry policy passes it, so retriable errors are left to the policy.

    Example:
        >>> with dagster_errors("orders"):  # doctest: +SKIP
        ...     pipeline.run()
    """
    try:
        yield
    except Exception as e:
        error = as_library_error(e)
        if error is None:
            raise
        raise to_dagster(error, pipeline_id, retry_policy) from e
