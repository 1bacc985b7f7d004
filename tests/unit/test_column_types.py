"""The sink's column schema as Dagster's asset page shows it: Spark SQL type names read from a real Delta log
(written by delta-rs), not Arrow's ``arro3.core.DataType<Utf8>``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
from deltalake import write_deltalake

from dynamic_kafka.dagster.metadata import table_metadata
from dynamic_kafka.sink.tables import table_info

if TYPE_CHECKING:
    from pathlib import Path


def test_columns_read_as_a_data_engineer_writes_types(tmp_path: Path) -> None:
    order = pa.struct([("order", pa.int32()), ("placed_on", pa.string())])
    table = pa.table(
        {
            "topic": pa.array(["orders"]),
            "offset": pa.array([7], pa.int64()),
            "partition": pa.array([0], pa.int32()),
            "value": pa.array([{"order": 1, "placed_on": "2026-01-01"}], order),
            "tags": pa.array([["a"]], pa.list_(pa.string())),
            "headers": pa.array([[("k", b"v")]], pa.map_(pa.string(), pa.binary())),
            "amount": pa.array([1], pa.decimal128(10, 2)),
            "timestamp": pa.array([0], pa.timestamp("us", tz="UTC")),
        }
    )
    write_deltalake(str(tmp_path / "sink"), table)

    info = table_info(str(tmp_path / "sink"))

    assert info is not None
    assert dict(info.columns) == {
        "topic": "string",
        "offset": "bigint",
        "partition": "int",
        "value": "struct<order: int, placed_on: string>",
        "tags": "array<string>",
        "headers": "map<string, binary>",
        "amount": "decimal(10,2)",
        "timestamp": "timestamp",
    }
    schema = table_metadata("file:///sink", info)["dagster/column_schema"].value
    assert [(c.name, c.type) for c in schema.columns][:2] == [("topic", "string"), ("offset", "bigint")]
