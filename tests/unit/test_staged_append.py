"""Staged appends: which tables may take one, and the Delta statistics read from a Parquet footer."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake

from dynamic_kafka.sink.staged_append import can_stage, file_stats, keep_checkpoint_cadence

if TYPE_CHECKING:
    from pathlib import Path


def _spark_field(name: str, data_type: Any) -> dict[str, Any]:
    return {"name": name, "type": data_type, "nullable": True, "metadata": {}}


def _spark_schema(*fields: dict[str, Any]) -> dict[str, Any]:
    """A schema as Spark's ``StructType.jsonValue()`` gives it."""
    return {"type": "struct", "fields": list(fields)}


_ROWS = _spark_schema(
    _spark_field("cluster", "string"),
    _spark_field("offset", "long"),
    _spark_field("tags", {"type": "array", "elementType": "string", "containsNull": True}),
)


def _table(path: Path, *, offset_nullable: bool = True) -> DeltaTable:
    schema = pa.schema(
        [
            pa.field("offset", pa.int64(), nullable=offset_nullable),
            pa.field("cluster", pa.string()),
            pa.field("tags", pa.list_(pa.string())),
        ]
    )
    write_deltalake(str(path), pa.table({"offset": [1], "cluster": ["east"], "tags": [["a"]]}, schema=schema))
    return DeltaTable(str(path))


def test_a_table_of_the_same_columns_in_another_order_takes_a_staged_append(tmp_path: Path) -> None:
    assert can_stage(_table(tmp_path), _ROWS)


def test_rows_with_a_new_column_or_another_type_go_through_delta_spark(tmp_path: Path) -> None:
    table = _table(tmp_path)
    assert not can_stage(table, _spark_schema(*_ROWS["fields"], _spark_field("extra", "string")))
    retyped = [_spark_field("offset", "integer") if f["name"] == "offset" else f for f in _ROWS["fields"]]
    assert not can_stage(table, _spark_schema(*retyped))
    assert not can_stage(table, _spark_schema(*_ROWS["fields"][:2]))


def test_a_not_null_column_or_a_check_constraint_keeps_delta_spark_enforcing_them(tmp_path: Path) -> None:
    assert not can_stage(_table(tmp_path / "not-null", offset_nullable=False), _ROWS)
    constrained = _table(tmp_path / "checked")
    constrained.alter.add_constraint({"positive": "offset > 0"})
    assert not can_stage(DeltaTable(str(tmp_path / "checked")), _ROWS)


def _footer(tmp_path: Path, table: pa.Table, row_group_size: int) -> Any:
    path = tmp_path / "part.parquet"
    pq.write_table(table, path, row_group_size=row_group_size)
    return pq.read_metadata(path)


def test_statistics_cover_the_coordinate_columns_over_every_row_group(tmp_path: Path) -> None:
    at = datetime(2026, 11, 25, 8, 0, 0, 123_456, tzinfo=UTC)
    table = pa.table(
        {
            "cluster": ["west", "east", None, "east"],
            "offset": pa.array([7, 3, 9, 5], pa.int64()),
            "timestamp": pa.array([at, at.replace(microsecond=1_000), at, at], pa.timestamp("us", tz="UTC")),
            "stream": pa.array([None, None, None, None], pa.string()),
            "value": [b"a", b"b", b"c", b"d"],
        }
    )
    stats = file_stats(_footer(tmp_path, table, row_group_size=2))
    assert stats["numRecords"] == 4
    assert stats["minValues"] == {"cluster": "east", "offset": 3, "timestamp": "2026-11-25T08:00:00.001Z"}
    # The maximum is rounded up to the millisecond: a bound below the real maximum would hide rows.
    assert stats["maxValues"] == {"cluster": "west", "offset": 9, "timestamp": "2026-11-25T08:00:00.124Z"}
    assert stats["nullCount"] == {"cluster": 1, "offset": 0, "timestamp": 0, "stream": 4}


def test_a_column_without_statistics_in_some_row_group_is_left_out(tmp_path: Path) -> None:
    path = tmp_path / "part.parquet"
    table = pa.table({"offset": pa.array([1, 2], pa.int64()), "partition": pa.array([0, 1], pa.int32())})
    pq.write_table(table, path, write_statistics=["partition"])
    stats = file_stats(pq.read_metadata(path))
    assert stats == {
        "numRecords": 2,
        "minValues": {"partition": 0},
        "maxValues": {"partition": 1},
        "nullCount": {"partition": 0},
    }


def _commits_with_cadence(path: Path, commits: int) -> list[int]:
    """Makes ``commits`` empty appends after version 0, each followed by the cadence; returns the checkpoints."""
    table = DeltaTable(str(path))
    for _ in range(commits):
        table.create_write_transaction([], mode="append", schema=table.schema())
        keep_checkpoint_cadence(table, "test")
    return sorted(int(p.name.split(".")[0]) for p in (path / "_delta_log").glob("*.checkpoint.parquet"))


def test_staged_commits_keep_delta_sparks_checkpoint_interval(tmp_path: Path) -> None:
    write_deltalake(str(tmp_path), pa.table({"offset": [1]}))
    assert _commits_with_cadence(tmp_path, 9) == []
    assert _commits_with_cadence(tmp_path, 12) == [10, 20]


def test_a_table_with_its_own_checkpoint_interval_keeps_it(tmp_path: Path) -> None:
    write_deltalake(str(tmp_path), pa.table({"offset": [1]}), configuration={"delta.checkpointInterval": "100"})
    assert _commits_with_cadence(tmp_path, 12) == []
