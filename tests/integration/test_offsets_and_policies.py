"""Offsets initializers, caps and policies through ``PipelineRunner`` on real clusters, Spark and Delta.

Every test asserts the exact rows that land (cluster, topic, partition, offset, value), not counts. Read-only
topics are seeded once per module and shared by the parametrized cases (each case has its own pipeline, sink and
state); a test that produces more records or deletes some gets its own topic.
"""

from __future__ import annotations

import dataclasses
import json
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from deltalake import DeltaTable

from devtools.testing.kafka import Record, commit_group, create_topic, produce, unique_name, wait_for
from devtools.testing.pipeline import PipelineHarness, Row
from dynamic_kafka.decoding.formats import VALUE_NOT_JSON, VALUE_NOT_UTF8, value_type_mismatch
from dynamic_kafka.errors import DataLossError, PlanningError
from dynamic_kafka.model.plan import LostRange
from dynamic_kafka.operations.status import completeness_verdict

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from pathlib import Path

    from devtools.local_kafka import ClusterEndpoint

pytestmark = pytest.mark.integration

# Recent timestamps: a bring-your-own cluster's time retention would delete records dated long ago.
BASE_TS_MS = (int(time.time()) - 3_600) * 1_000
PER_PARTITION = 6


def rows(cluster: str, topic: str, records: Iterable[Record]) -> list[Row]:
    """The sink rows ``records`` must become, sorted like ``PipelineHarness.sink_rows``."""
    out = []
    for r in records:
        assert r.partition is not None
        assert r.offset is not None
        out.append((cluster, topic, r.partition, r.offset, r.value))
    return sorted(out)


def numbered(tag: str, count: int, partition: int | None = None) -> list[Record]:
    return [Record(value=f"{tag}-{i}".encode(), key=f"k{i}".encode(), partition=partition) for i in range(count)]


def harness_for(
    tmp_path: Path, kafka_clusters: dict[str, ClusterEndpoint], spark: Any, **pipeline: Any
) -> PipelineHarness:
    return PipelineHarness(
        tmp_path,
        clusters={name: c.bootstrap_servers for name, c in kafka_clusters.items()},
        spark=lambda: spark,
        **pipeline,
    )


def state_version(harness: PipelineHarness) -> int | None:
    return harness.runner().store.load().table_version


def sink_version(harness: PipelineHarness) -> int:
    return DeltaTable(str(harness.sink_path)).version()


def east_pipeline(
    kafka_clusters: dict[str, ClusterEndpoint],
    spark: Any,
    tmp_path: Path,
    prefix: str,
    partitions: int,
    **pipeline: Any,
) -> tuple[str, str, PipelineHarness]:
    """A fresh topic on east and a pipeline whose stream ``orders`` is that topic: (bootstrap, topic, harness)."""
    east = kafka_clusters["east"].bootstrap_servers
    topic = unique_name(prefix)
    create_topic(east, topic, partitions)
    harness = harness_for(tmp_path, kafka_clusters, spark, **pipeline)
    harness.set_streams({"orders": {"east": [topic]}})
    return east, topic, harness


# --- 2. starting offsets initializers ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Seeded:
    """A read-only 2-partition topic on east: partition 0's timestamps are BASE + i s, partition 1's BASE + 1.5 s
    + i s. Group ``partial`` committed partition 0 at 2 only; group ``full`` committed 0 at 4 and 1 at 1."""

    topic: str
    records: tuple[Record, ...]
    partial: str
    full: str

    def from_offsets(self, first: dict[int, int]) -> list[Row]:
        """Rows of the records at or after ``first[partition]`` in each partition."""
        return [row for row in rows("east", self.topic, self.records) if row[3] >= first[row[2]]]


@pytest.fixture(scope="module")
def seeded(kafka_clusters: dict[str, ClusterEndpoint]) -> Seeded:
    east = kafka_clusters["east"].bootstrap_servers
    topic = unique_name("initializers")
    create_topic(east, topic, 2)
    sent = produce(
        east,
        topic,
        [
            Record(value=f"p{p}-{i}".encode(), partition=p, timestamp_ms=BASE_TS_MS + p * 1_500 + i * 1_000)
            for p in (0, 1)
            for i in range(PER_PARTITION)
        ],
    )
    partial, full = unique_name("group-partial"), unique_name("group-full")
    commit_group(east, partial, {(topic, 0): 2})
    commit_group(east, full, {(topic, 0): 4, (topic, 1): 1})
    return Seeded(topic=topic, records=tuple(sent), partial=partial, full=full)


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat().replace("+00:00", "Z")


END = PER_PARTITION  # a start at the partition's latest offset selects nothing
INITIALIZER_CASES: list[tuple[str, Callable[[Seeded], Any], dict[int, int]]] = [
    ("earliest", lambda s: "earliest", {0: 0, 1: 0}),
    # First offset with timestamp >= BASE + 3 s: 3 on partition 0 (BASE + 3 s), 2 on partition 1 (BASE + 3.5 s).
    ("timestamp", lambda s: {"timestamp": iso(BASE_TS_MS + 3_000)}, {0: 3, 1: 2}),
    ("committed-reset-earliest", lambda s: {"committed": {"group_id": s.partial, "reset": "earliest"}}, {0: 2, 1: 0}),
    ("committed-reset-latest", lambda s: {"committed": {"group_id": s.partial, "reset": "latest"}}, {0: 2, 1: END}),
    ("committed-reset-none", lambda s: {"committed": {"group_id": s.full, "reset": "none"}}, {0: 4, 1: 1}),
    (
        "specific-fallback-latest",
        lambda s: {"specific": {"offsets": {s.topic: {0: 4}}, "fallback": "latest"}},
        {0: 4, 1: END},
    ),
    ("specific-fallback-earliest", lambda s: {"specific": {"offsets": {s.topic: {1: 5}}}}, {0: 0, 1: 5}),
]


@pytest.mark.parametrize(
    ("starting", "first"), [(c[1], c[2]) for c in INITIALIZER_CASES], ids=[c[0] for c in INITIALIZER_CASES]
)
def test_starting_initializer_selects_exactly_the_expected_records(
    seeded: Seeded,
    kafka_clusters: dict[str, ClusterEndpoint],
    spark: Any,
    tmp_path: Path,
    starting: Callable[[Seeded], Any],
    first: dict[int, int],
) -> None:
    harness = harness_for(tmp_path, kafka_clusters, spark, starting_offsets=starting(seeded))
    harness.set_streams({"orders": {"east": [seeded.topic]}})

    summary = harness.face().run()

    assert harness.sink_rows() == seeded.from_offsets(first)
    assert summary.records == len(seeded.from_offsets(first))
    positions = {p.partition: p.next_offset for p in harness.face().offsets().partitions}
    assert positions == {0: END, 1: END}
    assert harness.face().run().status == "empty"


def test_committed_with_reset_none_fails_for_a_partition_the_group_never_committed(
    seeded: Seeded, kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> None:
    harness = harness_for(
        tmp_path, kafka_clusters, spark, starting_offsets={"committed": {"group_id": seeded.partial, "reset": "none"}}
    )
    harness.set_streams({"orders": {"east": [seeded.topic]}})

    with pytest.raises(PlanningError) as raised:
        harness.face().run()

    assert f"east/{seeded.topic}[1]" in str(raised.value)
    assert repr(seeded.partial) in str(raised.value)
    assert "'none'" in str(raised.value)
    assert not harness.sink_path.exists()
    assert not (tmp_path / "sink_state").exists()


def test_latest_reads_only_newer_records_and_a_cluster_override_beats_the_pipeline_default(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> None:
    east, west = kafka_clusters["east"].bootstrap_servers, kafka_clusters["west"].bootstrap_servers
    t_east, t_west = unique_name("latest"), unique_name("override")
    create_topic(east, t_east, 2)
    create_topic(west, t_west, 1)
    old_east = produce(east, t_east, numbered("e-old", 4))
    old_west = produce(west, t_west, numbered("w-old", 3))
    harness = harness_for(tmp_path, kafka_clusters, spark, starting_offsets="latest")
    harness.set_cluster("west", bootstrap_servers=west, starting_offsets="earliest")
    harness.set_streams({"orders": {"east": [t_east], "west": [t_west]}})

    first = harness.face().run()

    assert harness.sink_rows() == rows("west", t_west, old_west)
    assert first.records == len(old_west)
    # East's records were not read, but its partitions are pinned at latest: the next run must not skip ahead.
    pinned = {(p.cluster_id, p.partition): p.next_offset for p in harness.face().offsets().partitions}
    east_latest = {("east", p): sum(1 for r in old_east if r.partition == p) for p in (0, 1)}
    assert pinned == {**east_latest, ("west", 0): len(old_west)}

    new_east = produce(east, t_east, numbered("e-new", 3))
    new_west = produce(west, t_west, numbered("w-new", 2))
    second = harness.face().run()

    assert second.records == len(new_east) + len(new_west)
    assert harness.sink_rows() == sorted(rows("west", t_west, old_west + new_west) + rows("east", t_east, new_east))


def test_each_cluster_gets_its_own_group_commit_and_a_refusing_cluster_does_not_stop_the_others(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> None:
    east, west = kafka_clusters["east"].bootstrap_servers, kafka_clusters["west"].bootstrap_servers
    t_east, t_west = unique_name("grp-east"), unique_name("grp-west")
    create_topic(east, t_east, 1)
    create_topic(west, t_west, 2)
    produced_east = produce(east, t_east, numbered("e", 3))
    produced_west = produce(west, t_west, numbered("w0", 2, partition=0) + numbered("w1", 3, partition=1))
    group = unique_name("monitor")
    harness = harness_for(tmp_path, kafka_clusters, spark, consumer_group=group)
    harness.set_streams({"orders": {"east": [t_east], "west": [t_west]}})
    # An active member of the group on east: the broker refuses offsets from outside the group there.
    member = Consumer({"bootstrap.servers": east, "group.id": group, "enable.auto.commit": False})
    member.subscribe([t_east])
    deadline = time.monotonic() + 60
    while not member.assignment() and time.monotonic() < deadline:
        member.poll(0.2)
    assert member.assignment(), "the group member never got its partition"
    try:
        summary = harness.face().run()
    finally:
        member.close()

    assert summary.records == len(produced_east) + len(produced_west)
    assert [(c.cluster_id, c.group, c.committed) for c in summary.group_commits] == [
        ("east", group, False),
        ("west", group, True),
    ]
    assert summary.group_commits[0].error
    admin = AdminClient({"bootstrap.servers": west})  # kept referenced: a collected client never answers
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(t_west, p) for p in (0, 1)])
    committed = admin.list_consumer_group_offsets([request])[group].result(timeout=30)
    assert {tp.partition: tp.offset for tp in committed.topic_partitions} == {0: 2, 1: 3}


# --- 3. caps --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def backlog(kafka_clusters: dict[str, ClusterEndpoint]) -> tuple[str, list[Record]]:
    """A read-only topic with 5 records on partition 0 and 3 on partition 1."""
    east = kafka_clusters["east"].bootstrap_servers
    topic = unique_name("backlog")
    create_topic(east, topic, 2)
    return topic, produce(east, topic, numbered("a", 5, partition=0) + numbered("b", 3, partition=1))


@pytest.mark.parametrize(("cap", "limit"), [("max_records_per_partition", 2), ("max_records_per_run", 3)])
def test_a_capped_backlog_drains_over_several_runs_without_gap_or_duplicate(
    backlog: tuple[str, list[Record]],
    kafka_clusters: dict[str, ClusterEndpoint],
    spark: Any,
    tmp_path: Path,
    cap: str,
    limit: int,
) -> None:
    topic, sent = backlog
    harness = harness_for(tmp_path, kafka_clusters, spark, **{cap: limit})
    harness.set_streams({"orders": {"east": [topic]}})
    pending = {0: 5, 1: 3}
    landed: dict[int, int] = {0: 0, 1: 0}
    runs = 0

    while sum(pending.values()):
        runs += 1
        assert runs <= 4, "the backlog should drain in 3 runs"
        summary = harness.face().run()

        got = harness.sink_rows()
        assert len(got) == len(set(got)), "a record landed twice"
        now = {p: sum(1 for r in got if r[2] == p) for p in pending}
        read = {p: now[p] - landed[p] for p in pending}
        if cap == "max_records_per_partition":
            assert read == {p: min(limit, n) for p, n in pending.items()}
        else:
            assert sum(read.values()) == min(limit, sum(pending.values()))
        pending = {p: pending[p] - read[p] for p in pending}
        landed = now
        # No gap: each partition's landed records are exactly its first ones.
        assert got == sorted(r for r in rows("east", topic, sent) if r[3] < landed[r[2]])
        assert summary.records == sum(read.values())
        assert summary.capped == bool(sum(pending.values()))
        assert summary.lag_after == sum(pending.values())
        assert any(f.kind == "capped" for f in summary.findings) == summary.capped

    assert runs == 3
    assert harness.sink_rows() == rows("east", topic, sent)
    final = harness.face().run()
    assert (final.status, final.spark_started, final.capped) == ("empty", False, False)


# --- 6. retention loss -------------------------------------------------------------------------------------------


def test_deleted_records_below_the_committed_offset_fail_the_run_or_are_skipped_and_reported(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> None:
    east, topic, harness = east_pipeline(kafka_clusters, spark, tmp_path, "retention", 2)
    first = produce(east, topic, numbered("a", 5, partition=0) + numbered("b", 5, partition=1))
    harness.face().run()
    second = produce(east, topic, numbered("c", 5, partition=0) + numbered("d", 5, partition=1))
    # Partition 0's committed offset is 5; deleting below 7 loses offsets 5 and 6 before they were read.
    admin = AdminClient({"bootstrap.servers": east})  # referenced until its future is done
    (deleted,) = admin.delete_records([TopicPartition(topic, 0, 7)]).values()
    assert deleted.result(timeout=30).low_watermark == 7
    sink_before, state_before, rows_before = sink_version(harness), state_version(harness), harness.sink_rows()

    with pytest.raises(DataLossError) as raised:
        harness.face().run()

    assert raised.value.losses == (LostRange(cluster_id="east", topic=topic, partition=0, from_offset=5, to_offset=7),)
    assert f"east/{topic}[0] lost offsets [5, 7)" in str(raised.value)
    assert "on_data_loss: skip" in str(raised.value)
    assert (sink_version(harness), state_version(harness)) == (sink_before, state_before)
    assert harness.sink_rows() == rows_before == rows("east", topic, first)

    harness.configure(on_data_loss="skip")
    skipped = harness.face().run()

    survivors = [r for r in second if r.partition == 1 or (r.offset is not None and r.offset >= 7)]
    assert harness.sink_rows() == rows("east", topic, first + survivors)
    assert skipped.records == len(survivors)
    gap = [(f.cluster_id, f.topic, f.partition, f.from_offset, f.to_offset) for f in skipped.warnings]
    assert gap == [("east", topic, 0, 5, 7)]
    assert [f.kind for f in skipped.warnings] == ["data_loss"]

    status = harness.cli("status", "--json")
    assert status.returncode == 0, status.stderr
    warnings = json.loads(status.stdout)["warnings"]
    assert [
        (w["kind"], w["cluster_id"], w["topic"], w["partition"], w["from_offset"], w["to_offset"]) for w in warnings
    ] == [("data_loss", "east", topic, 0, 5, 7)]


# --- 7. transactions ---------------------------------------------------------------------------------------------


def produce_transaction(producer: Producer, topic: str, values: list[bytes], *, commit: bool) -> list[Record]:
    """One transaction of ``values`` on partition 0, flushed to the log, then committed or aborted."""
    delivered: list[Record] = []

    def report(err: Any, msg: Any) -> None:
        assert err is None, err
        delivered.append(Record(value=msg.value(), partition=msg.partition(), offset=msg.offset()))

    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value=value, partition=0, on_delivery=report)
    assert producer.flush(30) == 0
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)
    assert len(delivered) == len(values)
    return delivered


def test_aborted_transactions_are_skipped_and_a_trailing_commit_marker_is_not_read_again(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> None:
    east, topic, harness = east_pipeline(kafka_clusters, spark, tmp_path, "txn", 1)
    producer = Producer({"bootstrap.servers": east, "transactional.id": unique_name("txn-producer")})
    producer.init_transactions(30)
    committed = produce_transaction(producer, topic, [b"a0", b"a1", b"a2"], commit=True)
    aborted = produce_transaction(producer, topic, [b"b0", b"b1", b"b2"], commit=False)
    committed += produce_transaction(producer, topic, [b"c0", b"c1"], commit=True)
    # Offsets: a0-a2 0..2, commit marker 3, b0-b2 4..6, abort marker 7, c0-c1 8..9, commit marker 10.
    assert [r.offset for r in committed] == [0, 1, 2, 8, 9]
    assert [r.offset for r in aborted] == [4, 5, 6]

    first = harness.face().run()

    assert first.status == "committed"
    assert harness.sink_rows() == rows("east", topic, committed)
    assert first.records == len(committed)
    # Completeness: of the 11 planned offsets Kafka returned the 5 committed records, all landed; the 3 commit and
    # abort markers and the 3 aborted records are skipped by Kafka, not a mismatch.
    assert first.completeness is not None
    (counted,) = first.completeness.partitions
    assert (counted.planned, counted.read, counted.landed, counted.skipped, counted.matches) == (11, 5, 5, 6, True)
    verdict = completeness_verdict(harness.face().status())
    assert verdict.passed
    assert "planned 11 offsets in 1 range(s), read 5, landed 5, deduplicated 0, skipped by Kafka 6" in (
        verdict.description
    )
    # The next offset is the planned stop, past the trailing commit marker (not max(offset) + 1 = 10).
    assert [p.next_offset for p in harness.face().offsets().partitions] == [11]
    second = harness.face().run()
    assert (second.status, second.spark_started, second.records) == ("empty", False, 0)
    assert harness.sink_rows() == rows("east", topic, committed)


# A compacted topic whose cleaner runs within seconds: segments roll after 100 ms, any dirty share is worth cleaning,
# and records are cleanable at once (the test cluster's log.cleaner.backoff.ms is 1 s: devtools/local_kafka).
FAST_COMPACTION = {
    "cleanup.policy": "compact",
    "segment.ms": "100",
    "min.cleanable.dirty.ratio": "0.01",
    "min.compaction.lag.ms": "0",
    "delete.retention.ms": "100",
}


def records_in(bootstrap: str, topic: str) -> list[int]:
    """The offsets partition 0 of ``topic`` still holds, read from the beginning to the high watermark."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("count"), "enable.auto.commit": False})
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, 0)])
        offsets: list[int] = []
        while not offsets or offsets[-1] < high - 1:
            message = consumer.poll(5)
            assert message is not None, f"no record of {topic} below its high watermark {high} within 5 s"
            assert message.error() is None, message.error()
            offsets.append(message.offset())
        return offsets
    finally:
        consumer.close()


def test_offsets_compacted_away_are_skipped_by_kafka_and_every_keys_latest_value_lands_once(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> None:
    east = kafka_clusters["east"].bootstrap_servers
    topic = unique_name("compacted")
    create_topic(east, topic, 1, config=FAST_COMPACTION)
    harness = harness_for(tmp_path, kafka_clusters, spark)
    harness.set_streams({"orders": {"east": [topic]}})
    versions = [
        Record(key=f"k{k}".encode(), value=f"k{k}-v{v}".encode(), partition=0) for v in range(3) for k in range(4)
    ]
    sent = produce(east, topic, versions)  # offsets 0..11: three versions of k0..k3
    time.sleep(0.2)  # older than segment.ms: the next record rolls a new segment, so the cleaner may clean these
    sent += produce(east, topic, [Record(key=b"roll", value=b"roll", partition=0)])
    latest = [r for r in sent if r.offset is not None and r.offset >= 8]  # v2 of each key, and the roll record
    wait_for(
        lambda: records_in(east, topic) == [8, 9, 10, 11, 12], timeout_s=30, what=f"the log cleaner to compact {topic}"
    )

    summary = harness.face().run()

    assert summary.status == "committed"
    assert harness.sink_rows() == rows("east", topic, latest)  # once each: no key's older version, nothing twice
    assert summary.completeness is not None
    (counted,) = summary.completeness.partitions
    # Of the 13 planned offsets Kafka returned the 5 the cleaner kept; the 8 older versions are skipped, not missing.
    assert (counted.planned, counted.read, counted.landed, counted.skipped, counted.matches) == (13, 5, 5, 8, True)
    verdict = completeness_verdict(harness.face().status())
    assert verdict.passed
    assert "planned 13 offsets in 1 range(s), read 5, landed 5, deduplicated 0, skipped by Kafka 8" in (
        verdict.description
    )


# --- 8. JSON values and dead letters ------------------------------------------------------------------------------


def test_json_values_are_parsed_and_undecodable_ones_land_in_the_dead_letter_table(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> None:
    east, topic, harness = east_pipeline(
        kafka_clusters, spark, tmp_path, "json", 2, value={"format": "json", "schema": "id INT, name STRING"}
    )
    valid = {
        b'{"id": 1, "name": "ann"}': {"id": 1, "name": "ann"},
        b'{"id": 2, "name": "bob", "extra": true}': {"id": 2, "name": "bob"},
        b'{"id": 3}': {"id": 3, "name": None},
        b'{"name": "dee", "id": 4}': {"id": 4, "name": "dee"},
    }
    invalid = {
        b"not json": VALUE_NOT_JSON,
        b'{"id": "x", "name": "eve"}': value_type_mismatch("id", "int"),
        b"\xff\xfe{}": VALUE_NOT_UTF8,
    }
    values = [*valid, *invalid]
    sent = produce(east, topic, [Record(value=v, partition=i % 2) for i, v in enumerate(values)])

    summary = harness.face().run()

    good = [r for r in sent if r.value in valid]
    bad = [r for r in sent if r.value in invalid]
    # Completeness counts a dead letter as landed: every record read is in one of the two tables.
    assert summary.completeness is not None
    assert [(p.partition, p.read, p.landed, p.skipped) for p in summary.completeness.partitions] == [
        (0, 4, 4, 0),
        (1, 3, 3, 0),
    ]
    assert harness.sink_rows() == [(c, t, p, o, valid[v]) for c, t, p, o, v in rows("east", topic, good) if v]
    dead = DeltaTable(str(tmp_path / "sink_dead_letter")).to_pyarrow_table().to_pylist()
    landed = sorted((d["cluster"], d["topic"], d["partition"], d["offset"], d["value"], d["error"]) for d in dead)
    assert landed == [(*row, invalid[row[4]]) for row in rows("east", topic, bad) if row[4]]
    assert {d["stream"] for d in dead} == {"orders"}
    assert (summary.records, summary.dead_letters) == (len(sent), len(bad))
    assert len(harness.sink_rows()) + len(dead) == len(sent)
