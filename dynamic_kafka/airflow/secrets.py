"""``${airflow:conn/NAME}`` and ``${airflow:var/NAME}`` references: secrets from Airflow's connections and variables.

They are registered with the library (:func:`dynamic_kafka.reference_kind`) only while a task of this integration
runs, so a reference is resolved inside the task where a Kafka, registry or Spark client is built, and nowhere
else: never when a DAG file is parsed, never in a rendered template, a log line or XCom (the config keeps the
reference; operators template no field).

Forms:

- ``${airflow:conn/NAME}``: the password of connection ``NAME``;
- ``${airflow:conn/NAME/FIELD}``: one field of it: ``login``, ``password``, ``host``, ``schema``, ``port`` or
  ``extra``;
- ``${airflow:var/NAME}``: variable ``NAME``.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING

from airflow.sdk import Connection, Variable
from airflow.sdk.exceptions import AirflowNotFoundException
from airflow.sdk.log import mask_secret

from dynamic_kafka import ConfigError, reference_kind

if TYPE_CHECKING:
    from collections.abc import Iterator

KIND = "airflow"
CONNECTION_FIELDS = ("login", "password", "host", "schema", "port", "extra")


def resolve_reference(name: str) -> str | None:
    """The secret a reference's name (``conn/NAME[/FIELD]`` or ``var/NAME``) points at; None when it does not exist.

    Raises:
        ConfigError: the name has neither form, or names a connection field that does not exist.
    """
    store, _, rest = name.partition("/")
    if store == "var" and rest:
        return _masked(Variable.get(rest, default=None))
    if store == "conn" and rest:
        conn_id, _, field = rest.partition("/")
        field = field or "password"
        if field not in CONNECTION_FIELDS:
            raise ConfigError(
                f"reference ${{airflow:{name}}} names connection field {field!r}, which does not exist.",
                hint=f"Write one of {', '.join(CONNECTION_FIELDS)} (or none: the password).",
            )
        try:
            connection = Connection.get(conn_id)
        except AirflowNotFoundException:
            return None
        return _masked(getattr(connection, field))
    raise ConfigError(
        f"reference ${{airflow:{name}}} is neither conn/NAME[/FIELD] nor var/NAME.",
        hint="Write ${airflow:conn/kafka_east}, ${airflow:conn/kafka_east/login} or ${airflow:var/NAME}.",
    )


def _masked(value: object) -> str | None:
    """The value as text, registered with Airflow's log masker first: whatever prints it in the task log (a
    foreign client's error, a debug line) shows ``***`` instead.
    """
    if value is None:
        return None
    text = str(value)
    mask_secret(text)
    return text


@contextmanager
def airflow_references() -> Iterator[None]:
    """Resolves ``${airflow:...}`` references inside the block (a task's execution)."""
    with reference_kind(KIND, resolve_reference):
        yield
