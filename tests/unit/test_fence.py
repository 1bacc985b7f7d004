"""Fences of abandoned runs on real Delta tables (delta-rs, no JVM): what they commit, how they are told from
landed data, and how they race other writers of the run."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError

from dynamic_kafka.faults import acting_at
from dynamic_kafka.sink.fence import FENCE_KEY, fence_run, is_fence
from dynamic_kafka.spark.schema import DEAD_LETTER_COLUMNS, STATS_COLUMNS
from tests.support.foreign_writer import replace_last_commit

if TYPE_CHECKING:
    from pathlib import Path

RUN_2 = Transaction("p", 2)
_ROWS = pa.schema([("cluster", pa.string()), ("offset", pa.int64()), ("_run_seq", pa.int64())])


def _append(path: Path, run_seq: int) -> None:
    """A run's data append with its transaction ``("p", run_seq)``."""
    rows = pa.table({"cluster": ["east"], "offset": [run_seq], "_run_seq": [run_seq]}, schema=_ROWS)
    write_deltalake(
        str(path), rows, mode="append", commit_properties=CommitProperties(app_transactions=[Transaction("p", run_seq)])
    )


def test_a_fence_commits_the_run_transaction_without_data_and_reads_back_as_a_fence(tmp_path: Path) -> None:
    _append(tmp_path / "sink", 1)

    assert fence_run(tmp_path / "sink", "sink", "p", 2, "cluster gone") == "fenced"

    table = DeltaTable(str(tmp_path / "sink"))
    assert table.transaction_version("p") == 2
    assert table.to_pyarrow_table().num_rows == 1
    assert json.loads(table.history(1)[0][FENCE_KEY]) == {"run_seq": 2, "abandoned": "cluster gone"}
    assert is_fence(tmp_path / "sink", "p", 2)
    assert fence_run(tmp_path / "sink", "sink", "p", 2, "again") == "fenced"  # idempotent: nothing committed
    assert DeltaTable(str(tmp_path / "sink")).version() == table.version()
    _append(tmp_path / "sink", 3)  # the next run's data is data again
    assert not is_fence(tmp_path / "sink", "p", 3)


def test_a_table_holding_the_run_is_not_fenced(tmp_path: Path) -> None:
    _append(tmp_path / "dead_letters", 2)

    assert fence_run(tmp_path / "dead_letters", "dead_letter", "p", 2, "x") == "landed"

    assert not is_fence(tmp_path / "dead_letters", "p", 2)
    assert DeltaTable(str(tmp_path / "dead_letters")).version() == 0


def test_a_missing_table_is_created_by_its_fence_with_the_columns_every_row_has(tmp_path: Path) -> None:
    assert not is_fence(tmp_path / "none", "p", 1)

    assert fence_run(tmp_path / "dl", "dead_letter", "p", 1, "x") == "fenced"
    assert fence_run(tmp_path / "sink", "sink", "p", 1, "x") == "fenced"

    dead_letters, sink = DeltaTable(str(tmp_path / "dl")), DeltaTable(str(tmp_path / "sink"))
    assert [f.name for f in dead_letters.schema().fields] == list(DEAD_LETTER_COLUMNS)
    assert {"key", "value"}.isdisjoint(f.name for f in sink.schema().fields)  # typed by the formats, added later
    assert set(STATS_COLUMNS.split(",")) <= {f.name for f in sink.schema().fields}
    for table in (dead_letters, sink):
        assert table.metadata().configuration == {"delta.dataSkippingStatsColumns": STATS_COLUMNS}
        assert (table.version(), table.transaction_version("p")) == (0, 1)
    assert is_fence(tmp_path / "sink", "p", 1)


def test_a_writer_of_the_run_that_read_the_table_before_its_fence_loses_and_one_that_won_is_not_fenced(
    tmp_path: Path,
) -> None:
    """Delta's conflict check on the run's app id decides the race either way, never both."""
    _append(tmp_path / "sink", 1)
    late = DeltaTable(str(tmp_path / "sink"))  # a writer of run 2 that read the log before the fence
    assert fence_run(tmp_path / "sink", "sink", "p", 2, "x") == "fenced"
    with pytest.raises(CommitFailedError, match="Concurrent transaction"):
        late.create_write_transaction(
            [], mode="append", schema=late.schema(), commit_properties=CommitProperties(app_transactions=[RUN_2])
        )
    assert DeltaTable(str(tmp_path / "sink")).to_pyarrow_table().num_rows == 1

    _append(tmp_path / "other", 1)
    _append(tmp_path / "other", 2)  # the run's writer won the race: the fence finds its data
    assert fence_run(tmp_path / "other", "sink", "p", 2, "x") == "landed"
    assert not is_fence(tmp_path / "other", "p", 2)


def test_a_fence_whose_log_entry_another_writer_replaced_is_committed_again(tmp_path: Path) -> None:
    """delta-spark's log stores check, then write: a foreign commit at the fence's version can replace its entry
    after delta-rs reported the fence committed (docs/decisions/0015-trust-only-own-commit.md).
    """
    sink = tmp_path / "sink"
    _append(sink, 1)
    replaced: list[str] = []

    def replace_once() -> None:
        if not replaced:
            replaced.append(replace_last_commit(sink))

    with acting_at("fence_committed", replace_once):
        assert fence_run(sink, "sink", "p", 2, "cluster gone") == "fenced"

    assert replaced == ["SET TBLPROPERTIES"]  # one file: nothing to compact
    assert is_fence(sink, "p", 2)
    assert DeltaTable(str(sink)).to_pyarrow_table().num_rows == 1


def test_a_fence_replaced_by_the_runs_own_data_reads_as_landed(tmp_path: Path) -> None:
    """The entry that replaced the fence holds the run's data (a late writer of it): the table holds the run."""
    sink = tmp_path / "sink"
    _append(sink, 1)
    replaced: list[int] = []

    def land_the_run_over_the_fence() -> None:
        if replaced:
            return
        fence_version = DeltaTable(str(sink)).version()
        _append(sink, 2)  # written on top, then moved over the fence's entry, as the losing rename would
        log = sink / "_delta_log"
        os.replace(log / f"{fence_version + 1:020d}.json", log / f"{fence_version:020d}.json")
        replaced.append(fence_version)

    with acting_at("fence_committed", land_the_run_over_the_fence):
        assert fence_run(sink, "sink", "p", 2, "cluster gone") == "landed"

    assert not is_fence(sink, "p", 2)
    assert DeltaTable(str(sink)).to_pyarrow_table().num_rows == 2
