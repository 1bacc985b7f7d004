"""How a row of the published table becomes a record: key, value, timestamp and the headers naming its origin."""

from __future__ import annotations

import base64
import json
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from dynamic_kafka.errors import PublicationError
from dynamic_kafka.publish.config import ColumnEncoding, JsonEncoding
from dynamic_kafka.publish.protocol import OutgoingRecord

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from dynamic_kafka.publish.config import Encoding, PublicationConfig

TABLE_HEADER = "dynamic-kafka.table"
VERSION_HEADER = "dynamic-kafka.version"


def _json_value(value: object) -> object:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)  # as text: a JSON number would lose the scale
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def encode(encoding: Encoding, row: Mapping[str, Any]) -> bytes | None:
    """The bytes of ``row`` under ``encoding`` (None for a null column)."""
    if isinstance(encoding, JsonEncoding):
        names = encoding.columns if encoding.columns is not None else tuple(row)
        document = {name: row[name] for name in names}
        return json.dumps(document, default=_json_value, separators=(",", ":"), ensure_ascii=False).encode()
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


def to_records(config: PublicationConfig, rows: Sequence[Mapping[str, Any]], version: int) -> list[OutgoingRecord]:
    """The records of ``rows``, added by table ``version``.

    Raises:
        PublicationError: a column the config names is missing, or holds values its encoding cannot take.
    """
    origin = ((TABLE_HEADER, config.table.uri.encode()), (VERSION_HEADER, str(version).encode()))
    if rows:
        missing = sorted(referenced_columns(config) - set(rows[0]))
        if missing:
            raise _error(config, version, f"column(s) {', '.join(missing)} are not in the table ({', '.join(rows[0])})")
    records = []
    for row in rows:
        try:
            key = encode(config.key, row) if config.key is not None else None
            value = encode(config.value, row)
            stamp = timestamp_ms(row[config.timestamp_column]) if config.timestamp_column else None
        except TypeError as e:
            raise _error(config, version, str(e)) from e
        records.append(OutgoingRecord(key, value, stamp, origin))
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
