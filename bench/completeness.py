"""What counting a run's landed rows costs as the sink grows (issue 26 item 3): ``python -m bench.completeness``.

A run's completeness counts, per planned range, the rows the run landed. Two ways side by side, in one process,
on one sink on local disk:

- **whole table** (how it was counted before, kept here only to compare): delta-rs opens the sink (log replay
  from the last checkpoint), and a pyarrow dataset over every file of the current version filters on ``_run_seq``
  and the ranges; file statistics skip most files, but the log and the file list grow with every run;
- **added files** (the library's :func:`dynamic_kafka.sink.completeness.measure`): only the data files the run's
  own commit added, as the write found them in that commit's log entry, read with pyarrow.

The sink is built with delta-rs (no Kafka, no Spark): ``--prior-runs`` commits (default 200) of
``--prior-records`` rows each (default 1,000; the coordinate columns, a 9-byte key and a ~200-byte value, with
statistics on the coordinate columns only, as the sink dynamic-kafka creates), then the measured run: one commit of
``--records`` rows (default 10,000) over 8 partitions, in 8 files. Figures are taken after ``--at`` prior runs
(default 1, 50, 200): each the best of ``--repeats`` (default 5) wall times and bytes read (``rchar`` of
``/proc/self/io``), and both counts must be equal, else it exits 1. JVM-free; a few seconds.
"""

from __future__ import annotations

import argparse
import random
import shutil
import string
import sys
import time
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from bench.env import fresh_dir
from bench.state_growth import _best_of
from dynamic_kafka.model.plan import Split, TopicPartition
from dynamic_kafka.sink.commits import read_commit
from dynamic_kafka.sink.completeness import _within, measure
from dynamic_kafka.sink.tables import STATS_PROPERTY, stats_columns
from dynamic_kafka.storage import TableRef

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

APP_ID = "bench"
PARTITIONS = 8
_WORDS = ["".join(random.choices(string.ascii_lowercase, k=random.randint(3, 9))) for _ in range(500)]


def _rows(run_seq: int, first_offset: int, count: int) -> pa.Table:
    """``count`` records of run ``run_seq``, round-robin over the partitions, offsets from ``first_offset`` in each."""
    per = [(i % PARTITIONS, first_offset + i // PARTITIONS) for i in range(count)]
    return pa.table(
        {
            "key": pa.array([f"key{i:06d}".encode() for i in range(count)], pa.binary()),
            "value": pa.array([" ".join(random.choices(_WORDS, k=30)).encode() for _ in range(count)], pa.binary()),
            "topic": pa.array(["orders"] * count, pa.string()),
            "partition": pa.array([p for p, _ in per], pa.int32()),
            "offset": pa.array([o for _, o in per], pa.int64()),
            "cluster": pa.array(["east"] * count, pa.string()),
            "stream": pa.array(["orders"] * count, pa.string()),
            "_run_seq": pa.array([run_seq] * count, pa.int64()),
        }
    )


def _land(path: Path, rows: pa.Table, run_seq: int, *, files: int = 1) -> int:
    """One commit of ``rows`` with the run's transaction, in up to ``files`` files; returns its version."""
    write_deltalake(
        str(path),
        rows,
        mode="append",
        configuration={STATS_PROPERTY: stats_columns()},
        # The rows' in-memory size over the files wanted: Parquet compresses, so this errs towards fewer files.
        target_file_size=max(1, rows.nbytes // files) if files > 1 else None,
        commit_properties=CommitProperties(app_transactions=[Transaction(app_id=APP_ID, version=run_seq)]),
    )
    return DeltaTable(str(path)).version()


def whole_table_count(sink: TableRef, run_seq: int, splits: Sequence[Split]) -> dict[TopicPartition, int]:
    """The count as it was made before the added files were known: the current version of the whole table."""
    table = DeltaTable(sink.delta_rs_uri, storage_options=sink.storage_options())
    ours = pc.field("_run_seq") == run_seq
    rows = table.to_pyarrow_dataset().to_table(
        columns=["cluster", "topic", "partition", "offset", "_run_seq"], filter=ours & _within(splits)
    )
    grouped = rows.group_by(["cluster", "topic", "partition"]).aggregate([("offset", "count")])
    return {
        TopicPartition(cluster_id=c, topic=t, partition=int(p)): int(n)
        for c, t, p, n in zip(
            *(grouped.column(x).to_pylist() for x in ("cluster", "topic", "partition", "offset_count")), strict=True
        )
    }


def _splits(first_offset: int, records: int) -> list[Split]:
    per = -(-records // PARTITIONS)
    return [
        Split(
            cluster_id="east",
            topic="orders",
            partition=p,
            start_offset=first_offset,
            stop_offset=first_offset + per,
            stream_ids=("orders",),
            bootstrap_servers="127.0.0.1:19392",
        )
        for p in range(PARTITIONS)
    ]


def _measure_at(folder: Path, prior: int, args: argparse.Namespace) -> dict[str, Any]:
    """Lands the measured run on a sink of ``prior`` runs (in a copy, so the sink can grow further) and times
    both counts.
    """
    sink_path = folder / f"at-{prior}"
    shutil.copytree(folder / "sink", sink_path)
    run_seq = prior + 1
    first_offset = prior * -(-args.prior_records // PARTITIONS)
    version = _land(sink_path, _rows(run_seq, first_offset, args.records), run_seq, files=PARTITIONS)
    sink = TableRef.of(sink_path)
    commit = read_commit(sink, version)
    assert commit is not None
    splits = _splits(first_offset, args.records)
    landed_files = [commit.files_in(sink)]
    read = {(s.cluster_id, s.topic, s.partition): s.record_count for s in splits}

    def new() -> None:
        measure([sink], run_seq, splits, read, (), landed_files)

    def old() -> None:
        whole_table_count(sink, run_seq, splits)

    counted = measure([sink], run_seq, splits, read, (), landed_files)
    same = {
        TopicPartition(cluster_id=p.cluster_id, topic=p.topic, partition=p.partition): p.landed
        for p in counted.partitions
    }
    if same != whole_table_count(sink, run_seq, splits) or counted.landed != args.records:
        print(f"the counts differ at {prior} prior runs", file=sys.stderr)
        sys.exit(1)
    old_s, old_bytes = _best_of(args.repeats, old)
    new_s, new_bytes = _best_of(args.repeats, new)
    table = DeltaTable(str(sink_path))
    shutil.rmtree(sink_path)
    return {
        "prior": prior,
        "run_files": len(commit.added_files),
        "rows": sum(n or 0 for n in table.get_add_actions(flatten=True).column("num_records").to_pylist()),
        "files": len(table.file_uris()),
        "old_s": old_s,
        "old_mb": old_bytes / 1e6,
        "new_s": new_s,
        "new_mb": new_bytes / 1e6,
    }


def main(argv: list[str] | None = None) -> None:
    """Build the sink, measure at each ``--at``, print the table."""
    parser = argparse.ArgumentParser(prog="python -m bench.completeness", description=__doc__)
    parser.add_argument("--prior-runs", type=int, default=200)
    parser.add_argument("--prior-records", type=int, default=1000)
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--at", default="1,50,200", help="prior-run counts to measure at (comma-separated)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    points = sorted({int(x) for x in args.at.split(",") if 0 < int(x) <= args.prior_runs} | {args.prior_runs})
    folder = fresh_dir("completeness")
    began = time.perf_counter()
    figures = []
    for run_seq in range(1, args.prior_runs + 1):
        first_offset = (run_seq - 1) * -(-args.prior_records // PARTITIONS)
        _land(folder / "sink", _rows(run_seq, first_offset, args.prior_records), run_seq)
        if run_seq in points:
            figures.append(_measure_at(folder, run_seq, args))
    print(f"built and measured in {time.perf_counter() - began:.1f} s; best of {args.repeats}")
    print(
        f"a run of {args.records:,} records ({figures[0]['run_files']} files) counted on a sink of N prior runs of "
        f"{args.prior_records:,} records"
    )
    print("| prior runs | sink rows | sink files | whole table | added files | ratio | bytes read: whole | added |")
    print("|---|---|---|---|---|---|---|---|")
    for f in figures:
        print(
            f"| {f['prior']} | {f['rows']:,} | {f['files']} | {f['old_s'] * 1000:.1f} ms | "
            f"{f['new_s'] * 1000:.1f} ms | {f['old_s'] / f['new_s']:.1f}x | {f['old_mb']:.2f} MB | "
            f"{f['new_mb']:.2f} MB |"
        )


if __name__ == "__main__":
    main()
