"""The one place where library errors become Airflow outcomes.

- A retriable :class:`~dynamic_kafka.DynamicKafkaError` (metadata service down, cluster unreachable, another run in
  progress, a Spark job that failed before the commit) becomes :class:`~airflow.sdk.exceptions.AirflowException`,
  which the task's ``retries`` retry: the library guarantees such a run wrote nothing or is finished by the next
  attempt's recovery.
- Any other one (bad config, data loss, recreated topic, bad credentials) becomes
  :class:`~airflow.sdk.exceptions.AirflowFailException`: the task fails at once, without its retries, since retrying
  cannot help; the message says what to do.

An ``OSError`` no module wrapped (a folder that cannot be made) is taken as :class:`~dynamic_kafka.errors.HostError`
first, as the CLI and the Dagster layer do: retried only for a reset or timed-out connection.

Library messages never hold secrets, so they are safe in Airflow's task log.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from dynamic_kafka import as_library_error

if TYPE_CHECKING:
    from collections.abc import Iterator

    from dynamic_kafka import DynamicKafkaError


def describe(error: DynamicKafkaError, pipeline_id: str) -> str:
    """The error as one text for the task log: pipeline, message, hint and every attribute it carries."""
    parts = [f"pipeline {pipeline_id!r}: {type(error).__name__}: {error}"]
    if error.hint and error.hint not in str(error):
        parts.append(f"hint: {error.hint}")
    parts += [f"{name}: {value}" for name, value in error.attributes().items()]
    return "\n".join(parts)


def to_airflow(error: DynamicKafkaError, pipeline_id: str) -> AirflowException:
    """The Airflow exception to raise for a library error: retried by the task's retries only when retriable."""
    kind = AirflowException if error.retriable else AirflowFailException
    return kind(describe(error, pipeline_id))


@contextmanager
def airflow_errors(pipeline_id: str) -> Iterator[None]:
    """Runs a block, raising library errors as their Airflow outcome (the original stays the ``__cause__``).

    Example:
        >>> with airflow_errors("orders"):  # doctest: +SKIP
        ...     pipeline.run()
    """
    try:
        yield
    except Exception as e:
        error = as_library_error(e)
        if error is None:
            raise
        raise to_airflow(error, pipeline_id) from e
