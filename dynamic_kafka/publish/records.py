"""How a row of the published table becomes a record: key, value, timestamp and the headers naming its origin."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from dynamic_kafka.errors import PublicationError
from dynamic_kafka.publish.config import ColumnEncoding, JsonEncoding, RegistryEncoding
from dynamic_kafka.publish.protocol import OutgoingRecord

if TYPE_CHECKING:
    from collections.abc import Sequence

    from dynamic_kafka.publish.config import Encoding, PublicationConfig

TABLE_HEADER = "dynamic-kafka.table"
VERSION_HEADER = "dynamic-kafka.version"
CHANGE_HEADER = "dynamic-kafka.change"

RowEncoder = Callable[[Mapping[str, Any]], bytes | None]
"""A row's key or value bytes (None: a null key or value)."""


@dataclass(frozen=True)
class Encoders:
    """How a row becomes the record's key (None: no key) and value bytes."""

    key: RowEncoder | None
    value: RowEncoder


def plain_encoders(config: PublicationConfig) -> Encoders:
    """The encoders of a publication without registry formats (JSON, or a column as it is).

    Raises:
        TypeError: the publication uses a registry format (its encoders come from
            :func:`~dynamic_kafka.publish.encoders.publication_encoders`).
    """
    return Encoders(key=None if config.key is None else plain_encoder(config.key), value=plain_encoder(config.value))


def plain_encoder(encoding: Encoding) -> RowEncoder:
    """``encoding``'s encoder of a row (JSON, or a column as it is).

    Raises:
        TypeError: a registry format (its encoder needs the write cluster's registry).
    """
    if isinstance(encoding, RegistryEncoding):
        raise TypeError(f"format {encoding.format} needs the write cluster's registry: use publication_encoders")
    return lambda row: encode(encoding, row)


def json_value(value: object) -> object:
    """``json.dumps``'s ``default``: timestamps and dates as ISO-8601 text, decimals as text, bytes as base64."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)  # as text: a JSON number would lose the scale
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def encode(encoding: JsonEncoding | ColumnEncoding, row: Mapping[str, Any]) -> bytes | None:
    """The bytes of ``row`` under ``encoding`` (None for a null column)."""
    if isinstance(encoding, JsonEncoding):
        names = encoding.columns if encoding.columns is not None else tuple(row)
        document = {name: row[name] for name in names}
        return json.dumps(document, default=json_value, separators=(",", ":"), ensure_ascii=False).encode()
    value = row[encoding.column]
    if value is None:
        return None
    if encoding.format == "string":
        return str(value).encode()
    if not isinstance(value, bytes):
        raise TypeError(f"column {encoding.column!r} holds {type(value).__name__}, not bytes; use format: string")
    return value


def timestamp_ms(value: object) -> int | None:
    """A timestamp column's value as epoch milliseconds (naive timestamps are UTC, as Delta stores them)."""
    if value is None:
        return None
    if isinstance(value, datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        return int(aware.timestamp() * 1000)
    if isinstance(value, int):
        return value
    raise TypeError(
        f"a timestamp column must hold timestamps or integer epoch milliseconds, not {type(value).__name__}"
    )


def referenced_columns(config: PublicationConfig) -> set[str]:
    """Every column the config names."""
    names = {config.timestamp_column} if config.timestamp_column else set()
    for encoding in (config.key, config.value):
        if isinstance(encoding, ColumnEncoding):
            names.add(encoding.column)
        elif isinstance(encoding, JsonEncoding) and encoding.columns is not None:
            names.update(encoding.columns)
    return names


def to_records(
    config: PublicationConfig,
    rows: Sequence[Mapping[str, Any]],
    version: int,
    encoders: Encoders,
    *,
    changes: Sequence[str] | None = None,
) -> list[OutgoingRecord]:
    """The records of ``rows``, added by table ``version``, their key and value made by ``encoders``; with
    ``changes`` (a Change Data Feed's change type per row), each in the header ``dynamic-kafka.change``.

    Raises:
        PublicationError: a column the config names is missing, or holds values its encoding cannot take.
    """
    origin = ((TABLE_HEADER, config.table.uri.encode()), (VERSION_HEADER, str(version).encode()))
    if rows:
        missing = sorted(referenced_columns(config) - set(rows[0]))
        if missing:
            raise _error(config, version, f"column(s) {', '.join(missing)} are not in the table ({', '.join(rows[0])})")
    records = []
    for index, row in enumerate(rows):
        try:
            key = encoders.key(row) if encoders.key is not None else None
            value = encoders.value(row)
            stamp = timestamp_ms(row[config.timestamp_column]) if config.timestamp_column else None
        except (TypeError, ValueError) as e:
            raise _error(config, version, str(e)) from e
        headers = origin if changes is None else (*origin, (CHANGE_HEADER, changes[index].encode()))
        records.append(OutgoingRecord(key, value, stamp, headers))
    return records


def _error(config: PublicationConfig, version: int, detail: str) -> PublicationError:
    return PublicationError(
        f"version {version}: {detail}; nothing of it was sent.",
        publication_id=config.id,
        table=config.table.uri,
        stream_id=config.stream,
        version=version,
        hint="Fix the publication's key, value or timestamp_column to name the table's columns.",
    )
