"""Reader and sink against real Kafka clusters, a real Spark session and real Delta tables.

Every test produces a few records to fresh topics, plans exact ranges around them (records before and after the
ranges prove the numeric offsets are honoured) and asserts the exact rows landed, not just counts.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from devtools.testing.kafka import Client, Record, create_topic, produce, unique_name
from dynamic_kafka.config.models import PipelineConfig, SinkConfig
from dynamic_kafka.decoding.formats import KEY_NOT_UTF8, VALUE_NOT_JSON, VALUE_NOT_UTF8, value_type_mismatch
from dynamic_kafka.decoding.prepared import value_column_decoding
from dynamic_kafka.errors import DecodeError, UndecodableRecordError
from dynamic_kafka.metadata.models import ClusterMetadata
from dynamic_kafka.model.plan import Split
from dynamic_kafka.sink import WriteResult, committed_txn_version, merge_backfill, tables, write_incremental
from dynamic_kafka.sink import incremental as sink
from dynamic_kafka.sink import metrics as sink_metrics
from dynamic_kafka.sink.commits import new_commit_id
from dynamic_kafka.spark.reader import empty_output, read_splits
from dynamic_kafka.spark.schema import DEAD_LETTER_COLUMNS, OUTPUT_COLUMNS, SINK_COLUMNS

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from devtools.local_kafka import ClusterEndpoint, LocalCluster

pytestmark = pytest.mark.integration

# Recent timestamps: the brokers' time retention would delete records dated long ago while a test runs.
BASE_TS_MS = (int(time.time()) - 3_600) * 1_000
Headers = tuple[tuple[str, bytes | None], ...]


# --- helpers ----------------------------------------------------------------------------------------------------


def _records(tag: str, partitions: Sequence[int], per_partition: int, first_ts_ms: int) -> list[Record]:
    """Records on the given partitions, with and without keys, with headers (one null-valued) and a tombstone."""
    out = []
    for i in range(per_partition * len(partitions)):
        out.append(
            Record(
                value=None if i == 3 else f"{tag}-{i}".encode(),
                key=None if i % 3 == 0 else f"key-{tag}-{i}".encode(),
                headers=() if i % 2 else (("source", tag.encode()), ("empty", None)),
                timestamp_ms=first_ts_ms + i * 1_000,
                partition=partitions[i % len(partitions)],
            )
        )
    return out


def _topic(client: Client, prefix: str, partitions: int) -> str:
    topic = unique_name(prefix)
    create_topic(client, topic, partitions)
    return topic


def _splits(
    cluster: ClusterEndpoint | LocalCluster,
    topic: str,
    wanted: Iterable[Record],
    *,
    stream: str,
    partitions: Iterable[int] = (),
) -> list[Split]:
    """Exact ranges around ``wanted``, per partition; ``partitions`` without wanted records get an empty range."""
    by_partition: dict[int, list[int]] = {}
    for record in wanted:
        assert record.partition is not None
        assert record.offset is not None
        by_partition.setdefault(record.partition, []).append(record.offset)
    splits = [
        Split(
            cluster_id=cluster.name,
            topic=topic,
            partition=p,
            start_offset=min(offsets),
            stop_offset=max(offsets) + 1,
            stream_ids=(stream,),
            bootstrap_servers=cluster.bootstrap_servers,
        )
        for p, offsets in sorted(by_partition.items())
    ]
    for p in partitions:
        if p not in by_partition:
            splits.append(
                Split(
                    cluster_id=cluster.name,
                    topic=topic,
                    partition=p,
                    start_offset=1,
                    stop_offset=1,
                    stream_ids=(stream,),
                    bootstrap_servers=cluster.bootstrap_servers,
                )
            )
    return splits


def _metadata(*clusters: ClusterEndpoint | LocalCluster, properties: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        c.name: ClusterMetadata(cluster_id=c.name, bootstrap_servers=c.bootstrap_servers, properties=properties or {})
        for c in clusters
    }


def _pipeline(tmp_path: Path, **settings: Any) -> PipelineConfig:
    return PipelineConfig.model_validate(
        {"id": "orders", "streams": ["orders"], "sink": SinkConfig(path=tmp_path / "sink"), **settings}
    )


def _read(spark: Any, splits: Sequence[Split], clusters: dict[str, Any]) -> Any:
    return read_splits(spark, splits, clusters, isolation_level="read_committed", min_partitions=None)


def _pairs(splits: Sequence[Split]) -> list[tuple[str, str]]:
    return sorted({(s.cluster_id, s.topic) for s in splits})


def _bytes(value: Any) -> bytes | None:
    return None if value is None else bytes(value)


def _headers(row: Any) -> Headers:
    return tuple((h.key, _bytes(h.value)) for h in row.headers or ())


def _sink_rows(spark: Any, path: Path) -> list[tuple[Any, ...]]:
    """Every sink row as (cluster, stream, topic, partition, offset, key, value, ts_ms, headers, _run_seq)."""
    rows = spark.read.format("delta").load(str(path)).selectExpr("*", "unix_millis(timestamp) AS ts_ms").collect()
    return [
        (
            r.cluster,
            r.stream,
            r.topic,
            r.partition,
            r.offset,
            r.key if isinstance(r.key, str | None) else bytes(r.key),
            r.value if not isinstance(r.value, bytearray) else bytes(r.value),
            r.ts_ms,
            _headers(r),
            r._run_seq,
        )
        for r in rows
    ]


def _expected(
    cluster: str, stream: str, topic: str, records: Iterable[Record], run_seq: int | None
) -> list[tuple[Any, ...]]:
    return [
        (cluster, stream, topic, r.partition, r.offset, r.key, r.value, r.timestamp_ms, r.headers, run_seq)
        for r in records
    ]


def _size(records: Iterable[Record]) -> int:
    return sum(len(r.key or b"") + len(r.value or b"") for r in records)


def _time(ms: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)


@dataclass(frozen=True)
class _Landing:
    """Records produced to a fresh one-stream topic, the exact splits around them, and the pipeline to land them."""

    clusters: dict[str, Any]
    topic: str
    sent: list[Record]
    splits: list[Split]
    pipeline: PipelineConfig

    def write(self, spark: Any, run_seq: int, splits: Sequence[Split] | None = None) -> WriteResult:
        """One incremental write of ``splits`` (default: all the produced records)."""
        planned = self.splits if splits is None else splits
        return write_incremental(_read(spark, planned, self.clusters), self.pipeline, run_seq, _pairs(planned))


def _landing(
    cluster: ClusterEndpoint,
    prefix: str,
    records: list[Record],
    tmp_path: Path,
    *,
    partitions: int = 1,
    **settings: Any,
) -> _Landing:
    topic = _topic(cluster.bootstrap_servers, prefix, partitions)
    sent = produce(cluster.bootstrap_servers, topic, records)
    splits = _splits(cluster, topic, sent, stream="orders")
    return _Landing(_metadata(cluster), topic, sent, splits, _pipeline(tmp_path, **settings))


def _one_bad_string(cluster: ClusterEndpoint, prefix: str, tmp_path: Path) -> _Landing:
    """``value: {format: string}`` over three records, the second not UTF-8."""
    records = [Record(value=v) for v in (b"ok", b"\xc3\x28", b"fine")]
    return _landing(cluster, prefix, records, tmp_path, value={"format": "string"})


def _decoded(value: Any) -> Any:
    """A sink cell as a plain value: bytes for binary, a dict for a struct."""
    if isinstance(value, bytearray):
        return bytes(value)
    return value.asDict() if hasattr(value, "asDict") else value


def _dead_letters(spark: Any, path: Path) -> dict[tuple[str, str, int, int], tuple[Any, ...]]:
    rows = spark.read.format("delta").load(str(path)).collect()
    return {
        (r.cluster, r.topic, r.partition, r.offset): (r.stream, _bytes(r.key), _bytes(r.value), r.error, r._run_seq)
        for r in rows
    }


# --- reading and incremental writes -------------------------------------------------------------------------------


@pytest.mark.timeout(600)
def test_two_clusters_land_exactly_the_planned_ranges_once(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    east, west = kafka_clusters["east"], kafka_clusters["west"]
    orders_east = _topic(east.bootstrap_servers, "orders-east", 3)
    payments_east = _topic(east.bootstrap_servers, "payments-east", 1)
    orders_west = _topic(west.bootstrap_servers, "orders-west", 2)
    plan: list[tuple[ClusterEndpoint, str, str, list[Record], list[Record]]] = []
    for cluster, topic, stream, parts, wanted_parts in (
        (east, orders_east, "orders", [0, 1, 2], [0, 1]),  # partition 2 has records, but an empty range
        (east, payments_east, "payments", [0], [0]),
        (west, orders_west, "orders", [0, 1], [0, 1]),
    ):
        produce(cluster.bootstrap_servers, topic, _records("before", parts, 1, BASE_TS_MS - 60_000))
        wanted = produce(cluster.bootstrap_servers, topic, _records(topic, wanted_parts, 3, BASE_TS_MS))
        after = produce(cluster.bootstrap_servers, topic, _records("after", parts, 1, BASE_TS_MS + 60_000))
        plan.append((cluster, topic, stream, wanted, after))
    splits = [s for c, t, stream, wanted, _ in plan for s in _splits(c, t, wanted, stream=stream, partitions=[2])]
    assert any(s.start_offset == s.stop_offset for s in splits)
    pipeline = _pipeline(tmp_path)
    clusters = _metadata(east, west)

    frame = _read(spark, splits, clusters)
    assert tuple(frame.columns) == OUTPUT_COLUMNS
    result = write_incremental(frame, pipeline, 1, _pairs(splits))

    expected = [row for c, t, stream, wanted, _ in plan for row in _expected(c.name, stream, t, wanted, 1)]
    landed = _sink_rows(spark, pipeline.sink.path)
    assert sorted(landed, key=repr) == sorted(expected, key=repr)
    assert tuple(spark.read.format("delta").load(str(pipeline.sink.path)).columns) == SINK_COLUMNS
    all_wanted = [r for *_, wanted, _ in plan for r in wanted]
    assert result.records == result.sink_records == len(all_wanted) == 15
    assert result.bytes == _size(all_wanted)
    assert result.per_topic == {(c.name, t): (len(w), _size(w)) for c, t, _, w, _ in plan}
    assert result.dead_letters == 0
    assert result.min_event_time == _time(BASE_TS_MS)
    assert result.max_event_time == _time(max(r.timestamp_ms or 0 for r in all_wanted))
    assert result.sink_version == 0
    assert not result.already_committed
    assert committed_txn_version(pipeline.sink.path, pipeline.id) == 1
    assert committed_txn_version(pipeline.sink.path, "another-pipeline") is None
    assert not Path(str(pipeline.sink.resolved_dead_letter_path)).exists()  # bytes never dead-letter

    # The same run again (a recovered run): the sink already holds txn 1, nothing is written; the result reports
    # the records the run landed, from the log.
    again = write_incremental(_read(spark, splits, clusters), pipeline, 1, _pairs(splits))
    assert again.already_committed
    assert (again.records, again.sink_records, again.dead_letters) == (15, 15, 0)
    assert again.sink_version == 0
    # Even if the pre-check misses it (a concurrent writer), Delta's txn check skips the append.
    real_check = sink.committed_txn_version
    calls = iter([None])
    monkeypatch.setattr(sink, "committed_txn_version", lambda *a: next(calls, real_check(*a)))
    monkeypatch.setattr(sink_metrics, "_OBSERVATION_WAIT_S", 1.0)
    raced = write_incremental(_read(spark, splits, clusters), pipeline, 1, _pairs(splits))
    monkeypatch.undo()
    assert raced.already_committed
    assert sorted(_sink_rows(spark, pipeline.sink.path), key=repr) == sorted(expected, key=repr)

    # The next run appends the next ranges.
    next_splits = [
        s
        for c, t, stream, _, after in plan
        for s in _splits(c, t, [r for r in after if r.partition != 2 or t != orders_east], stream=stream)
    ]
    second = write_incremental(_read(spark, next_splits, clusters), pipeline, 2, _pairs(next_splits))
    assert second.sink_version == 1
    assert second.records == 5
    assert committed_txn_version(pipeline.sink.path, pipeline.id) == 2
    assert len(_sink_rows(spark, pipeline.sink.path)) == 20


@pytest.mark.timeout(600)
def test_a_blind_append_to_an_existing_table_is_staged_with_footer_statistics_and_a_lost_commit_shows_nothing(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    east = kafka_clusters["east"]
    topic = _topic(east.bootstrap_servers, "staged", 2)
    first = produce(east.bootstrap_servers, topic, _records("first", [0, 1], 3, BASE_TS_MS))
    second = produce(east.bootstrap_servers, topic, _records("second", [0, 1], 3, BASE_TS_MS + 60_000))
    pipeline, clusters = _pipeline(tmp_path), _metadata(east)
    first_splits = _splits(east, topic, first, stream="orders")
    second_splits = _splits(east, topic, second, stream="orders")
    write_incremental(_read(spark, first_splits, clusters), pipeline, 1, _pairs(first_splits))
    stale = tables.open_delta_rs(pipeline.sink.path, doing="the snapshot a racing writer checked")
    assert stale is not None

    result = write_incremental(_read(spark, second_splits, clusters), pipeline, 2, _pairs(second_splits))

    expected = _expected(east.name, "orders", topic, [*first, *second], None)
    landed = _sink_rows(spark, pipeline.sink.path)
    assert sorted(row[:-1] for row in landed) == sorted(row[:-1] for row in expected)
    assert sorted(row[-1] for row in landed) == [1] * len(first) + [2] * len(second)
    assert (result.records, result.sink_version, result.already_committed) == (len(second), 1, False)
    assert committed_txn_version(pipeline.sink.path, pipeline.id) == 2
    # Run 2's files sit in its own folder, committed by delta-rs with statistics read from their footers.
    adds = pa.table(DeltaTable(str(pipeline.sink.path)).get_add_actions(flatten=True)).to_pylist()
    staged = [a for a in adds if a["path"].startswith("dk-run-2-")]
    assert staged
    assert sum(a["num_records"] for a in staged) == len(second)
    assert min(a["min.offset"] for a in staged) == min(r.offset for r in second)
    assert max(a["max.offset"] for a in staged) == max(r.offset for r in second)
    assert {a["min.cluster"] for a in staged} == {a["max.cluster"] for a in staged} == {east.name}
    assert {a["null_count.offset"] for a in staged} == {0}
    info = tables.table_info(pipeline.sink.path)
    assert info is not None
    assert info.rows == len(first) + len(second)
    # Delta-spark skips files by those statistics: a lookup of run 2's offsets reads only run 2's files.
    lookup = spark.read.format("delta").load(str(pipeline.sink.path))
    lookup = lookup.where(f"offset >= {min(r.offset for r in second)} AND _run_seq = 2")
    assert {f.rsplit("/", 1)[-1] for f in lookup.inputFiles()} == {a["path"].rsplit("/", 1)[-1] for a in staged}

    # A writer that checked the table before run 2 was committed (so it saw no txn 2) and commits run 2 again
    # loses its commit: nothing of it becomes visible, and the run reports what the winner landed.
    monkeypatch.setattr(sink, "committed_txn_and_files", lambda *a: (1, 1))
    real_open, stale_once = tables.open_delta_rs, iter([stale])
    monkeypatch.setattr(tables, "open_delta_rs", lambda *a, **k: next(stale_once, None) or real_open(*a, **k))
    raced = write_incremental(_read(spark, second_splits, clusters), pipeline, 2, _pairs(second_splits))
    monkeypatch.undo()
    assert raced.already_committed
    assert raced.sink_version == 1
    assert len(_sink_rows(spark, pipeline.sink.path)) == len(first) + len(second)
    assert DeltaTable(str(pipeline.sink.path)).version() == 1


def test_no_splits_read_as_an_empty_frame_with_the_output_columns(spark: Any) -> None:
    frame = read_splits(spark, [], {}, isolation_level="read_committed", min_partitions=4)
    assert tuple(frame.columns) == OUTPUT_COLUMNS
    assert frame.isEmpty()


@pytest.mark.parametrize("settings", [{"value_format": "json", "value_schema": "id INT, name STRING"}, {}])
def test_the_sink_rows_schema_worked_out_on_the_client_is_the_one_spark_analyses(
    spark: Any, tmp_path: Path, settings: dict[str, str]
) -> None:
    decoded = value_column_decoding(_pipeline(tmp_path, **settings)).decode(empty_output(spark))
    for run_seq in (7, None):
        assert tables.sink_rows_schema(decoded.schema, run_seq) == tables.sink_rows(decoded, run_seq).schema


JSON_VALUES: list[bytes | None] = [
    b'{"id": 1, "name": "a"}',
    b"not json",
    b'{"id": "x", "name": "b"}',  # a field that does not fit its type
    b'{"id": 2}',  # a missing field is null, not an error
    b"",
    None,  # a tombstone stays a null value
    b'{"name": "\xff"}',  # invalid UTF-8 inside otherwise valid JSON
    b"[1, 2]",
    b'{"id": 3, "name": "c", "extra": true}',
]


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("settings", "partitions", "records", "landed", "dead"),
    [
        pytest.param(
            {"value": {"format": "json", "schema": "id INT, name STRING"}},
            1,
            [Record(value=v, key=f"k{i}".encode(), timestamp_ms=BASE_TS_MS + i) for i, v in enumerate(JSON_VALUES)],
            {
                0: (b"k0", {"id": 1, "name": "a"}),
                3: (b"k3", {"id": 2, "name": None}),
                5: (b"k5", None),
                8: (b"k8", {"id": 3, "name": "c"}),
            },
            {
                1: VALUE_NOT_JSON,
                2: value_type_mismatch("id", "int"),
                4: VALUE_NOT_JSON,
                6: VALUE_NOT_UTF8,
                7: VALUE_NOT_JSON,
            },
            id="json-values",
        ),
        pytest.param(
            {"value": {"format": "string"}, "key": {"format": "string"}},
            2,
            [
                Record(value="héllo ✓".encode(), key=b"plain", partition=0),
                Record(value=b"caf\xe9", key=b"latin-1 value", partition=0),  # Latin-1, not UTF-8
                Record(value=b"ok", key=b"\xff\xfe", partition=1),  # undecodable key
                Record(value=None, key=None, partition=1),
                Record(value=b"\xed\xa0\x80", key=b"surrogate", partition=1),  # an encoded surrogate: invalid UTF-8
            ],
            {0: ("plain", "héllo ✓"), 3: (None, None)},
            {1: VALUE_NOT_UTF8, 2: KEY_NOT_UTF8, 4: VALUE_NOT_UTF8},
            id="strings-never-get-replacement-characters",
        ),
    ],
)
def test_undecodable_records_go_to_dead_letters_with_exact_coordinates(
    kafka_clusters: dict[str, ClusterEndpoint],
    spark: Any,
    tmp_path: Path,
    settings: dict[str, Any],
    partitions: int,
    records: list[Record],
    landed: dict[int, tuple[Any, Any]],
    dead: dict[int, str],
) -> None:
    landing = _landing(kafka_clusters["east"], "undecodable", records, tmp_path, partitions=partitions, **settings)
    sent, topic, pipeline = landing.sent, landing.topic, landing.pipeline
    index = {(r.partition, r.offset): i for i, r in enumerate(sent)}

    result = landing.write(spark, 7)

    rows = spark.read.format("delta").load(str(pipeline.sink.path)).collect()
    assert {index[r.partition, r.offset]: (_decoded(r.key), _decoded(r.value)) for r in rows} == landed
    assert all(r._run_seq == 7 and r.cluster == "east" and r.stream == "orders" for r in rows)
    assert _dead_letters(spark, pipeline.sink.resolved_dead_letter_path) == {
        ("east", topic, sent[i].partition, sent[i].offset): ("orders", sent[i].key, sent[i].value, error, 7)
        for i, error in dead.items()
    }
    assert tuple(spark.read.format("delta").load(str(pipeline.sink.resolved_dead_letter_path)).columns) == (
        DEAD_LETTER_COLUMNS
    )
    assert (result.records, result.sink_records, result.dead_letters) == (len(sent), len(landed), len(dead))
    assert result.bytes == _size(sent)
    assert result.per_topic == {("east", topic): (len(sent), _size(sent))}
    assert (result.sink_version, result.dead_letter_version) == (0, 0)
    assert committed_txn_version(pipeline.sink.resolved_dead_letter_path, pipeline.id) == 7

    # Executing the run again duplicates neither table.
    again = landing.write(spark, 7)
    assert again.already_committed
    assert spark.read.format("delta").load(str(pipeline.sink.path)).count() == len(landed)
    assert spark.read.format("delta").load(str(pipeline.sink.resolved_dead_letter_path)).count() == len(dead)


@pytest.mark.timeout(300)
def test_a_run_without_undecodable_records_leaves_the_dead_letter_table_alone(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> None:
    landing = _one_bad_string(kafka_clusters["west"], "clean", tmp_path)
    sent, pipeline = landing.sent, landing.pipeline
    dead_letter_path = pipeline.sink.resolved_dead_letter_path
    before_bad = [s.model_copy(update={"stop_offset": sent[1].offset}) for s in landing.splits]
    from_bad = [s.model_copy(update={"start_offset": sent[1].offset}) for s in landing.splits]

    clean = landing.write(spark, 1, before_bad)

    assert (clean.records, clean.sink_records, clean.dead_letters) == (1, 1, 0)
    assert (clean.sink_version, clean.dead_letter_version) == (0, None)
    assert committed_txn_version(pipeline.sink.path, pipeline.id) == 1
    assert not tables.table_exists(str(dead_letter_path))

    # A run that has an undecodable record lands it in the dead-letter table first, then the rest in the sink.
    mixed = landing.write(spark, 2, from_bad)

    assert (mixed.records, mixed.sink_records, mixed.dead_letters) == (2, 1, 1)
    assert (mixed.sink_version, mixed.dead_letter_version) == (1, 0)
    assert committed_txn_version(dead_letter_path, pipeline.id) == 2
    assert sorted(r.value for r in spark.read.format("delta").load(str(pipeline.sink.path)).collect()) == [
        "fine",
        "ok",
    ]
    assert [r.offset for r in spark.read.format("delta").load(str(dead_letter_path)).collect()] == [sent[1].offset]


@pytest.mark.timeout(300)
def test_recovery_after_a_crash_between_dead_letters_and_sink_completes_the_run(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> None:
    landing = _one_bad_string(kafka_clusters["west"], "crash", tmp_path)
    pipeline = landing.pipeline
    # The crashed attempt wrote its dead letters (with txn 3), then died before the sink append.
    decoded = value_column_decoding(pipeline).decode(_read(spark, landing.splits, landing.clusters))
    tables.append_idempotent(
        tables.dead_letter_rows(decoded.where("_decode_error IS NOT NULL"), 3),
        str(pipeline.sink.resolved_dead_letter_path),
        pipeline.id,
        3,
        commit_id=new_commit_id(),
    )
    assert committed_txn_version(pipeline.sink.path, pipeline.id) is None

    result = landing.write(spark, 3)

    assert not result.already_committed
    assert (result.records, result.sink_records, result.dead_letters) == (3, 2, 1)
    assert result.dead_letter_version == 0  # the crashed attempt's commit; Delta skipped the second one
    assert sorted(r.value for r in spark.read.format("delta").load(str(pipeline.sink.path)).collect()) == [
        "fine",
        "ok",
    ]
    assert spark.read.format("delta").load(str(pipeline.sink.resolved_dead_letter_path)).count() == 1
    assert committed_txn_version(pipeline.sink.path, pipeline.id) == 3


@pytest.mark.timeout(300)
def test_on_decode_error_fail_raises_with_coordinates_and_writes_nothing(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> None:
    records = [Record(value=v) for v in (b'{"id": 1}', b"{oops", b'{"id": 2}')]
    settings = {"value": {"format": "json", "schema": "id BIGINT"}, "on_decode_error": "fail"}
    landing = _landing(kafka_clusters["west"], "strict", records, tmp_path, **settings)
    sent, topic, pipeline = landing.sent, landing.topic, landing.pipeline

    with pytest.raises(UndecodableRecordError) as raised:
        landing.write(spark, 1)

    error = raised.value
    assert isinstance(error, DecodeError)
    assert not error.retriable
    assert (error.cluster_id, error.topic, error.partition, error.offset, error.reason) == (
        "west",
        topic,
        0,
        sent[1].offset,
        VALUE_NOT_JSON,
    )
    assert f"west/{topic}[0] offset {sent[1].offset}" in str(error)
    assert committed_txn_version(pipeline.sink.path, pipeline.id) is None
    assert committed_txn_version(pipeline.sink.resolved_dead_letter_path, pipeline.id) is None

    # Without the bad record the same pipeline lands the rest.
    result = landing.write(spark, 1, [s.model_copy(update={"stop_offset": sent[1].offset}) for s in landing.splits])
    assert result.records == 1
    assert result.sink_version == 0
    assert [r.value.id for r in spark.read.format("delta").load(str(pipeline.sink.path)).collect()] == [1]


# --- backfills ----------------------------------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_overlapping_backfills_and_incremental_runs_never_duplicate(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> None:
    east, west = kafka_clusters["east"], kafka_clusters["west"]
    east_topic = _topic(east.bootstrap_servers, "backfill-east", 2)
    west_topic = _topic(west.bootstrap_servers, "backfill-west", 1)
    east_sent = produce(east.bootstrap_servers, east_topic, _records("e", [0, 1], 3, BASE_TS_MS))
    west_sent = produce(west.bootstrap_servers, west_topic, _records("w", [0], 4, BASE_TS_MS))
    pipeline = _pipeline(tmp_path, value={"format": "string"})
    clusters = _metadata(east, west)
    # The incremental run landed the first half of each partition.
    first_half = [r for r in east_sent + west_sent if (r.offset or 0) < 2]
    incremental = _splits(east, east_topic, [r for r in first_half if r in east_sent], stream="orders") + _splits(
        west, west_topic, [r for r in first_half if r in west_sent], stream="orders"
    )
    write_incremental(_read(spark, incremental, clusters), pipeline, 1, _pairs(incremental))
    backfill = _splits(east, east_topic, east_sent, stream="orders") + _splits(
        west, west_topic, west_sent, stream="orders"
    )
    window = {"start": _time(BASE_TS_MS), "end": _time(BASE_TS_MS + 3_600_000)}

    first = merge_backfill(_read(spark, backfill, clusters), pipeline, _pairs(backfill), **window)
    second = merge_backfill(_read(spark, backfill, clusters), pipeline, _pairs(backfill), **window)

    def text(value: bytes | None) -> str | None:
        return None if value is None else value.decode()

    expected = {
        (c, t, r.partition, r.offset, r.key, text(r.value), r.timestamp_ms, r.headers)
        for c, t, sent in (("east", east_topic, east_sent), ("west", west_topic, west_sent))
        for r in sent
    }
    landed = _sink_rows(spark, pipeline.sink.path)
    assert len(landed) == len(expected) == 10
    assert {(c, t, p, o, k, v, ts, h) for c, _, t, p, o, k, v, ts, h, _ in landed} == expected
    assert {row[-1] for row in landed if row[4] < 2} == {1}  # incremental rows keep their run_seq
    assert {row[-1] for row in landed if row[4] >= 2} == {None}  # backfill rows have none
    assert (first.records, first.sink_records, first.dead_letters) == (10, 10 - len(first_half), 0)
    assert (second.records, second.sink_records) == (10, 0)
    assert first.per_topic == {
        ("east", east_topic): (6, _size(east_sent)),
        ("west", west_topic): (4, _size(west_sent)),
    }
    assert second.sink_version is not None
    assert first.sink_version is not None
    assert second.min_event_time == _time(BASE_TS_MS)
    # A backfill does not take part in the incremental txn protocol.
    assert committed_txn_version(pipeline.sink.path, pipeline.id) == 1


# --- credentials --------------------------------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_sasl_credentials_are_translated_for_spark_and_redacted_everywhere(
    sasl_cluster: LocalCluster,
    sasl_password: str,
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    client = sasl_cluster.client_config(sasl_password)
    topic = _topic(client, "secured", 1)
    sent = produce(client, topic, [Record(value=f"s{i}".encode(), key=b"k") for i in range(3)])
    monkeypatch.setenv("SECURED_KAFKA_PASSWORD", sasl_password)
    clusters = _metadata(
        sasl_cluster,
        properties={
            "security.protocol": "sasl_plaintext",  # librdkafka accepts lower case; the Java client does not
            "sasl.mechanisms": "PLAIN",
            "sasl.username": "ingest",
            "sasl.password": "${env:SECURED_KAFKA_PASSWORD}",
        },
    )
    splits = _splits(sasl_cluster, topic, sent, stream="orders")
    pipeline = _pipeline(tmp_path, value={"format": "string"})
    caplog.set_level(logging.DEBUG, logger="dynamic_kafka")

    frame = _read(spark, splits, clusters)
    plans = frame._jdf.queryExecution().toString()
    frame.explain(extended=True)
    explained = capsys.readouterr().out
    # What Spark shows wherever it prints a data source's options (UI, event log, plans).
    options = spark._jvm.PythonUtils.toScalaMap(
        {"kafka.sasl.jaas.config": f'PlainLoginModule required username="ingest" password="{sasl_password}";'}
    )
    shown_options = spark._jsparkSession.sessionState().conf().redactOptions(options).toString()
    result = write_incremental(frame, pipeline, 1, _pairs(splits))

    assert result.records == 3
    assert sorted(r.value for r in spark.read.format("delta").load(str(pipeline.sink.path)).collect()) == [
        "s0",
        "s1",
        "s2",
    ]
    assert "KafkaRelation" in plans or "kafka" in plans.lower()
    for text in (plans, explained, shown_options, caplog.text, repr(clusters), repr(result)):
        assert sasl_password not in text
    assert "redacted" in shown_options.lower()


@pytest.mark.timeout(300)
def test_wrong_credentials_fail_as_a_spark_job_error_without_the_secret(
    sasl_cluster: LocalCluster, sasl_password: str, spark: Any, tmp_path: Path
) -> None:
    from dynamic_kafka.errors import SparkJobError

    client = sasl_cluster.client_config(sasl_password)
    topic = _topic(client, "denied", 1)
    sent = produce(client, topic, [Record(value=b"x")])
    wrong = "not-the-password-" + sasl_password[:4]
    clusters = _metadata(
        sasl_cluster,
        properties={
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "ingest",
            "sasl.password": wrong,
            "request.timeout.ms": "5000",
            "default.api.timeout.ms": "5000",
        },
    )
    splits = _splits(sasl_cluster, topic, sent, stream="orders")

    with pytest.raises(SparkJobError) as raised:
        write_incremental(_read(spark, splits, clusters), _pipeline(tmp_path), 1, _pairs(splits))

    assert raised.value.retriable
    assert str(_pipeline(tmp_path).sink.path) in str(raised.value)
    assert wrong not in str(raised.value)
    assert sasl_password not in str(raised.value)
