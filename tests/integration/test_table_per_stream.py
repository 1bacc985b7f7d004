"""A table per stream (issue 27, item 3): ``sink.path: tables/{stream}`` lands each stream of a pattern subscription
in its own Delta table, with its own transaction, in one run; a crash between two tables' commits is recovered with
each table exactly once; a stream that appears later gets its table from the run that first lands it. A time-window
backfill merges each stream's window into its table, once per table across a crash between two tables' MERGEs; a
dead-letter replay lands each stream's dead letters in its table, once across a crash. On the real broker, Spark and
Delta.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

from devtools.testing.kafka import Record, create_topic, produce, unique_name
from dynamic_kafka.errors import ConfigError
from dynamic_kafka.faults import acting_at
from dynamic_kafka.operations.backfill import run_backfill
from dynamic_kafka.operations.maintain import maintain_pipeline
from dynamic_kafka.operations.replay import replay_dead_letters
from dynamic_kafka.operations.status import pipeline_status
from dynamic_kafka.sink import committed_txn_version
from dynamic_kafka.sink.tables import open_delta_rs
from tests.support.clock import past_the_planned_runs_lease
from tests.support.metadata_changes import harness, numbered, rows

if TYPE_CHECKING:
    from pathlib import Path

    from devtools.local_kafka import ClusterEndpoint
    from devtools.testing.pipeline import PipelineHarness, Row

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]


class SimulatedCrashError(Exception):
    """Raised at a fault point: the run stops there, as a killed process would, leaving its plan planned."""


def crash() -> None:
    raise SimulatedCrashError


def per_stream_harness(
    clusters: dict[str, ClusterEndpoint], spark: Any, folder: Path, **pipeline: Any
) -> PipelineHarness:
    """A pipeline of the streams named ``orders-*`` (by pattern), each landing in ``tables/<stream>``."""
    return harness(
        folder, clusters, spark, streams=None, stream_pattern="orders-.*", sink={"path": "tables/{stream}"}, **pipeline
    )


def two_streams(
    clusters: dict[str, ClusterEndpoint], spark: Any, folder: Path, **pipeline: Any
) -> tuple[PipelineHarness, dict[str, str]]:
    """A pipeline of the streams orders-eu and orders-us (a new one-partition topic each on "east") by pattern, each
    landing in ``tables/<stream>``; returns the harness and the topics by stream.
    """
    topics = {stream: unique_name(stream) for stream in ("orders-eu", "orders-us")}
    for topic in topics.values():
        create_topic(clusters["east"].bootstrap_servers, topic, 1)
    h = per_stream_harness(clusters, spark, folder, **pipeline)
    h.set_streams({s: {"east": [t]} for s, t in topics.items()})
    return h, topics


def table_rows(h: PipelineHarness, stream: str) -> list[Row]:
    """Every row of one stream's table as (cluster, topic, partition, offset, value), sorted, duplicates kept."""
    opened = open_delta_rs(h.face().config.for_stream(stream).sink_table, doing="reading a stream table")
    if opened is None:
        return []
    table = opened.to_pyarrow_table(columns=["cluster", "topic", "partition", "offset", "value", "stream"])
    assert set(table.column("stream").to_pylist()) <= {stream}
    found = zip(
        *(table.column(c).to_pylist() for c in ("cluster", "topic", "partition", "offset", "value")), strict=True
    )
    return sorted((c, t, int(p), int(o), v) for c, t, p, o, v in found)


def test_each_stream_lands_in_its_own_table_exactly_once_across_a_crash_between_two_tables_and_a_new_stream_gets_one(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    east = kafka_clusters["east"].bootstrap_servers
    topics = {stream: unique_name(stream) for stream in ("orders-eu", "orders-us", "orders-apac")}
    for stream, topic in topics.items():
        create_topic(east, topic, 2 if stream == "orders-eu" else 1)
    h = harness(
        tmp_path,
        kafka_clusters,
        spark,
        streams=None,
        stream_pattern="orders-.*",
        sink={"path": "tables/{stream}"},
    )
    h.set_streams({s: {"east": [topics[s]]} for s in ("orders-eu", "orders-us")})
    eu = produce(east, topics["orders-eu"], numbered(range(4), partitions=2))
    us = produce(east, topics["orders-us"], numbered(range(10, 13)))

    # Run 1 dies after the first table's commit (orders-eu), before the second's (orders-us).
    with acting_at("between_tables", crash), pytest.raises(SimulatedCrashError):
        h.runner().run()
    assert committed_txn_version(tmp_path / "tables" / "orders-eu", "p") == 1
    assert not (tmp_path / "tables" / "orders-us").exists()
    state = h.runner().store.load()
    assert state.last_run is not None
    assert (state.last_run.run_seq, state.last_run.status) == (1, "planned")
    status = pipeline_status(h.runner().context)
    assert [(t.stream_id, t.exists, t.last_run_seq) for t in status.tables] == [
        ("orders-eu", True, 1),
        ("orders-us", False, None),
    ]
    past_the_planned_runs_lease(monkeypatch, h.runner().store)

    # Its recovery writes only the table lacking the run; the state commits once both hold it.
    recovering = h.runner().run()
    assert recovering.recovered_run_seq == 1
    assert table_rows(h, "orders-eu") == sorted(rows("east", topics["orders-eu"], eu))
    assert table_rows(h, "orders-us") == sorted(rows("east", topics["orders-us"], us))
    assert committed_txn_version(tmp_path / "tables" / "orders-us", "p") == 1
    assert h.runner().store.load().last_run.status == "committed"  # type: ignore[union-attr]

    # A stream that appears by pattern gets its own table from the run that first lands it; two streams with new
    # records land in their two tables in one run, each with that run's transaction.
    h.set_streams({s: {"east": [topics[s]]} for s in topics})
    apac = produce(east, topics["orders-apac"], numbered(range(20, 22)))
    more_eu = produce(east, topics["orders-eu"], numbered(range(4, 6), partitions=2))
    later = h.runner().run()
    assert later.status == "committed"
    assert later.records == 4
    assert [(t.stream_id, t.records) for t in later.stream_tables] == [("orders-apac", 2), ("orders-eu", 2)]
    # Its completeness counts each range in its stream's table, from the files that table's commit added.
    assert later.completeness is not None
    assert sorted((p.topic, p.partition, p.read, p.landed, p.matches) for p in later.completeness.partitions) == sorted(
        [
            (topics["orders-apac"], 0, 2, 2, True),
            (topics["orders-eu"], 0, 1, 1, True),
            (topics["orders-eu"], 1, 1, 1, True),
        ]
    )
    assert table_rows(h, "orders-apac") == sorted(rows("east", topics["orders-apac"], apac))
    assert table_rows(h, "orders-eu") == sorted(rows("east", topics["orders-eu"], eu + more_eu))
    assert table_rows(h, "orders-us") == sorted(rows("east", topics["orders-us"], us))  # nothing new: no commit
    for stream, txn in (("orders-apac", later.run_seq), ("orders-eu", later.run_seq), ("orders-us", 1)):
        assert committed_txn_version(tmp_path / "tables" / stream, "p") == txn
    assert (tmp_path / "tables" / "_p_state").is_dir()  # one state for the pipeline, beside the stream tables

    # Maintenance handles every stream's tables; status shows each.
    maintained = maintain_pipeline(h.runner().context, retention_hours=0, unsafe_vacuum_retention=True)
    assert sorted({t.table for t in maintained.tables if t.role == "sink"}) == [
        str(tmp_path / "tables" / s) for s in ("orders-apac", "orders-eu", "orders-us")
    ]
    status = pipeline_status(h.runner().context)
    assert [(t.stream_id, t.last_run_seq, t.lag) for t in status.tables] == [
        ("orders-apac", later.run_seq, 0),
        ("orders-eu", later.run_seq, 0),
        ("orders-us", 1, 0),
    ]

    # A stream the pattern finds whose id cannot name a folder is refused before its run is planned.
    bad = unique_name("orders-bad")
    create_topic(east, bad, 1)
    h.set_streams({**{s: {"east": [topics[s]]} for s in topics}, "orders-eu:2": {"east": [bad]}})
    produce(east, bad, numbered(range(30, 31)))
    with pytest.raises(ConfigError, match=r"stream 'orders-eu:2' cannot name a table of sink\.path .*it holds ':'"):
        h.runner().run()
    head = h.runner().store.load().last_run
    assert head is not None
    assert (head.run_seq, head.status) == (later.run_seq, "committed")  # nothing planned


def test_stream_tables_on_object_storage_each_hold_their_stream_once_with_the_state_beside_them(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, s3_storage: dict[str, Any], tmp_path: Path
) -> None:
    east = kafka_clusters["east"].bootstrap_servers
    topics = {stream: unique_name(stream) for stream in ("orders-eu", "orders-us")}
    for topic in topics.values():
        create_topic(east, topic, 1)
    prefix = f"s3://lake/{uuid.uuid4().hex[:12]}"
    h = harness(
        tmp_path,
        kafka_clusters,
        spark,
        streams=None,
        stream_pattern="orders-.*",
        sink={"path": f"{prefix}/{{stream}}"},
        storage=s3_storage,
    )
    h.set_streams({s: {"east": [t]} for s, t in topics.items()})
    eu = produce(east, topics["orders-eu"], numbered(range(3)))
    us = produce(east, topics["orders-us"], numbered(range(10, 12)))

    first = h.face().run()

    assert (first.status, first.records) == ("committed", 5)
    assert first.completeness is not None  # counted from each S3 table's added files
    assert (first.completeness.read, first.completeness.landed, first.completeness.matches) == (5, 5, True)
    assert [(t.stream_id, t.path, t.records) for t in first.stream_tables] == [
        ("orders-eu", f"{prefix}/orders-eu", 3),
        ("orders-us", f"{prefix}/orders-us", 2),
    ]
    assert table_rows(h, "orders-eu") == sorted(rows("east", topics["orders-eu"], eu))
    assert table_rows(h, "orders-us") == sorted(rows("east", topics["orders-us"], us))
    pipeline = h.face().config
    assert pipeline.resolved_state_path.uri == f"{prefix}/_p_state"
    assert all(committed_txn_version(pipeline.for_stream(s).sink_table, "p") == 1 for s in topics)
    assert not any(tmp_path.glob("orders*")), "nothing may land on local disk"


def test_abandoning_a_run_that_landed_one_of_its_tables_keeps_that_part_and_lands_the_rest_once(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    east = kafka_clusters["east"].bootstrap_servers
    h, topics = two_streams(kafka_clusters, spark, tmp_path)
    eu = produce(east, topics["orders-eu"], numbered(range(3)))
    us = produce(east, topics["orders-us"], numbered(range(10, 12)))

    with acting_at("between_tables", crash), pytest.raises(SimulatedCrashError):
        h.runner().run()
    past_the_planned_runs_lease(monkeypatch, h.runner().store)
    # orders-eu holds run 1, orders-us does not: the abandon fences orders-us and marks orders-eu's rows landed.
    h.face().abandon(1, "test: give the run up")
    assert committed_txn_version(tmp_path / "tables" / "orders-eu", "p") == 1
    head = h.runner().store.load().last_run
    assert head is not None
    assert (head.run_seq, head.status) == (1, "abandoned")

    after = h.runner().run()  # reads both ranges again: lands orders-us, skips what orders-eu holds
    assert (after.run_seq, after.status, after.records, after.deduplicated) == (2, "committed", 2, 3)
    assert table_rows(h, "orders-eu") == sorted(rows("east", topics["orders-eu"], eu))
    assert table_rows(h, "orders-us") == sorted(rows("east", topics["orders-us"], us))


def test_a_backfill_merges_each_streams_window_into_its_table_once_across_a_crash_between_two_tables(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> None:
    east = kafka_clusters["east"].bootstrap_servers
    h, topics = two_streams(kafka_clusters, spark, tmp_path)
    t0 = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(hours=2)

    def send(stream: str, *minutes: int) -> list[Record]:
        stamp = [int((t0 + timedelta(minutes=m)).timestamp() * 1000) for m in minutes]
        return produce(
            east,
            topics[stream],
            [Record(value=f"{stream}{m}".encode(), timestamp_ms=t) for m, t in zip(minutes, stamp, strict=True)],
        )

    before = {"orders-eu": send("orders-eu", 1), "orders-us": send("orders-us", 2)}
    window = {"orders-eu": send("orders-eu", 10, 11), "orders-us": send("orders-us", 12)}
    start, end = t0 + timedelta(minutes=5), t0 + timedelta(minutes=30)

    # One read of the window; the backfill dies after orders-eu's MERGE, before orders-us's.
    with acting_at("between_tables", crash), pytest.raises(SimulatedCrashError):
        run_backfill(h.runner().context, start, end)
    assert table_rows(h, "orders-eu") == sorted(rows("east", topics["orders-eu"], window["orders-eu"]))
    assert table_rows(h, "orders-us") == []
    assert h.runner().store.load().backfill_sequence == 1  # the frontier was recorded before the first MERGE

    # Run again, it merges what orders-us lacks and nothing into orders-eu, which holds its window.
    again = run_backfill(h.runner().context, start, end)
    assert again.records == 3
    assert [(t.stream_id, t.records) for t in again.stream_tables] == [("orders-eu", 2), ("orders-us", 1)]
    for stream in topics:
        assert table_rows(h, stream) == sorted(rows("east", topics[stream], window[stream]))

    # The first run reads every offset (a backfill never moves them): it lands the records before the window and,
    # below the frontier, skips every record a stream's table holds.
    first = h.runner().run()
    assert (first.records, first.deduplicated) == (2, 3)
    for stream in topics:
        assert table_rows(h, stream) == sorted(rows("east", topics[stream], before[stream] + window[stream]))


def test_a_dead_letter_replay_lands_each_streams_dead_letters_in_its_table_once_across_a_crash(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> None:
    east = kafka_clusters["east"].bootstrap_servers
    h, topics = two_streams(
        kafka_clusters,
        spark,
        tmp_path,
        value={"format": "json", "schema": "id INT"},
        json_strict=True,
        on_decode_error="dead_letter",
    )
    produce(east, topics["orders-eu"], [Record(value=v) for v in (b'{"id": 1}', b'{"id": 2, "note": "a"}')])
    produce(east, topics["orders-us"], [Record(value=v) for v in (b'{"id": 3, "note": "b"}', b"not json")])
    first = h.runner().run()
    assert (first.records, first.dead_letters) == (4, 3)

    def ids(stream: str, dead: bool = False) -> list[tuple[int, Any]]:
        view = h.face().config.for_stream(stream)
        opened = open_delta_rs(view.dead_letter_table if dead else view.sink_table, doing="reading a stream table")
        if opened is None:
            return []
        found = opened.to_pyarrow_table(columns=["offset", "error" if dead else "value"]).to_pylist()
        return sorted((r["offset"], r["error"] if dead else r["value"]["id"]) for r in found)

    assert (ids("orders-eu"), ids("orders-us")) == ([(0, 1)], [])
    # The field the producers added joins the schema.
    h.configure(value={"format": "json", "schema": "id INT, note STRING"})

    # The first table's replay dies between its sink write and its dead-letter update; orders-us is not reached.
    with acting_at("replay_after_sink", crash), pytest.raises(SimulatedCrashError):
        replay_dead_letters(h.runner().context, run_seq=None, yes=True)
    assert (ids("orders-eu"), ids("orders-us")) == ([(0, 1), (1, 2)], [])

    report = replay_dead_letters(h.runner().context, run_seq=None, yes=True)
    assert (report.dead_letters, report.replay.replayed, report.replay.already_landed) == (3, 1, 1)
    assert report.replay.still_undecodable == 1
    assert (ids("orders-eu"), ids("orders-us")) == ([(0, 1), (1, 2)], [(0, 3)])
    assert ids("orders-eu", dead=True) == []
    assert [offset for offset, _ in ids("orders-us", dead=True)] == [1]  # "not json" stays, with its error
