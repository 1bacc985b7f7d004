"""Time-window backfills and incremental runs over the same records, on real clusters, Spark and Delta.

A backfill merges a window into the sink without moving the incremental offsets, so the next incremental run reads
records the backfill already landed. It must land each of them once (DESIGN.md section 5) and stay a plain blind
append when no backfill overlaps its ranges. Every test asserts the exact sink rows, the state, what each
incremental write reported (a pass-through spy on ``sink.write_incremental``, which the runner calls) and, from the
Delta log, whether that write read the sink at all.
"""

from __future__ import annotations

import signal
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest
from deltalake import DeltaTable, write_deltalake

from devtools.testing.kafka import Record, create_topic, produce, unique_name
from devtools.testing.pipeline import PipelineHarness, Row
from dynamic_kafka.faults import ENV as FAULT_ENV
from dynamic_kafka.model.plan import Split, TopicPartition
from dynamic_kafka.sink import WriteResult
from dynamic_kafka.sink import incremental as sink
from dynamic_kafka.storage import TableRef

if TYPE_CHECKING:
    from pathlib import Path

    from devtools.local_kafka import ClusterEndpoint

pytestmark = pytest.mark.integration

M = timedelta(minutes=1)
Write = tuple[tuple[Split, ...], WriteResult]


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> list[Write]:
    """Every incremental write of the test: the overlap ranges it was given and what it reported."""
    calls: list[Write] = []
    real = sink.write_incremental

    def spy(
        df: Any,
        pipeline: Any,
        run_seq: int,
        pairs: Any,
        overlaps: tuple[Split, ...] | list[Split] = (),
        prepared: Any = None,
        **options: Any,
    ) -> WriteResult:
        result = real(df, pipeline, run_seq, pairs, overlaps, prepared, **options)
        calls.append((tuple(overlaps), result))
        return result

    monkeypatch.setattr(sink, "write_incremental", spy)
    return calls


class Orders:
    """A pipeline over one 2-partition topic on east; ``t0`` anchors the record timestamps (recent: the brokers'
    time retention would delete records dated long ago)."""

    def __init__(self, east: ClusterEndpoint, tmp_path: Path, spark: Any, **pipeline: Any) -> None:
        """``spark``: the in-process session, or a ``SparkMode`` (conftest) to run in that mode."""
        self.servers = east.bootstrap_servers
        self.topic = unique_name("overlap")
        create_topic(self.servers, self.topic, 2)
        mode = spark if hasattr(spark, "config") and hasattr(spark, "session") else None
        self.harness = PipelineHarness(
            tmp_path,
            clusters={"east": self.servers},
            spark=mode.session if mode is not None else lambda: spark,
            spark_config=mode.config if mode is not None else None,
            **pipeline,
        )
        self.harness.set_streams({"orders": {"east": [self.topic]}})
        self.t0 = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(hours=2)

    def produce(self, *records: tuple[int, str | bytes, int]) -> list[Record]:
        """Records ``(partition, value, minutes after t0)``."""
        return produce(
            self.servers,
            self.topic,
            [
                Record(
                    value=v.encode() if isinstance(v, str) else v,
                    partition=p,
                    timestamp_ms=int((self.t0 + minutes * M).timestamp() * 1000),
                )
                for p, v, minutes in records
            ],
        )

    def rows(self, records: list[Record]) -> list[Row]:
        return sorted(("east", self.topic, r.partition or 0, r.offset or 0, r.value) for r in records)

    def backfill(self, first_minute: int, end_minute: int) -> Any:
        return self.harness.face().backfill(self.t0 + first_minute * M, self.t0 + end_minute * M)

    def tp(self, partition: int) -> TopicPartition:
        return TopicPartition(cluster_id="east", topic=self.topic, partition=partition)

    def ranges(self, splits: tuple[Split, ...]) -> list[tuple[int, int, int]]:
        assert {(s.cluster_id, s.topic) for s in splits} <= {("east", self.topic)}
        return sorted((s.partition, s.start_offset, s.stop_offset) for s in splits)

    def offsets(self) -> dict[int, int]:
        return {k.partition: p.next_offset for k, p in self.harness.runner().store.load().partitions.items()}

    def dead_letters(self) -> list[tuple[int, int]]:
        """Every dead letter's (partition, offset), sorted, duplicates kept."""
        table = DeltaTable(str(self.harness.face().config.sink.resolved_dead_letter_path)).to_pyarrow_table()
        return sorted(zip(table["partition"].to_pylist(), table["offset"].to_pylist(), strict=True))

    def read_the_sink(self, result: WriteResult) -> bool:
        """Whether the sink commit of ``result`` read the sink (Delta: not a blind append)."""
        (commit,) = [
            h for h in DeltaTable(str(self.harness.sink_path)).history() if h["version"] == result.sink_version
        ]
        return not commit["isBlindAppend"]


def test_an_incremental_run_skips_what_a_backfill_landed_beyond_its_offsets(
    kafka_clusters: dict[str, ClusterEndpoint], spark_mode: Any, tmp_path: Path, writes: list[Write]
) -> None:
    # Values are strings, so the write dead-letters (and the dedupe covers the dead-letter table too).
    orders = Orders(kafka_clusters["east"], tmp_path, spark_mode, value={"format": "string"})
    first = orders.produce((0, "a0", 1), (0, "a1", 2), (1, "a2", 3))
    assert orders.harness.face().run().records == 3
    window = orders.produce((0, "b0", 10), (1, "b1", 11), (1, b"\xff\xfe-not-utf8", 12))
    after = orders.produce((0, "c0", 40), (1, "c1", 41))

    # [t0+2m, t0+30m): a1 and a2 (already in the sink) and the three records beyond the incremental offsets.
    backfill = orders.backfill(2, 30)

    assert (backfill.records, backfill.dead_letters) == (5, 1)
    assert orders.harness.sink_rows() == orders.rows(first + window[:2])
    state = orders.harness.runner().store.load()
    assert {k.partition: p.next_offset for k, p in state.partitions.items()} == {0: 2, 1: 1}  # not moved
    assert state.backfilled == {orders.tp(0): 3, orders.tp(1): 3}

    second = orders.harness.face().run()

    assert (second.run_seq, second.records, second.dead_letters) == (2, 2, 0)  # c0 and c1 only
    assert second.deduplicated == 3  # read again, already landed by the backfill
    assert [(t.topic, t.records) for t in second.topics] == [(orders.topic, 2)]
    assert orders.harness.sink_rows() == orders.rows(first + window[:2] + after)
    assert orders.dead_letters() == [(1, 2)]
    assert orders.offsets() == {0: 4, 1: 4}
    assert len(writes) == 2
    overlaps, result = writes[1]
    assert orders.ranges(overlaps) == [(0, 2, 3), (1, 1, 3)]
    assert (result.records, result.sink_records, result.dead_letters, result.deduplicated) == (2, 2, 0, 3)
    assert orders.read_the_sink(result)
    assert orders.harness.face().run().status == "empty"


def test_the_first_run_after_a_backfill_on_a_fresh_pipeline_lands_each_record_once(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path, writes: list[Write]
) -> None:
    orders = Orders(kafka_clusters["east"], tmp_path, spark)
    window = orders.produce((0, "d0", 1), (0, "d1", 5), (1, "d2", 6))
    later = orders.produce((0, "e0", 50))

    assert orders.backfill(0, 30).records == 3
    assert orders.harness.sink_rows() == orders.rows(window)
    state = orders.harness.runner().store.load()
    assert (state.last_run, state.partitions) == (None, {})  # no incremental state yet
    assert state.backfilled == {orders.tp(0): 2, orders.tp(1): 1}

    first = orders.harness.face().run()  # from earliest: reads all four records

    assert (first.run_seq, first.records, first.deduplicated) == (1, 1, 3)
    assert orders.harness.sink_rows() == orders.rows(window + later)
    ((overlaps, result),) = writes
    assert orders.ranges(overlaps) == [(0, 0, 2), (1, 0, 1)]
    assert (result.sink_records, result.deduplicated) == (1, 3)
    assert orders.read_the_sink(result)

    # Past the frontier, runs are plain blind appends again.
    more = orders.produce((0, "f0", 55), (1, "f1", 56))
    assert orders.harness.face().run().records == 2
    assert orders.harness.sink_rows() == orders.rows(window + later + more)
    overlaps, result = writes[1]
    assert (overlaps, result.sink_records, result.deduplicated) == ((), 2, 0)
    assert not orders.read_the_sink(result)


def test_without_a_backfill_runs_append_blindly_and_dedupe_nothing(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path, writes: list[Write]
) -> None:
    orders = Orders(kafka_clusters["east"], tmp_path, spark)
    first = orders.produce((0, "g0", 1), (1, "g1", 2))
    assert orders.harness.face().run().records == 2
    second = orders.produce((0, "h0", 3), (0, "h1", 4), (1, "h2", 5))

    assert orders.harness.face().run().records == 3

    assert orders.harness.sink_rows() == orders.rows(first + second)
    assert orders.harness.runner().store.load().backfilled == {}
    assert [(overlaps, r.sink_records, r.deduplicated) for overlaps, r in writes] == [((), 2, 0), ((), 3, 0)]
    assert not any(orders.read_the_sink(r) for _, r in writes)  # no read of the sink at all


def test_a_recovered_run_dedupes_like_the_run_it_finishes(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path, writes: list[Write]
) -> None:
    orders = Orders(kafka_clusters["east"], tmp_path, spark)
    first = orders.produce((0, "i0", 1))
    assert orders.harness.face().run().records == 1
    window = orders.produce((0, "j0", 10), (1, "j1", 11))
    assert orders.backfill(5, 30).records == 2
    after = orders.produce((1, "k0", 40))

    crash = orders.harness.cli("run", env={FAULT_ENV: "after_plan"})  # dies with run 2 written ahead

    assert crash.returncode == -signal.SIGKILL, crash.stderr[-2000:]
    planned = orders.harness.runner().store.load().last_run
    assert planned is not None
    assert (planned.run_seq, planned.status) == (2, "planned")

    summary = orders.harness.face().run()  # re-executes run 2 exactly, then finds nothing more

    assert (summary.recovered_run_seq, summary.run_seq, summary.status) == (2, 3, "empty")
    assert orders.harness.sink_rows() == orders.rows(first + window + after)
    assert orders.offsets() == {0: 2, 1: 2}
    ((overlaps, result),) = writes[1:]
    assert orders.ranges(overlaps) == [(0, 1, 2), (1, 0, 1)]
    assert (result.sink_records, result.deduplicated) == (1, 2)


def test_a_dead_letter_an_orphaned_backfill_merge_lands_during_the_runs_write_lands_once(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A backfill's MERGE outlives its client (and its lease) and lands a dead letter while a run writes the same
    range: after the run's persisted rows were computed (their anti-join did not see it), before the dead-letter
    append commits. In the product that window is inside the append's own job; here the rows are computed first
    (a count), so the landing falls in it. The MERGE is another writer (delta-rs here, a Connect server or another
    process in life): a MERGE through this very session would make Spark recompute the persisted rows.
    """
    orders = Orders(kafka_clusters["east"], tmp_path, spark, value={"format": "string"})
    first = orders.produce((0, "m0", 1))
    assert orders.harness.runner().run().records == 1
    window = orders.produce((0, "n0", 10), (1, b"\xff\xfe-not-utf8", 11))
    assert (orders.backfill(5, 30).records, orders.dead_letters()) == (2, [(1, 0)])
    dead_letters = str(orders.harness.face().config.sink.resolved_dead_letter_path)
    merged = DeltaTable(dead_letters).to_pyarrow_table()
    DeltaTable(dead_letters).delete()  # the frontier is recorded; the orphaned MERGE's dead letter not landed yet

    real = sink.append_idempotent
    landed: list[str] = []

    def merge_lands_inside_the_write(rows: Any, table: Any, *args: Any, **kwargs: Any) -> None:
        if str(TableRef.of(table)) == str(TableRef.of(dead_letters)) and not landed:
            rows.count()  # the run's persisted rows are computed: their anti-join has read the table now
            write_deltalake(dead_letters, merged, mode="append")
            landed.append(dead_letters)
        real(rows, table, *args, **kwargs)

    monkeypatch.setattr(sink, "append_idempotent", merge_lands_inside_the_write)
    orders.harness.runner().run()

    assert landed == [dead_letters]
    assert orders.dead_letters() == [(1, 0)]
    assert orders.harness.sink_rows() == orders.rows(first + window[:1])
    assert orders.offsets() == {0: 2, 1: 1}
