"""Counting the rows a run landed from the files its own commits added (``sink.completeness``): real Delta tables
written by delta-rs on local disk, the run's commit read from the log as the write finds it; no JVM."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
from deltalake import CommitProperties, Transaction, write_deltalake

from dynamic_kafka.model.plan import Split, TopicPartition
from dynamic_kafka.sink.commits import read_commit
from dynamic_kafka.sink.completeness import landed_counts, measure
from dynamic_kafka.storage import TableRef
from tests.support.builders import a_split

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path


def _rows(run_seq: int | None, coordinates: Sequence[tuple[str, int, int]]) -> pa.Table:
    return pa.table(
        {
            "cluster": pa.array([c for c, _, _ in coordinates], pa.string()),
            "topic": pa.array(["orders"] * len(coordinates), pa.string()),
            "partition": pa.array([p for _, p, _ in coordinates], pa.int32()),
            "offset": pa.array([o for _, _, o in coordinates], pa.int64()),
            "value": pa.array(["x"] * len(coordinates), pa.string()),
            "_run_seq": pa.array([run_seq] * len(coordinates), pa.int64()),
        }
    )


def _land(path: Path, rows: pa.Table, run_seq: int, partition_by: Sequence[str] | None = None) -> int:
    """Appends ``rows`` as the commit of run ``run_seq``; returns its version."""
    write_deltalake(
        str(path),
        rows,
        mode="append",
        partition_by=list(partition_by) if partition_by else None,
        commit_properties=CommitProperties(app_transactions=[Transaction(app_id="orders", version=run_seq)]),
    )
    from deltalake import DeltaTable

    return DeltaTable(str(path)).version()


def _split(cluster: str, partition: int, start: int, stop: int) -> Split:
    return a_split(partition, start, stop, cluster=cluster, bootstrap="127.0.0.1:9092")


def _key(cluster: str, partition: int) -> TopicPartition:
    return TopicPartition(cluster_id=cluster, topic="orders", partition=partition)


def test_the_landed_count_reads_only_the_files_of_the_runs_commits_not_the_log_nor_earlier_runs(
    tmp_path: Path,
) -> None:
    sink, dead = TableRef.of(tmp_path / "sink"), TableRef.of(tmp_path / "sink_dead_letter")
    for run_seq in (1, 2):
        _land(tmp_path / "sink", _rows(run_seq, [("east", 0, run_seq * 10 + i) for i in range(3)]), run_seq)
    version = _land(tmp_path / "sink", _rows(3, [("east", 0, 30), ("east", 0, 31), ("east", 1, 5)]), 3)
    dead_version = _land(tmp_path / "sink_dead_letter", _rows(3, [("east", 1, 6)]), 3)
    files = [read_commit(sink, version), read_commit(dead, dead_version)]
    landed_files = [c.files_in(t) for c, t in zip(files, (sink, dead), strict=True) if c is not None]
    # What the count must not need: the log before the run's commit, and the files of earlier runs.
    (tmp_path / "sink" / "_delta_log" / f"{0:020d}.json").unlink()
    for earlier in (read_commit(sink, 1),):
        assert earlier is not None
        for path in earlier.added_paths:
            (tmp_path / "sink" / path).unlink()

    splits = [_split("east", 0, 30, 33), _split("east", 1, 5, 7)]
    landed, before = landed_counts([sink, dead], 3, splits, (), landed_files)

    assert landed == {_key("east", 0): 2, _key("east", 1): 2}
    assert before == {}
    counted = measure([sink, dead], 3, splits, {("east", "orders", 0): 2, ("east", "orders", 1): 2}, (), landed_files)
    assert counted.matches
    assert (counted.planned, counted.read, counted.landed, counted.skipped) == (5, 4, 4, 1)


def test_a_partitioned_sinks_coordinates_come_from_the_commits_partition_values(tmp_path: Path) -> None:
    sink = TableRef.of(tmp_path / "sink")
    by = ["cluster", "partition"]
    _land(tmp_path / "sink", _rows(1, [("east", 0, 0), ("west", 0, 0)]), 1, by)
    version = _land(
        tmp_path / "sink", _rows(2, [("east", 0, 1), ("east", 0, 2), ("west", 0, 1), ("west", 1, 0)]), 2, by
    )
    commit = read_commit(sink, version)
    assert commit is not None
    assert all("=" in path for path in commit.added_paths)  # the coordinates are not in the files

    splits = [_split("east", 0, 1, 2), _split("west", 0, 0, 2), _split("west", 1, 0, 1)]
    landed, _ = landed_counts([sink], 2, splits, (), [commit.files_in(sink)])

    # East's offset 2 lies outside its range; west 0's offset 0 belongs to run 1.
    assert landed == {_key("east", 0): 1, _key("west", 0): 1, _key("west", 1): 1}


def test_inside_a_backfilled_range_the_rows_of_others_are_still_counted_from_the_whole_table(tmp_path: Path) -> None:
    sink = TableRef.of(tmp_path / "sink")
    _land(tmp_path / "sink", _rows(None, [("east", 0, 0), ("east", 0, 1), ("east", 0, 7)]), 1)  # a backfill
    version = _land(tmp_path / "sink", _rows(4, [("east", 0, 2), ("east", 0, 3)]), 4)
    commit = read_commit(sink, version)
    assert commit is not None

    splits = [_split("east", 0, 0, 4)]
    landed, before = landed_counts([sink], 4, splits, [_split("east", 0, 0, 2)], [commit.files_in(sink)])

    assert (landed, before) == ({_key("east", 0): 2}, {_key("east", 0): 2})


_PEAK_OF_A_COUNT = """
import json, sys
from pathlib import Path
import pyarrow as pa
from dynamic_kafka.model.plan import Split
from dynamic_kafka.sink.commits import read_commit
from dynamic_kafka.sink.completeness import landed_counts
from dynamic_kafka.storage import TableRef

sink = TableRef.of(Path(sys.argv[1]))
commit = read_commit(sink, int(sys.argv[2]))
split = Split(cluster_id="east", topic="orders", partition=0, start_offset=0, stop_offset=int(sys.argv[3]),
              stream_ids=("orders",), bootstrap_servers="127.0.0.1:9092")
landed, _ = landed_counts([sink], 1, [split], (), [commit.files_in(sink)])
print(json.dumps({"counted": sum(landed.values()), "peak_mb": pa.default_memory_pool().max_memory() / 2**20}))
"""


def test_counting_a_big_runs_rows_holds_a_few_batches_in_memory_not_the_run(tmp_path: Path) -> None:
    # Read whole, the coordinates of a 10M-record run took its client from 343 MB (1M records) to 979 MB (issue 42).
    # One row group: a Spark task's file holds row groups of up to 128 MB (~600,000 records of 200 B, and more of
    # smaller ones).
    import json
    import subprocess
    import sys

    import pyarrow.compute as pc
    from deltalake import WriterProperties

    records = 4_000_000
    offsets = pa.array(range(records), pa.int64())
    zeros = pc.multiply(offsets, 0)
    rows = pa.table(
        {
            "cluster": pa.array(["east"]).take(zeros),
            "topic": pa.array(["orders"]).take(zeros),
            "partition": pc.cast(zeros, pa.int32()),
            "offset": offsets,
            "_run_seq": pc.add(zeros, 1),
        }
    )
    write_deltalake(
        str(tmp_path / "sink"),
        rows,
        commit_properties=CommitProperties(app_transactions=[Transaction(app_id="orders", version=1)]),
        writer_properties=WriterProperties(max_row_group_size=records),
    )
    counting = [sys.executable, "-c", _PEAK_OF_A_COUNT, str(tmp_path / "sink"), "0", str(records)]

    done = subprocess.run(counting, capture_output=True, text=True, check=False)

    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["counted"] == records
    # The coordinates of the 4M rows take ~150 MB decoded (measured: 163 MB read whole), of a batch ~2.5 MB
    # (measured: 10 MB in all).
    assert found["peak_mb"] < 32, found
