"""Bootstrap from an archive (issue 27, item 1): the first run lands an archive's rows before `until` and reads
Kafka from the first offset at or after `until`, in one append: exactly once across a crash after the sink's
commit, on the real broker, Spark and Delta.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from devtools.testing.kafka import Record, create_topic, produce, unique_name
from dynamic_kafka._toolchain.process import free_port
from dynamic_kafka.cli.main import main
from dynamic_kafka.errors import ArchiveChangedError, ConfigError
from dynamic_kafka.faults import acting_at
from dynamic_kafka.sink import committed_txn_version
from dynamic_kafka.sink.tables import open_delta_rs
from tests.support.clock import past_the_planned_runs_lease
from tests.support.metadata_changes import harness

if TYPE_CHECKING:
    from pathlib import Path

    from devtools.local_kafka import ClusterEndpoint
    from devtools.testing.pipeline import PipelineHarness

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

UNTIL = datetime(2026, 1, 1, tzinfo=UTC)
UNTIL_MS = int(UNTIL.timestamp() * 1000)


class SimulatedCrashError(Exception):
    """Raised at a fault point: the run stops there, as a killed process would, leaving its plan planned."""


def write_archive(folder: Path) -> None:
    """Two Parquet files: a0..a3 before `until`, a4 at it (Kafka holds it: must not land from the archive)."""
    folder.mkdir()
    for part, numbers in enumerate([(0, 1), (2, 3, 4)]):
        times = [datetime.fromtimestamp((UNTIL_MS + (n - 4) * 1000) / 1000, tz=UTC) for n in numbers]
        table = pa.table(
            {
                "payload": [f"a{n}" for n in numbers],
                "event_time": pa.array(times, type=pa.timestamp("ms", tz="UTC")),
                "note": ["x"] * len(numbers),
            }
        )
        pq.write_table(table, folder / f"part-{part}.parquet")


def history_topic(kafka_clusters: dict[str, ClusterEndpoint], partitions: int) -> tuple[str, str]:
    """A new topic on the east cluster: its bootstrap servers and name."""
    east = kafka_clusters["east"].bootstrap_servers
    topic = unique_name("history")
    create_topic(east, topic, partitions)
    return east, topic


def mapped_bootstrap(folder: Path) -> dict[str, Any]:
    """The bootstrap of the archive :func:`write_archive` wrote, its columns mapped."""
    return {
        "path": str(folder),
        "format": "parquet",
        "until": UNTIL.isoformat(),
        "columns": {"value": "payload", "timestamp": "event_time"},
        "ignore": ["note"],
    }


def crashed_first_run(
    tmp_path: Path, kafka_clusters: dict[str, ClusterEndpoint], spark: Any, topic: str, at: str
) -> PipelineHarness:
    """A pipeline bootstrapped from :func:`write_archive` whose first run crashed at fault point ``at``."""
    write_archive(tmp_path / "archive")
    h = harness(
        tmp_path,
        kafka_clusters,
        spark,
        bootstrap=mapped_bootstrap(tmp_path / "archive"),
    )
    h.set_streams({"orders": {"east": [topic]}})

    def crash() -> None:
        raise SimulatedCrashError

    with acting_at(at, crash), pytest.raises(SimulatedCrashError):
        h.runner().run()
    assert_run_1_planned(h)
    return h


def assert_run_1_planned(h: PipelineHarness) -> None:
    state = h.runner().store.load()
    assert state.last_run is not None
    assert (state.last_run.run_seq, state.last_run.status) == (1, "planned")


def landed(h: PipelineHarness) -> list[tuple[Any, ...]]:
    """Every sink row as (value, cluster, stream, topic, offset is null), sorted, duplicates kept."""
    opened = open_delta_rs(h.face().config.sink_table, doing="reading the sink")
    assert opened is not None
    table = opened.to_pyarrow_table(columns=["value", "cluster", "stream", "topic", "offset"])
    rows = zip(*(table.column(c).to_pylist() for c in table.column_names), strict=True)
    return sorted((bytes(v), c, s, t, o is None) for v, c, s, t, o in rows)


def test_first_run_lands_archive_then_kafka_from_until_exactly_once_across_a_crash_after_the_sink_commit(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    east, topic = history_topic(kafka_clusters, 2)
    # k0, k1 are older than `until` (the archive holds that time): not read from Kafka; k2..k5 are.
    produce(
        east,
        topic,
        [Record(value=f"k{i}".encode(), timestamp_ms=UNTIL_MS + (i - 2) * 1000, partition=i % 2) for i in range(6)],
    )
    h = crashed_first_run(tmp_path, kafka_clusters, spark, topic, "after_sink")
    assert committed_txn_version(h.sink_path, "p") == 1  # the sink holds run 1: archive and Kafka rows
    past_the_planned_runs_lease(monkeypatch, h.runner().store)

    recovering = h.face().run()
    assert recovering.recovered_run_seq == 1
    archive_rows = [(f"a{n}".encode(), "archive", "orders", None, True) for n in range(4)]
    kafka_rows = [(f"k{i}".encode(), "east", "orders", topic, False) for i in range(2, 6)]
    assert landed(h) == sorted(archive_rows + kafka_rows)

    produce(east, topic, [Record(value=b"k6", partition=0)])
    later = h.face().run()
    assert later.records == 1
    assert later.bootstrap_source is None  # the archive is landed by the first run only
    assert landed(h) == sorted([*archive_rows, *kafka_rows, (b"k6", "east", "orders", topic, False)])


def test_unmappable_columns_are_refused_before_anything_is_written_and_an_archive_lands_over_bounded_runs(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> None:
    _, topic = history_topic(kafka_clusters, 1)
    write_archive(tmp_path / "archive")
    bootstrap = {"path": str(tmp_path / "archive"), "format": "parquet", "until": UNTIL.isoformat()}
    h = harness(tmp_path, kafka_clusters, spark, bootstrap={**bootstrap, "columns": {"value": "payload"}})
    h.set_streams({"orders": {"east": [topic]}})

    with pytest.raises(ConfigError) as refused:
        h.face().run()
    message = str(refused.value)
    assert "no archive column is mapped to `timestamp`" in message
    assert "archive column(s) event_time, note map to no sink column" in message
    assert not h.sink_path.exists()
    assert h.face().status().last_run_status is None

    mapped = {"columns": {"value": "payload", "timestamp": "event_time"}, "ignore": ["note"]}
    h.configure(bootstrap={**bootstrap, **mapped, "max_files_per_run": 1})
    first = h.face().run()
    assert (first.bootstrap_records, first.records) == (2, 2)  # the first file: a0, a1
    assert first.bootstrap_source == f"parquet {tmp_path / 'archive'}"
    second = h.face().run()
    assert (second.bootstrap_records, second.records) == (2, 2)  # the second: a2, a3 (a4 is not before until)
    third = h.face().run()
    assert (third.status, third.bootstrap_source) == ("empty", None)
    assert landed(h) == [(f"a{n}".encode(), "archive", "orders", None, True) for n in range(4)]


def test_an_offsets_reset_between_two_parts_of_an_archive_keeps_landing_its_files_exactly_once(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> None:
    """Issue 35 row 2: the next part is found past the reset's run, and the rewound Kafka range lands once."""
    east, topic = history_topic(kafka_clusters, 1)
    produce(east, topic, [Record(value=f"k{i}".encode(), timestamp_ms=UNTIL_MS + i * 1000) for i in range(3)])
    write_archive(tmp_path / "archive")
    h = harness(
        tmp_path, kafka_clusters, spark, bootstrap={**mapped_bootstrap(tmp_path / "archive"), "max_files_per_run": 1}
    )
    h.set_streams({"orders": {"east": [topic]}})

    assert h.face().run().bootstrap_records == 2  # a0, a1 and k0..k2
    reset = ["offsets", "reset", "--to", "earliest", "--reason", "rewind", "--yes"]
    assert main([*reset, "--config", str(h.config_path), "--pipeline", "p"]) == 0
    second = h.face().run()
    assert second.bootstrap_records == 2  # a2, a3: the chain goes on past the reset
    assert h.face().run().bootstrap_source is None
    archive_rows = [(f"a{n}".encode(), "archive", "orders", None, True) for n in range(4)]
    kafka_rows = [(f"k{i}".encode(), "east", "orders", topic, False) for i in range(3)]
    assert landed(h) == sorted(archive_rows + kafka_rows)


def test_an_archive_file_rewritten_after_the_plan_is_refused_at_the_recovery_with_nothing_written(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 35 row 10: files are pinned by size and modification time, not by name only."""
    _, topic = history_topic(kafka_clusters, 1)
    h = crashed_first_run(tmp_path, kafka_clusters, spark, topic, "after_plan")
    rewritten = pa.table(
        {
            "payload": ["a0", "a1", "late"],
            "event_time": pa.array([UNTIL.replace(year=2025)] * 3, type=pa.timestamp("ms", tz="UTC")),
            "note": ["x"] * 3,
        }
    )
    pq.write_table(rewritten, tmp_path / "archive" / "part-0.parquet")
    past_the_planned_runs_lease(monkeypatch, h.runner().store)

    with pytest.raises(ArchiveChangedError, match=r"part-0\.parquet \(planned \d+ bytes") as refused:
        h.face().run()
    assert "Nothing was written" in str(refused.value)
    assert committed_txn_version(h.sink_path, "p") is None
    assert_run_1_planned(h)


def test_a_kafka_record_after_the_switch_offset_with_a_timestamp_before_until_lands_from_the_archive_only(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> None:
    """Issue 35 row 3: a producer's clock put a3 (which the archive holds) after the first record at `until`."""
    east, topic = history_topic(kafka_clusters, 1)
    out_of_order = [("k0", UNTIL_MS + 1000), ("a3", UNTIL_MS - 1000), ("k2", UNTIL_MS + 2000)]
    produce(east, topic, [Record(value=v.encode(), timestamp_ms=ts) for v, ts in out_of_order])
    write_archive(tmp_path / "archive")
    h = harness(tmp_path, kafka_clusters, spark, bootstrap=mapped_bootstrap(tmp_path / "archive"))
    h.set_streams({"orders": {"east": [topic]}})

    first = h.face().run()
    archive_rows = [(f"a{n}".encode(), "archive", "orders", None, True) for n in range(4)]
    kafka_rows = [(f"k{i}".encode(), "east", "orders", topic, False) for i in (0, 2)]
    assert landed(h) == sorted(archive_rows + kafka_rows)
    assert first.records == 6
    produce(east, topic, [Record(value=b"late", timestamp_ms=UNTIL_MS - 500)])  # produced after the bootstrap
    assert h.face().run().records == 1, "a record newer than the archive is Kafka's, whatever its timestamp"


def test_a_cluster_skipped_by_the_bootstrap_run_starts_at_until_when_it_comes_back(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> None:
    """The archive holds both clusters' history before `until`; west is unreachable during the first run, so its
    first read is a later run's: it starts at `until` too, and every record lands once."""
    east, west = (kafka_clusters[name].bootstrap_servers for name in ("east", "west"))
    topics = {"east": unique_name("history-east"), "west": unique_name("history-west")}
    for name, servers in (("east", east), ("west", west)):
        create_topic(servers, topics[name], 1)
        produce(
            servers,
            topics[name],
            [Record(value=f"{name}{i}".encode(), timestamp_ms=UNTIL_MS + (i - 2) * 1000) for i in range(4)],
        )
    folder = tmp_path / "archive"
    folder.mkdir()
    history = [f"{name}{i}" for name in topics for i in range(2)]  # what Kafka holds before `until`
    times = [datetime.fromtimestamp((UNTIL_MS + (int(v[-1]) - 2) * 1000) / 1000, tz=UTC) for v in history]
    pq.write_table(
        pa.table({"value": history, "timestamp": pa.array(times, type=pa.timestamp("ms", tz="UTC"))}),
        folder / "part-0.parquet",
    )
    h = harness(
        tmp_path,
        kafka_clusters,
        spark,
        skip_unreachable_clusters=True,
        kafka_timeout_seconds=3,
        bootstrap={"path": str(folder), "format": "parquet", "until": UNTIL.isoformat()},
    )
    h.set_cluster("west", bootstrap_servers=f"127.0.0.1:{free_port()}")  # nothing listens there
    h.set_streams({"orders": {name: [topic] for name, topic in topics.items()}})

    first = h.face().run()
    assert first.skipped_clusters == ("west",)
    h.set_cluster("west", bootstrap_servers=west)
    back = h.face().run()

    assert back.records == 2
    values = sorted(bytes(row[0]).decode() for row in landed(h))
    assert values == sorted(f"{name}{i}" for name in topics for i in range(4))
