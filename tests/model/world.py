"""A simulated world for the model-based protocol test: Kafka clusters, a Delta sink keyed by transaction version,
and the smallest adapter that runs the REAL ``PipelineRunner`` (recovery, planner, state store, commit order)
against them.

What is simulated, and how closely:

* Brokers (``World``): clusters with a bootstrap address and an up/down switch; topics with a topic id and
  partitions; a partition is a log ``offset -> Record`` with ``earliest`` (log start) and ``end`` (high
  watermark). Transaction markers take an offset and hold no record; compaction removes records and leaves gaps;
  retention moves ``earliest``; truncation (an unclean leader election) moves the end back and the next records
  reuse the offsets; deleting a topic and creating it again gives a new topic id (any partition count). Each
  partition has a leader epoch and the leader's epoch cache (epoch -> start offset): a leader change, clean or
  unclean, starts a new epoch at the new leader's log end, and the end offset of an epoch is answered like
  Kafka's OffsetForLeaderEpoch (the start of the next epoch the leader knows).
  Every record keeps a unique ``uid`` and, once it leaves the log, why (``retention``, ``compacted``, ``deleted``).
  ``take_broker_snapshot`` answers ``ClusterRequest``s like ``dynamic_kafka.kafka.snapshot`` does (unreachable required
  clusters raise ``ClusterUnreachableError``, best-effort ones are recorded unreachable; the committed positions
  the real ``epoch_checks`` selects are checked against the epoch cache, like librdkafka's KIP-320 validation).
  ``read_splits`` reads by topic NAME like Spark's Kafka source, with ``failOnDataLoss`` on: a range below
  ``earliest``, beyond the end, or of a vanished partition fails the job.
* The sink (``SinkModel``): two tables (sink, dead letters) of rows carrying the record uid, each with Delta's
  idempotent-write txn: ``append(app, version)`` is skipped when ``version <= txn[app]`` (Delta's rule).
  The steps that call Spark in the product run here through the product's own functions over a port the model's
  tables implement, storing rows by Delta's rules and deciding nothing (docs/decisions/0085-model-ports.md): a run's
  write (``incremental.writer_for``, ``skip_backfilled``, ``holds_run`` over ``_ModelTables``; rows are lazy
  ``Frame``s whose anti-joins are read inside the job that uses them), a backfill's MERGEs (``merge.merge_tables``
  over ``_ModelMerges``; ``merge_table`` inserts rows whose coordinates are absent), a replay (``replay.replay_steps``
  over ``_ModelReplay``) and maintenance (``compaction.maintain_table`` with the lake's ``compact``/``vacuum``).
  The decode verdict is the
  config's at write time (value format json: a record that is not JSON, and under ``json_strict`` one with an extra
  field). Other writers: a foreign commit (OPTIMIZE, DELETE, VACUUM, a MERGE) may take the version of the next run
  append, which then vanishes (delta-spark's check-then-write log stores); an append whose client was killed while
  it ran is an ``Orphan`` the server may still commit at any later step (as may a stalled backfill MERGE).
* ``Harness`` builds a real ``PipelineRunner`` over a real ``StateStore`` (delta-rs on a temp dir) and an
  ``InMemoryMetadataService``, and swaps in the world for the few module functions that reach Kafka, Spark or the
  sink's Delta log, only while a run or backfill executes; a backfill is the real ``run_backfill``. A crash
  (``Crash``, a BaseException the runner cannot catch) can be injected at any numbered crash point of a call: after
  the plan is written, while the dead-letter or the sink append runs, between them, after the sink append, after
  the state commit, and the same points of a recovery. Another actor can act at any of those points instead
  (``Crasher.arm``'s actions). The run's ``LeaseKeeper`` renews only when the model makes a renewal fail
  (``Harness.lease_faults``), in step with the crash points; ``Harness.on_other_machine`` is the same pipeline run
  by a process of another machine.
* A table per stream (``Lake``): with a ``{stream}`` sink, one ``SinkModel`` pair per stream, each path the product
  names routed to its pair; the reader's ``stream`` column is each record's own split's stream, and the product's
  ``per_stream.for_each_table`` filters the model's frames by it (``Frame.where``, ``ModelColumn``).
* Spark Connect (``ConnectServer``): the project's ``spark.remote`` is the model's server, which stands in for
  pyspark's session builder, so runs attach to the pipeline's shared session through the product's own
  ``spark/remote.py`` (generations, the check of a cached session). The server may close every session (idle past
  its timeout) and refuses a closed id for good; a job of a closed session fails, one running then may land later.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pyspark.sql as pyspark_sql
import pyspark.sql.functions as pyspark_functions
from pyspark.sql.connect.session import SparkSession as ConnectSession

from dynamic_kafka import clock as clock_module
from dynamic_kafka import sink as sink_package
from dynamic_kafka.config.models import PipelineConfig, ProjectConfig
from dynamic_kafka.errors import (
    ClusterUnreachableError,
    CommitOverwrittenError,
    SparkJobError,
    StateError,
    UndecodableRecordError,
)
from dynamic_kafka.initializers import (
    CommittedOffsets,
    CustomOffsets,
    PartitionBounds,
    SpecificOffsets,
    TimestampOffsets,
)
from dynamic_kafka.kafka.client import OffsetAnswer, TopicDescription
from dynamic_kafka.kafka.custom_offsets import resolve_custom
from dynamic_kafka.kafka.snapshot import epoch_checks
from dynamic_kafka.metadata.memory import InMemoryMetadataService
from dynamic_kafka.metadata.models import ClusterMetadata, KafkaStream
from dynamic_kafka.model.plan import TopicPartition
from dynamic_kafka.model.snapshots import (
    BrokerSnapshot,
    ClusterSnapshot,
    PartitionOffsets,
    StateSnapshot,
    TopicSnapshot,
)
from dynamic_kafka.operations import backfill as backfill_module
from dynamic_kafka.operations import maintain as maintain_module
from dynamic_kafka.operations import offsets_reset as offset_reset_module
from dynamic_kafka.operations import replay as dead_letters_module
from dynamic_kafka.pipeline import Pipeline
from dynamic_kafka.protocol import abandon as abandon_module
from dynamic_kafka.protocol import context as context_module
from dynamic_kafka.protocol import guard as run_guard_module
from dynamic_kafka.protocol import realign as realign_module
from dynamic_kafka.protocol import recovery as recovery_module
from dynamic_kafka.protocol import run as runner_module
from dynamic_kafka.sink import compaction as compaction_module
from dynamic_kafka.sink import incremental as incremental_module
from dynamic_kafka.sink import per_stream as per_stream_module
from dynamic_kafka.sink import redecode as replay_module
from dynamic_kafka.sink import schema_check as schema_check_module
from dynamic_kafka.sink.commits import Commit
from dynamic_kafka.sink.compaction import FileCounts, TableFiles
from dynamic_kafka.sink.merge import merge_tables
from dynamic_kafka.sink.metrics import WriteResult
from dynamic_kafka.sink.redecode import ReplayCounts, replay_outcome, replay_steps
from dynamic_kafka.spark import bootstrap_archive as archive_module
from dynamic_kafka.spark import reader as reader_module
from dynamic_kafka.spark import remote as remote_module
from dynamic_kafka.spark.connect_token import TOKEN_ENV
from dynamic_kafka.spark.deadline import RunDeadline
from dynamic_kafka.state.lease import LeaseKeeper, RunOwner

if TYPE_CHECKING:
    import threading
    from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
    from pathlib import Path

    from dynamic_kafka.kafka.snapshot import ClusterRequest
    from dynamic_kafka.metadata.snapshot import MetadataSnapshot
    from dynamic_kafka.model.plan import ArchiveRead, Plan, Split
    from dynamic_kafka.model.summary import RunSummary
    from dynamic_kafka.operations.maintain import MaintenanceSummary
    from dynamic_kafka.operations.offsets_reset import OffsetReset, ResetSelection, ResetTarget
    from dynamic_kafka.operations.replay import ReplayReport
    from dynamic_kafka.protocol.realign import Realignment
    from dynamic_kafka.state import StateStore
    from dynamic_kafka.state.owner import OwnerOperation

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)

# Counts the runner invocations of every harness (all share one state table in some replays): see Harness.patched.
_INVOCATIONS = itertools.count(1)

# Open holes, each named after the item of the issue that fixes it (issue 11's and issue 24's are all fixed). A
# name gates the model's rules or oracle so the suite passes until its fix lands (see tests/model/HOLES.md); the fix
# removes the name, and the model then drives the hole's scenario and checks the fixed behaviour.
KNOWN_HOLES: frozenset[str] = frozenset()

JSON_VALUE = {"format": "json", "schema": "id INT"}
"""The pipeline's value format unless a rule edits it: JSON of one INT field (see ``Record.bad`` and ``lax``)."""


def new_day() -> int:
    """A new invocation's day (see ``Harness.patched``); two processes running at once share one."""
    return next(_INVOCATIONS)


class Crash(BaseException):
    """A simulated ``kill -9`` at a crash point: no ``except Exception`` in the library can catch it."""


# ------------------------------------------------------------------------------------------------------ brokers


@dataclass(eq=False)
class Record:
    uid: int
    cluster_id: str
    topic: str
    topic_id: str
    partition: int
    offset: int
    ts_ms: int
    bad: bool = False  # not JSON at all: undecodable under value format json
    gone: str | None = None  # why it left the log: retention, compacted, deleted
    lax: bool = False  # JSON with a field the value schema lacks: undecodable only under json_strict
    identity: int = 0  # the record a mirrored copy was copied from (MirrorMaker keeps value and timestamp)

    def __post_init__(self) -> None:
        self.identity = self.identity or self.uid


@dataclass(eq=False)
class WPartition:
    log: dict[int, Record] = field(default_factory=dict)
    history: dict[int, Record] = field(default_factory=dict)  # every record ever written, gone ones included
    earliest: int = 0
    end: int = 0
    # The leader's epoch cache, (epoch, start offset) ascending; the last entry is the current leader epoch.
    epochs: list[tuple[int, int]] = field(default_factory=lambda: [(0, 0)])
    truncations: list[tuple[int, int]] = field(default_factory=list)  # (new end, old end) of each truncation

    @property
    def epoch(self) -> int:
        return self.epochs[-1][0]

    def new_leader(self) -> None:
        """A leader change: the new leader starts the next epoch (numbered by the controller, so never reused) at
        its log end; it never had the epochs that started beyond its end."""
        following = self.epoch + 1
        self.epochs = [(e, start) for e, start in self.epochs if start <= self.end]
        self.epochs.append((following, self.end))

    def end_offset_for(self, epoch: int) -> int | None:
        """OffsetForLeaderEpoch: the end of ``epoch`` in this log (where a later epoch starts; the log end for the
        current one); None when the leader knows no epoch above it (Kafka's UNDEFINED answer)."""
        if epoch == self.epoch:
            return self.end
        return next((start for e, start in self.epochs if e > epoch), None)


@dataclass(eq=False)
class WTopic:
    name: str
    topic_id: str
    partitions: list[WPartition]
    deleted: bool = False


@dataclass(eq=False)
class WCluster:
    cluster_id: str
    bootstrap: str
    up: bool = True
    topics: dict[str, WTopic] = field(default_factory=dict)


class World:
    """Every cluster, topic and record; topics keep their records after deletion (flagged), for the oracle."""

    def __init__(self) -> None:
        self.clusters: dict[str, WCluster] = {}
        self.by_topic_id: dict[str, WTopic] = {}
        self.records: dict[int, Record] = {}
        self._uids = itertools.count(1)
        self._topic_ids = itertools.count(1)
        self.clock_ms = epoch_ms(EPOCH)
        self.recreated: set[tuple[str, str]] = set()
        self.max_partitions: dict[tuple[str, str], int] = {}
        self.lost_records = 0
        # The committed offsets of another consumer group (a committed stopping point follows it), by (cluster,
        # topic name, partition): by name, as Kafka keeps them, so a recreated topic inherits stale ones.
        self.group_offsets: dict[tuple[str, str, int], int] = {}

    def add_cluster(self, cluster_id: str) -> None:
        self.clusters[cluster_id] = WCluster(cluster_id, f"{cluster_id}-1:9092")

    def create_topic(self, cluster_id: str, name: str, partitions: int) -> WTopic:
        topic = WTopic(name, f"tid-{next(self._topic_ids)}", [WPartition() for _ in range(partitions)])
        self.clusters[cluster_id].topics[name] = topic
        key = (cluster_id, name)
        if key in self.max_partitions:
            self.recreated.add(key)
        self.max_partitions[key] = max(partitions, self.max_partitions.get(key, 0))
        self.by_topic_id[topic.topic_id] = topic
        return topic

    def delete_topic(self, cluster_id: str, name: str) -> None:
        topic = self.clusters[cluster_id].topics.pop(name)
        topic.deleted = True
        for p in topic.partitions:
            for r in p.log.values():
                r.gone = "deleted"
            p.log = {}

    def produce(
        self, cluster_id: str, name: str, partition: int, count: int, *, txn: bool, bad: bool, lax: bool = False
    ) -> list[Record]:
        topic = self.clusters[cluster_id].topics[name]
        index = partition % len(topic.partitions)
        p = topic.partitions[index]
        produced = []
        for i in range(count):
            self.clock_ms += 1
            r = Record(next(self._uids), cluster_id, name, topic.topic_id, index, p.end, self.clock_ms)
            r.bad = bad and i == 0
            r.lax = lax and i == count - 1
            self._append_record(p, r)
            produced.append(r)
        if txn:
            p.end += 1  # the commit marker takes an offset and holds no record
        return produced

    def _append_record(self, p: WPartition, r: Record) -> None:
        p.log[p.end] = r
        p.history[p.end] = r
        self.records[r.uid] = r
        p.end += 1

    def mirror(self, cluster_id: str, name: str, originals: Sequence[Record]) -> None:
        """MirrorMaker 2 (identity replication policy) copies ``originals`` to ``cluster_id``'s topic ``name``:
        same partition, value and timestamp, its own offsets; a copy is the same record as its original."""
        topic = self.clusters[cluster_id].topics[name]
        for o in originals:
            index = o.partition % len(topic.partitions)
            p = topic.partitions[index]
            copy = Record(next(self._uids), cluster_id, name, topic.topic_id, index, p.end, o.ts_ms, bad=o.bad)
            copy.lax, copy.identity = o.lax, o.identity
            self._append_record(p, copy)

    def delete_records(self, cluster_id: str, name: str, partition: int, count: int) -> None:
        topic = self.clusters[cluster_id].topics[name]
        p = topic.partitions[partition % len(topic.partitions)]
        new_earliest = min(p.end, p.earliest + count)
        for offset in range(p.earliest, new_earliest):
            r = p.log.pop(offset, None)
            if r is not None:
                r.gone = "retention"
        p.earliest = new_earliest

    def truncate(self, cluster_id: str, name: str, partition: int, count: int) -> None:
        """An unclean leader election: the new leader's log ends ``count`` offsets earlier; the records there are
        gone (unknowable to any client) and their offsets are given to the next records produced."""
        topic = self.clusters[cluster_id].topics[name]
        p = topic.partitions[partition % len(topic.partitions)]
        new_end = max(p.earliest, p.end - count)
        if new_end < p.end:
            p.truncations.append((new_end, p.end))
        for offset in range(new_end, p.end):
            r = p.log.pop(offset, None)
            if r is not None:
                r.gone = "truncated"
        p.end = new_end
        p.new_leader()

    def leader_change(self, cluster_id: str, name: str, partition: int) -> None:
        """A clean leader change (a broker restart): a new epoch, every record kept."""
        topic = self.clusters[cluster_id].topics[name]
        topic.partitions[partition % len(topic.partitions)].new_leader()

    def compact(self, cluster_id: str, name: str, partition: int, pick: int) -> None:
        topic = self.clusters[cluster_id].topics[name]
        p = topic.partitions[partition % len(topic.partitions)]
        # Compaction never removes the head of the log (the active segment).
        candidates = sorted(p.log)[:-1]
        if candidates:
            r = p.log.pop(candidates[pick % len(candidates)])
            r.gone = "compacted"

    def first_at(self, topic_id: str, partition: int, ts_ms: int, otherwise: int) -> int:
        """The offset a timestamp initializer starts ``partition`` at: the first held record at or after
        ``ts_ms``, else ``otherwise`` (the end)."""
        found = self._first_at(self.by_topic_id[topic_id].partitions[partition], ts_ms)
        return otherwise if found is None else found

    def reachable(self, connection: ClusterMetadata) -> WCluster | None:
        cluster = self.clusters.get(connection.cluster_id)
        if cluster is None or not cluster.up or cluster.bootstrap != connection.bootstrap_servers:
            return None
        return cluster

    def _first_at(self, p: WPartition, ts_ms: int) -> int | None:
        """offsets_for_times: the first offset whose timestamp is >= ts_ms; None when there is none."""
        found = [o for o, r in sorted(p.log.items()) if r.ts_ms >= ts_ms]
        return found[0] if found else None

    def take_broker_snapshot(
        self, requests: Sequence[ClusterRequest], *, isolation_level: str, now: datetime, **_: Any
    ) -> BrokerSnapshot:
        clusters: dict[str, ClusterSnapshot] = {}
        for request in requests:
            cid = request.cluster.cluster_id
            cluster = self.reachable(request.cluster)
            if cluster is None:
                if request.required and not request.skip_unreachable:
                    raise ClusterUnreachableError("simulated: no broker answers", cluster_id=cid)
                clusters[cid] = ClusterSnapshot(cluster_id=cid, reachable=False, error="simulated: down")
                continue
            topics: dict[str, TopicSnapshot] = {}
            for name in sorted(request.topics):
                t = cluster.topics.get(name)
                if t is None:
                    topics[name] = TopicSnapshot(topic=name, exists=False)
                    continue
                parts = dict(enumerate(t.partitions))
                stop = request.stopping
                diverged = self._diverged(request, name, t)
                topics[name] = TopicSnapshot(
                    topic=name,
                    topic_id=t.topic_id,
                    partitions={
                        i: PartitionOffsets(
                            earliest=p.earliest, latest=p.end, leader_epoch=p.epoch, diverged_at=diverged.get(i)
                        )
                        for i, p in parts.items()
                    },
                    start_lookups=self._start_lookups(request, cid, name, parts),
                    stop_lookups=self._stop_lookups(cid, name, parts, stop),
                    floor_lookups={i: self._first_at(p, request.floor_ms) for i, p in parts.items()}
                    if request.floor_ms is not None
                    else {},
                )
            clusters[cid] = ClusterSnapshot(cluster_id=cid, topics=topics)
        return BrokerSnapshot(clusters=clusters, taken_at=now)

    def _start_lookups(
        self, request: ClusterRequest, cid: str, name: str, parts: dict[int, WPartition]
    ) -> dict[int, int | None]:
        """What the brokers answer for a starting initializer that needs a lookup: a timestamp's first offset, a
        consumer group's committed offsets (None where it has none), or a custom initializer's function, called
        through the product's own ``resolve_custom`` for the partitions of a topic the state has none of."""
        start = request.starting
        if isinstance(start, TimestampOffsets):
            return {i: self._first_at(p, start.timestamp_ms) for i, p in parts.items()}
        if isinstance(start, CommittedOffsets | SpecificOffsets) and start.group_id is not None:
            return {i: self.group_offsets.get((cid, name, i)) for i in parts}
        if isinstance(start, CustomOffsets) and name not in request.started_topics:
            bounds = [
                PartitionBounds(cluster_id=cid, topic=name, partition=i, earliest=p.earliest, latest=p.end)
                for i, p in parts.items()
            ]
            lookups = _WorldLookups(self, cid, name, parts)
            return {p: found for (_, p), found in resolve_custom(start, bounds, lookups).items()}
        return {}

    def _stop_lookups(self, cid: str, name: str, parts: dict[int, WPartition], stop: object) -> dict[int, int | None]:
        """What the brokers answer for a stopping initializer that needs a lookup: a timestamp's first offset, the
        consumer group's committed offset (None where it has none), or a custom initializer's function, called
        through the product's own ``resolve_custom`` for every partition, at every run."""
        if isinstance(stop, TimestampOffsets):
            return {i: self._first_at(p, stop.timestamp_ms) for i, p in parts.items()}
        if isinstance(stop, CommittedOffsets):
            return {i: self.group_offsets.get((cid, name, i)) for i in parts}
        if isinstance(stop, CustomOffsets):
            bounds = [
                PartitionBounds(cluster_id=cid, topic=name, partition=i, earliest=p.earliest, latest=p.end)
                for i, p in parts.items()
            ]
            lookups = _WorldLookups(self, cid, name, parts)
            answer = resolve_custom(stop, bounds, lookups, role="stopping_offsets")
            return {p: found for (_, p), found in answer.items()}
        return {}

    @staticmethod
    def _diverged(request: ClusterRequest, name: str, t: WTopic) -> dict[int, int]:
        """The real snapshot's selection of positions to check, answered from the epoch caches."""
        described = {name: TopicDescription(topic=name, exists=True, topic_id=t.topic_id)}
        latest = {(name, i): OffsetAnswer(p.end, p.epoch) for i, p in enumerate(t.partitions)}
        positions = [c for c in request.positions if c.topic == name]
        found: dict[int, int] = {}
        for check in epoch_checks(positions, described, latest):
            end = t.partitions[check.partition].end_offset_for(check.leader_epoch)
            if end is not None and end < check.next_offset:
                found[check.partition] = end
        return found

    def admin(self, connection: ClusterMetadata, **_: Any) -> _WorldAdmin:
        """``KafkaAdmin`` over the world: what the run's topic-id check after the read asks."""
        return _WorldAdmin(self, connection)

    def read_splits(
        self, spark: Any, splits: Sequence[Split], clusters: Mapping[str, ClusterMetadata], **_: Any
    ) -> Frame:
        """Spark's Kafka source: by topic name, failOnDataLoss on. Returns the records (the "frame"), read when a
        job of ``spark`` (a ``ModelSession``: its session) writes them."""
        rows = Frame(session=spark if isinstance(spark, ModelSession) else None)
        for s in splits:
            connection = clusters.get(s.cluster_id)
            cluster = self.reachable(connection) if connection is not None else None
            if cluster is None:
                raise SparkJobError(f"simulated: cluster {s.cluster_id!r} unreachable while reading {s.key}")
            t = cluster.topics.get(s.topic)
            if t is None or s.partition >= len(t.partitions):
                raise SparkJobError(f"simulated: {s.key} does not exist (UnknownTopicOrPartition)")
            p = t.partitions[s.partition]
            if s.start_offset < p.earliest or s.stop_offset > p.end:
                raise SparkJobError(
                    f"simulated failOnDataLoss: {s.key} [{s.start_offset}, {s.stop_offset}) outside "
                    f"[{p.earliest}, {p.end})"
                )
            read = [p.log[o] for o in range(s.start_offset, s.stop_offset) if o in p.log]
            rows.extend(read)
            # The reader's stream column: the record's own split's stream (``spark/reader._stream_column``).
            rows.stream_of.update((id(r), s.stream_id) for r in read)
        return rows


# An anti-join still to apply to a frame: the table pair, whether its dead-letter table, and the ranges looked in.
Unless = tuple["SinkModel", bool, tuple["Split", ...]]


class Frame(list[Record]):
    """What Spark's reads give the model's write path: the records, each with its ``stream`` column (the reader
    fills it from the record's own split: ``stream_of``, by ``id()``), the session whose jobs read them, and the
    DataFrame calls the product makes on them (the archive's rows are unioned with Kafka's, and counted when a part
    is planned; a table per stream filters the rows of each stream out of a persisted frame)."""

    def __init__(
        self,
        rows: Iterable[Record] = (),
        *,
        session: ModelSession | None = None,
        stream_of: dict[int, str] | None = None,
        unless: tuple[Unless, ...] = (),
        failing: bool = False,
    ) -> None:
        super().__init__(rows)
        self.session = session
        self.stream_of = stream_of if stream_of is not None else {}
        # Lazy, as a DataFrame: the anti-joins still to apply (read when a job uses the rows), and whether that job
        # fails on an undecodable row (``_ModelTables``).
        self.unless = unless
        self.failing = failing

    def but(self, rows: Iterable[Record], *, unless: tuple[Unless, ...] | None = None, failing: bool = False) -> Frame:
        """``rows`` (some of this frame's) as a frame read as this one, with its anti-joins still to apply."""
        pending = self.unless if unless is None else unless
        return Frame(rows, session=self.session, stream_of=self.stream_of, unless=pending, failing=failing)

    def computed(self) -> Frame:
        """The rows as a job computes them now: without those whose coordinates a table holds in its ranges."""
        present = {
            coordinates(r) for model, dead, ranges in self.unless for r in model.table(dead) if _in_ranges(r, ranges)
        }
        return self.but((r for r in self if coordinates(r) not in present), unless=())

    def unionByName(self, other: Sequence[Record]) -> Frame:  # noqa: N802 (Spark's name)
        return self.but([*self, *other])

    def persist(self, level: object) -> Frame:
        del level
        return self

    def where(self, condition: RowTest) -> Frame:
        """``df.where(...)`` on the stream or timestamp column, with the model's ``col`` (``ModelColumn``)."""
        return self.but(r for r in self if condition(r, self.stream_of.get(id(r), "")))

    def by_stream(self) -> dict[str, list[Record]]:
        found: dict[str, list[Record]] = {}
        for r in self:
            found.setdefault(self.stream_of.get(id(r), ""), []).append(r)
        return found

    def count(self) -> int:  # type: ignore[override]  # DataFrame.count(), not list.count(x)
        return len(self)


@dataclass(eq=False)
class Archive:
    """A bootstrap archive: JSON files of records (the topic's history, each record with its coordinates), which
    may change after they were listed. ``until_ms``: the bootstrap's switch time. ``modified``: each file's
    modification time (a counter), moved on by :meth:`move`; ``versions``: each file's records at each of its
    modification times, so that an operator can put a file back as a plan pinned it."""

    location: str
    until_ms: int
    files: dict[str, list[Record]] = field(default_factory=dict)
    modified: dict[str, int] = field(default_factory=dict)
    versions: dict[tuple[str, int], list[Record]] = field(default_factory=dict)

    def move(self, source: str, target: str) -> bool:
        """Whoever writes the archive moves a record from ``source`` to ``target``: both files are rewritten (a new
        size and modification time). False when ``source`` is empty (nothing rewritten)."""
        if not self.files[source]:
            return False
        self._keep(source, target)
        self.files[target].append(self.files[source].pop())
        stamp = max(self.modified.values(), default=0) + 1
        self.modified[source] = self.modified[target] = stamp
        self._keep(source, target)
        return True

    def _keep(self, *names: str) -> None:
        for name in names:
            self.versions[(name, self.modified.get(name, 0))] = list(self.files[name])

    def as_pinned(self, name: str, pins: Mapping[str, tuple[int, int]]) -> list[Record]:
        """The records of file ``name`` as ``pins`` (a plan's) list it: what the plan's part read, since the model
        reads a part's files at once, right after they are checked against the pins."""
        modified = pins[name][1] if name in pins else self.modified.get(name, 0)
        return self.files[name] if modified == self.modified.get(name, 0) else self.versions[(name, modified)]

    def put_back(self, pins: Mapping[str, tuple[int, int]]) -> bool:
        """The operator puts every file back as ``pins`` (a plan's) list it, with its modification time (a copy
        that keeps it). False when every file already was as pinned."""
        changed = [name for name, (_, modified) in pins.items() if self.modified.get(name, 0) != modified]
        for name in changed:
            self.modified[name] = pins[name][1]
            self.files[name] = list(self.versions[(name, pins[name][1])])
        return bool(changed)

    def rows(self, spark: object, read: ArchiveRead, dead_letters: object) -> Frame:
        """``archive.archive_rows``: the rows of the pinned files, as they are now, before ``until`` (by name:
        Spark lists and reads the files when the job runs). The history holds no undecodable record, so no
        abandoned run dead-lettered one: nothing to take out of ``dead_letters``."""
        del spark, dead_letters
        return Frame(r for name in read.files for r in self.files.get(name, []) if r.ts_ms < self.until_ms)

    def pins(self, spark: object, read: ArchiveRead) -> dict[str, tuple[int, int]]:
        """``archive._file_pins``: the size (a file's records, one JSON line of 100 bytes each) and modification
        time the storage lists now for each of the files ``read`` names (files and, pinned ahead, ``remaining``)."""
        del spark
        names = (*read.files, *read.remaining)
        return {n: (100 * len(self.files[n]), self.modified.get(n, 0)) for n in names if n in self.files}

    def kafka_side(self, frame: Frame, read: ArchiveRead) -> Frame:
        """``archive.kafka_side`` on the model's records: the switch run keeps Kafka's records from ``until`` on
        (the archive lands the older ones)."""
        return frame.but(r for r in frame if not read.switch or r.ts_ms >= self.until_ms)


class _ArchiveSpark:
    """The part of a Spark session ``archive.plan_archive`` uses: the archive's schema and its files' names."""

    def __init__(self, archive: Archive | None) -> None:
        self.archive = archive

    @property
    def read(self) -> _ArchiveSpark:
        return self

    def format(self, fmt: str) -> _ArchiveSpark:
        return self

    def load(self, location: str) -> _ArchiveFrame:
        if self.archive is None or location != self.archive.location:
            raise SparkJobError(f"simulated: no archive at {location}")
        return _ArchiveFrame(self.archive)


class _ArchiveField:
    def __init__(self, name: str, ddl: str) -> None:
        self.name = name
        self.dataType = self  # Spark's StructField.dataType
        self._ddl = ddl

    def simpleString(self) -> str:  # noqa: N802 (Spark's name)
        return self._ddl


class _ArchiveFrame:
    COLUMNS = (
        ("cluster", "string"),
        ("topic", "string"),
        ("partition", "int"),
        ("offset", "bigint"),
        ("timestamp", "timestamp"),
        ("value", "string"),
    )

    def __init__(self, archive: Archive) -> None:
        self.archive = archive
        self.schema = self
        self.fields = [_ArchiveField(n, t) for n, t in self.COLUMNS]

    def inputFiles(self) -> list[str]:  # noqa: N802 (Spark's name)
        return sorted(self.archive.files)


class ModelColumn:
    """``pyspark.sql.functions.col`` for the model's frames: a row's ``stream`` (its split's) or ``timestamp``.
    Compared with a literal (``lit`` is the value itself) it is a test of a row (``RowTest``)."""

    def __init__(self, name: str) -> None:
        if name not in ("stream", "timestamp"):
            raise AssertionError(f"the model's frames have a stream and a timestamp column, not {name!r}")
        self.name = name

    def value(self, r: Record, stream: str) -> object:
        return stream if self.name == "stream" else datetime.fromtimestamp(r.ts_ms / 1000, UTC)

    def __eq__(self, value: object) -> RowTest:  # type: ignore[override]
        return RowTest(lambda r, stream: self.value(r, stream) == value)

    def __ge__(self, value: Any) -> RowTest:
        return RowTest(lambda r, stream: self.value(r, stream) >= value)  # type: ignore[operator]

    def __lt__(self, value: Any) -> RowTest:
        return RowTest(lambda r, stream: self.value(r, stream) < value)  # type: ignore[operator]

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True)
class RowTest:
    """A condition on a model row (the record and its stream column); conditions combine with ``&``."""

    test: Callable[[Record, str], bool]

    def __call__(self, r: Record, stream: str) -> bool:
        return self.test(r, stream)

    def __and__(self, other: RowTest) -> RowTest:
        return RowTest(lambda r, stream: self(r, stream) and other(r, stream))


class ConnectServer:
    """A Spark Connect server as the model's processes reach it, standing in for pyspark's ``SparkSession`` (its
    ``builder.remote(url).create()``) so that the product's own ``spark.remote`` code runs unchanged: a pipeline's
    runs attach to its shared session by id, generation after generation, and a cached session is checked before
    use. The server closes every open session at :meth:`expire` (idle past its ``defaultSessionTimeout``) and keeps
    refusing a closed id for its lifetime (``INVALID_HANDLE.SESSION_CLOSED``), as Spark Connect's closed-sessions
    cache does. A job of a closed session fails; one the server was running when it closed the session may still
    commit (it lands later, an ``Orphan``). Its sessions also answer ``plan_archive``'s reads (``_ArchiveSpark``)."""

    URL = "sc://model-connect:15002"

    def __init__(self, archive: Archive | None) -> None:
        self.archive = archive
        self.open: set[str] = set()
        self.closed: set[str] = set()
        self.attached: list[str] = []  # every session id a client attached to, in order
        self._own = itertools.count(1)
        self._url = ""

    @property
    def builder(self) -> ConnectServer:
        return self

    def remote(self, url: str) -> ConnectServer:
        self._url = url
        return self

    def create(self) -> ModelSession:
        named = self._url.partition("session_id=")[2]
        return ModelSession(self, named or f"own-{next(self._own)}")

    def expire(self) -> int:
        """The idle timeout closes every open session; how many it closed."""
        closed = len(self.open)
        self.closed |= self.open
        self.open = set()
        return closed


@dataclass(frozen=True)
class _ConfigAnswer:
    """What a config request answers: no warnings, no values."""

    warnings: tuple[str, ...] = ()
    pairs: tuple[tuple[str, str], ...] = ()


class ModelSession(_ArchiveSpark):
    """A client's session on the model's ``ConnectServer``: the calls ``spark.remote`` makes on it (``version``,
    ``conf.set``, ``client.config``, ``client``, ``stop``), each refused once the server closed the session."""

    def __init__(self, server: ConnectServer, session_id: str) -> None:
        super().__init__(server.archive)
        self.server, self.session_id = server, session_id
        self.release_session_on_close = True
        self.is_closed = False  # the client's own state (``client.is_closed``)

    @property
    def client(self) -> ModelSession:
        return self

    @property
    def conf(self) -> ModelSession:
        return self

    def set_retry_policies(self, policies: object) -> None:
        del policies

    @property
    def version(self) -> str:
        self._request()
        if self.session_id not in self.server.attached[-1:]:
            self.server.attached.append(self.session_id)
        return "4.1"

    def set(self, name: str, value: str) -> None:
        del name, value
        self._request()

    def config(self, operation: object) -> _ConfigAnswer:
        """A config request (``ConnectConf``'s: settings stated in one round trip)."""
        del operation
        self._request()
        return _ConfigAnswer()

    def stop(self) -> None:
        self.is_closed = True
        if self.release_session_on_close:
            self.server.open.discard(self.session_id)

    def serves(self) -> bool:
        """Whether a job of this session runs (the server holds it, the client is open)."""
        return not self.is_closed and self.session_id not in self.server.closed

    def _request(self) -> None:
        from pyspark.errors import PySparkException

        if self.session_id in self.server.closed:
            raise PySparkException(
                message=f"[INVALID_HANDLE.SESSION_CLOSED] The handle {self.session_id} is invalid. Session was closed."
            )
        self.server.open.add(self.session_id)

    def fail_job(self, what: str) -> None:
        """A job of this session after the server closed it: the product's own mapping of Spark's error."""
        from pyspark.errors import PySparkException

        from dynamic_kafka.sink.tables import spark_failures

        with spark_failures(f"simulated: {what}"):
            raise PySparkException(
                message=f"[INVALID_HANDLE.SESSION_CLOSED] The handle {self.session_id} is invalid. Session was closed."
            )


class _WorldAdmin:
    """The part of ``KafkaAdmin`` the runner's topic check uses: ``describe_topics`` by name."""

    def __init__(self, world: World, connection: ClusterMetadata) -> None:
        self.world, self.connection = world, connection

    def __enter__(self) -> _WorldAdmin:
        return self

    def __exit__(self, *_: object) -> None:
        return None

    def describe_topics(self, names: Iterable[str]) -> dict[str, TopicDescription]:
        cluster = self.world.reachable(self.connection)
        if cluster is None:
            raise ClusterUnreachableError("simulated: no broker answers", cluster_id=self.connection.cluster_id)
        found: dict[str, TopicDescription] = {}
        for name in names:
            t = cluster.topics.get(name)
            found[name] = TopicDescription(topic=name, exists=t is not None, topic_id=t.topic_id if t else None)
        return found


# --------------------------------------------------------------------------------------------------------- sink


Coordinates = tuple[str, str, int, int]


def coordinates(r: Record) -> Coordinates:
    return (r.cluster_id, r.topic, r.partition, r.offset)


class Crasher:
    """Counts crash points during one call; raises ``Crash`` at the armed one. Before that, an action scheduled at
    a point runs there (another actor acting in the middle of the call), and ``on_point`` at every point."""

    def __init__(self) -> None:
        self.armed: int | None = None
        self.count = 0
        self.crashed_at: str | None = None
        self.actions: dict[int, Callable[[str], None]] = {}
        self.on_point: Callable[[str], None] | None = None

    def arm(self, at: int | None, actions: Mapping[int, Callable[[str], None]] | None = None) -> None:
        self.armed, self.count, self.crashed_at = at, 0, None
        self.actions = dict(actions or {})

    def point(self, name: str) -> None:
        action = self.actions.pop(self.count, None)
        if action is not None:
            action(name)
        if self.on_point is not None:
            self.on_point(name)
        if self.armed is not None and self.count == self.armed:
            self.crashed_at = name
            self.armed = None
            raise Crash(name)
        self.count += 1


@dataclass(eq=False)
class Orphan:
    """A write that outlived its client: a Spark Connect server finishing a killed client's job, or a backfill's
    MERGE still running. It may land at any later step, or never."""

    run_seq: int | None  # the run it belongs to (None: a backfill's MERGE)
    what: str
    land: Callable[[], None]
    tables: tuple[bool, ...] = (False,)  # the tables its uncommitted files are in (True: the dead-letter table)
    owner: SinkModel | None = None  # the stream table pair it writes (None: every table it reaches)


def is_undecodable(r: Record, pipeline: PipelineConfig) -> bool:
    """The decode verdict of the CURRENT config, as ``dynamic_kafka.decoding.formats`` gives it: under value format
    json a value that is not JSON, and with json_strict also one with a field its ``schema`` lacks; nothing under
    string."""
    return pipeline.value.format == "json" and (r.bad or (r.lax and pipeline.json_strict))


def decode_error(r: Record) -> UndecodableRecordError:
    """The error naming an undecodable record (the model's values are not JSON, see ``is_undecodable``)."""
    return UndecodableRecordError(
        cluster_id=r.cluster_id,
        topic=r.topic,
        partition=r.partition,
        offset=r.offset,
        reason="simulated: value is not valid JSON",
    )


def _in_ranges(r: Record, ranges: Sequence[Split]) -> bool:
    return any(
        (s.cluster_id, s.topic, s.partition) == (r.cluster_id, r.topic, r.partition)
        and s.start_offset <= r.offset < s.stop_offset
        for s in ranges
    )


class SinkModel:
    """The sink and dead-letter tables: rows (with their ``_run_seq``; None for a backfill's) plus Delta's per-app
    txn version, and the other writers of the two tables."""

    def __init__(self, crasher: Crasher, shared: SinkModel | None = None) -> None:
        """``shared``: another table of the same pipeline (a table per stream), whose late writers, lists of
        replaced commits, purged and replayed records and writer check this table shares."""
        self.shared = shared or self
        self.rows: list[Record] = []
        self.dead: list[Record] = []
        self.row_seqs: list[int | None] = []
        self.dead_seqs: list[int | None] = []
        self.txn: dict[str, int] = {}
        self.dead_txn: dict[str, int] = {}
        self.crasher = crasher
        self.sink_commits = 0  # commits to the sink table, any writer's (a non-blind append's conflict check)
        # A foreign delta-spark commit (OPTIMIZE, DELETE, VACUUM, a backfill MERGE) that a check-then-rename log
        # store lets take the version of the next run append: that append's commit (rows and txn) is gone.
        self.replace_next: str | None = None
        self.replaced: list[str] = [] if shared is None else shared.replaced
        self.orphans: list[Orphan] = [] if shared is None else shared.orphans
        self.purged: set[int] = set() if shared is None else shared.purged  # identities a user's DELETE removed
        # The records (by id()) a dead-letter replay appended to the sink.
        self.replayed: set[int] = set() if shared is None else shared.replayed
        self.unreadable: str | None = None  # a table whose log names a file a VACUUM deleted
        self.on_append: Callable[[str, int], None] | None = None  # the harness's check that the writer may write
        # Runs fenced by an abandon, per table (True: the dead-letter table): their txn holds no row.
        self.fences: set[tuple[bool, str, int]] = set()

    def committed_txn_version(self, sink_path: object, app_id: str) -> int | None:
        return self.txn.get(app_id)

    def versions(self, dead: bool, app_ids: Sequence[str]) -> dict[str, int | None]:
        """``committed_txn_versions`` of the sink or (``dead``) the dead-letter table."""
        txns = self.dead_txn if dead else self.txn
        return {app_id: txns.get(app_id) for app_id in app_ids}

    def landed_frontier(
        self, pipeline: PipelineConfig, after_run_seq: int | None, *, backfills: bool = False
    ) -> dict[TopicPartition, int]:
        """``realign.landed_frontier`` over the model's rows."""
        frontier: dict[TopicPartition, int] = {}
        for table, seqs in ((self.rows, self.row_seqs), (self.dead, self.dead_seqs)):
            for r, seq in zip(table, seqs, strict=True):
                if (seq is None and backfills) or (
                    seq is not None and after_run_seq is not None and seq > after_run_seq
                ):
                    key = TopicPartition(cluster_id=r.cluster_id, topic=r.topic, partition=r.partition)
                    frontier[key] = max(frontier.get(key, 0), r.offset + 1)
        return frontier

    def table(self, dead: bool) -> list[Record]:
        """The rows of the sink or (``dead``) the dead-letter table."""
        return self.dead if dead else self.rows

    def _append(self, dead: bool, rows: list[Record], app_id: str, version: int, what: str) -> bool:
        """One append with the run's txn; whether this write committed (False: Delta skipped it, the txn held)."""
        table, seqs, txns = (self.dead, self.dead_seqs, self.dead_txn) if dead else (self.rows, self.row_seqs, self.txn)
        prior = txns.get(app_id)
        if prior is not None and version <= prior:
            return False  # Delta skips an idempotent write whose version it has seen for the app
        if self.shared.on_append is not None:
            self.shared.on_append(what, version)
        if not dead:
            self.sink_commits += 1
        if self.replace_next is not None:
            self.replaced.append(f"the {what} of run {version} (replaced by a concurrent {self.replace_next})")
            self.replace_next = None
            return True
        table.extend(rows)
        seqs.extend([version] * len(rows))
        txns[app_id] = version
        return True

    def _job(
        self,
        point: str,
        dead: bool,
        rows: Frame,
        app_id: str,
        version: int,
        what: str,
        before_commit: Callable[[], None] | None = None,
    ) -> tuple[bool, list[Record]]:
        """One Spark job appending to a table, as ``incremental._append``: the run's check before the commit, the
        append, then the run finds its commit in the log (a replaced one raises ``CommitOverwrittenError``); whether
        the commit found is this write's, and the rows it appended. A kill of the client while it runs (the
        crash point before it) leaves it running on the server: an orphan that may still commit. The rows' own
        anti-joins (``Frame.unless``) are read in the append's own transaction (a commit landing between that read
        and the append fails Delta's conflict check, so read and append are one step here). The job's Spark
        Connect session (the rows'): closed by the server before the job, the job fails; closed while it runs (at
        its crash point), it fails too and may still commit later (an orphan)."""
        written: list[list[Record]] = []

        def append() -> bool:
            kept = rows.computed()
            written.append(kept)
            return self._append(dead, kept, app_id, version, what)

        def land() -> None:
            append()

        session = rows.session
        served = session is None or session.serves()
        try:
            self.crasher.point(point)
        except Crash:
            self.orphans.append(Orphan(version, what, land, (dead,), self))
            raise
        if session is not None and not session.serves():
            if served:
                self.orphans.append(Orphan(version, what, land, (dead,), self))
            session.fail_job(f"the {what} of run {version}")
        if before_commit is not None:
            before_commit()
        ours = append()
        txns = self.dead_txn if dead else self.txn
        if txns.get(app_id) != version:
            raise CommitOverwrittenError(
                f"simulated: the {what} of run {version} reported success, but no version holds it",
                table="dead letters" if dead else "sink",
            )
        return ours, written[0]

    def is_fence(self, dead: bool, app_id: str, run_seq: int) -> bool:
        """``fence.is_fence`` of the sink or (``dead``) the dead-letter table."""
        return (self.dead_txn if dead else self.txn).get(app_id) == run_seq and (dead, app_id, run_seq) in self.fences

    def fence_run(self, table: object, kind: str, app_id: str, run_seq: int, reason: str) -> str:
        """``fence.fence_run``: commits the run's txn with no rows, marked a fence, unless the table holds it."""
        del table, reason
        dead = kind == "dead_letter"
        txns = self.dead_txn if dead else self.txn
        held = txns.get(app_id)
        if held is not None and held >= run_seq:
            return "fenced" if held == run_seq and (dead, app_id, run_seq) in self.fences else "landed"
        txns[app_id] = run_seq
        self.fences.add((dead, app_id, run_seq))
        if not dead:
            self.sink_commits += 1
        return "fenced"

    def run_frontier(self, table: object, run_seq: int) -> dict[TopicPartition, int]:
        """``realign.run_frontier`` of the dead-letter table: per partition, one past its highest offset from
        ``run_seq``."""
        del table
        frontier: dict[TopicPartition, int] = {}
        for r, seq in zip(self.dead, self.dead_seqs, strict=True):
            if seq == run_seq:
                key = TopicPartition(cluster_id=r.cluster_id, topic=r.topic, partition=r.partition)
                frontier[key] = max(frontier.get(key, 0), r.offset + 1)
        return frontier

    def landed_from_log(self, sink: object, dead_letters: object, app_id: str, run_seq: int) -> WriteResult:
        """``incremental.landed_from_log``: the rows run ``run_seq`` landed in the two tables."""
        del sink, dead_letters, app_id
        sink_records = sum(1 for seq in self.row_seqs if seq == run_seq)
        dead = sum(1 for seq in self.dead_seqs if seq == run_seq)
        return WriteResult(
            records=sink_records + dead, bytes=0, sink_records=sink_records, dead_letters=dead, already_committed=True
        )

    def write_incremental(
        self,
        frame: Frame,
        pipeline: PipelineConfig,
        run_seq: int,
        planned_pairs: Sequence[tuple[str, str]],
        overlaps: Sequence[Split] = (),
        prepared: object = None,
        *,
        before_commit: Callable[[], None] | None = None,
        counted_ranges: Sequence[Split] = (),
        event_time: str | None = None,
        planned_records: int | None = None,
        rows_schema: object = None,
    ) -> WriteResult:
        """``incremental.write_incremental`` over the model's tables: the product's own steps (``holds_run``, the
        writer of the decode policy, ``skip_backfilled``, ``_already_committed``) with ``_ModelTables`` for Spark.
        The model's records carry their values (the verdict comes from the config); it counts no ranges for the
        completeness report, has no event times, no code generation to size and no Spark schema."""
        del prepared, counted_ranges, event_time, planned_records, rows_schema
        self.check_readable()
        target = incremental_module.RunTarget.of(pipeline, run_seq, overlaps, before_commit)
        if incremental_module.holds_run(self.txn.get(pipeline.id), target):
            return incremental_module._already_committed(target, run_seq)
        tables = _ModelTables(self, pipeline)

        def observed_rows() -> incremental_module.Observing:
            rows = incremental_module.skip_backfilled(tables, frame, target)
            return incremental_module.Observing(rows, None, None)  # type: ignore[arg-type]  # no observations

        writer = incremental_module.writer_for(pipeline, can_fail=pipeline.value.format == "json")
        landed = writer(tables, observed_rows, target)
        if not landed.sink.ours:
            return incremental_module._already_committed(target, run_seq)  # another writer of this run landed it
        written = [*tables.written.get(False, []), *tables.written.get(True, [])]
        dead_letters = len(tables.written.get(True, []))
        per_topic = {pair: (sum(1 for r in written if (r.cluster_id, r.topic) == pair), 0) for pair in planned_pairs}
        return WriteResult(
            records=len(written),
            bytes=0,
            per_topic=per_topic,
            sink_records=len(written) - dead_letters,
            dead_letters=dead_letters,
            deduplicated=len(frame) - len(written),
        )

    def merge_table(self, rows: Sequence[Record], dead: bool, marker: tuple[str, int] | None) -> int:
        """Delta's MERGE of a backfill into the sink or (``dead``) the dead-letter table: inserts the rows whose
        (cluster, topic, partition, offset) the table lacks; records ``marker`` (app id, version) unless the
        table's log holds a higher version for the app. How many rows it inserted."""
        self.check_readable()
        table, seqs, txns = (self.dead, self.dead_seqs, self.dead_txn) if dead else (self.rows, self.row_seqs, self.txn)
        if marker is not None and rows and txns.get(marker[0], 0) < marker[1]:
            txns[marker[0]] = marker[1]
        if not dead and rows:
            self.sink_commits += 1
        present = {coordinates(r) for r in table}
        inserted = 0
        for r in rows:
            if coordinates(r) not in present:
                table.append(r)
                seqs.append(None)
                present.add(coordinates(r))
                inserted += 1
        return inserted

    def foreign_commit(self, kind: str, pick: int, *, replace_next: bool) -> None:
        """Another Spark process commits to the sink: OPTIMIZE and VACUUM change no row, a DELETE removes one (on
        purpose: that record is no longer owed to the sink). With ``replace_next`` it is concurrent with the next
        run append and takes that commit's version."""
        if replace_next:
            self.replace_next = kind
            return
        self.sink_commits += 1
        if kind == "DELETE" and self.rows:
            index = pick % len(self.rows)
            self.purged.add(self.rows.pop(index).identity)
            self.row_seqs.pop(index)

    def landed(self) -> Counter[int]:
        """How often each record (by identity: a mirrored copy is its original) is in the two tables. A dead letter
        the sink holds at the same coordinates and timestamp is not counted: a replay interrupted between its sink
        append and its dead-letter MERGE leaves it, and the next replay deletes it (``sink/redecode.py``); it is
        counted in ``awaiting_replay``."""
        waiting = {id(r) for r in self.awaiting_replay()}
        return Counter(r.identity for r in [*self.rows, *self.dead] if id(r) not in waiting)

    def awaiting_replay(self) -> list[Record]:
        """Dead letters a replay landed in the sink and has not yet deleted (it was interrupted)."""
        replayed = {id(r) for r in self.rows if id(r) in self.replayed}
        return [r for r in self.dead if id(r) in replayed]

    # ---- dead-letter replay (``sink.replay.replay``) and maintenance (``sink.compaction``)

    def replay(
        self,
        spark: object,
        pipeline: PipelineConfig,
        clusters: object,
        *,
        run_seq: int | None,
        replay_seq: int,
        write: bool,
        before_write: Callable[[], None] | None = None,
    ) -> ReplayCounts:
        """``sink.replay.replay`` over the model's tables: the dead letters (of ``run_seq``, or all), decoded under
        the current config, go through the real ``replay.replay_steps`` (``_ModelReplay`` its tables)."""
        del spark, clusters
        self.check_readable()
        letters = [
            (r, seq) for r, seq in zip(self.dead, self.dead_seqs, strict=True) if run_seq is None or seq == run_seq
        ]
        if not letters:
            return ReplayCounts()
        tables = _ModelReplay(self, letters, pipeline)
        return replay_steps(tables, pipeline.id, replay_seq, write=write, before_write=before_write)

    def _server_job(self, point: str, job: Orphan) -> None:
        """A Spark job of an operation: a kill of the client at ``point`` leaves it running on the server."""
        try:
            self.crasher.point(point)
        except Crash:
            self.orphans.append(job)
            raise
        job.land()

    def exists(self, dead: bool) -> bool:
        return bool(self.dead or self.dead_txn) if dead else bool(self.rows or self.txn or self.sink_commits)

    def table_files(self, dead: bool) -> TableFiles | None:
        """``compaction.table_files``: None when there is no table (the counts are the model's rows)."""
        if not self.exists(dead):
            return None
        rows = len(self.dead if dead else self.rows)
        return TableFiles(version=0, rows=rows, current=FileCounts(files=rows), stored=FileCounts(files=rows))

    # ---- Delta's maintenance steps (``compaction.maintain_table`` calls them, in its own order and checks)

    def compact(self, dead: bool) -> int:
        """``compaction.compact``: one OPTIMIZE commit, rows unchanged; how many files it replaced (none here)."""
        if not dead:
            self.sink_commits += 1
        return 0

    def vacuum(self, dead: bool, retention_hours: int | None) -> int:
        """``compaction.vacuum`` in full mode: with no retention it deletes the uncommitted files of every write
        still running on a server (``Orphan``) in this table; that write may still commit, and its commit then
        names files that are gone (its rows are unreadable: lost). How many files it deleted (none counted)."""
        if retention_hours == 0:
            for orphan in self.orphans:
                if orphan.owner in (None, self) and dead in orphan.tables:
                    orphan.land = self._unreadable(orphan.land, dead)
        return 0

    def _unreadable(self, land: Callable[[], None], dead: bool) -> Callable[[], None]:
        """A late write whose files in one table a VACUUM deleted: when it commits, its commit names files that are
        gone (its rows are lost) and every later read of the table fails."""

        def landing() -> None:
            table, seqs = (self.dead, self.dead_seqs) if dead else (self.rows, self.row_seqs)
            before = len(table)
            land()
            if len(table) > before:
                del table[before:], seqs[before:]
                self.unreadable = "dead-letter table" if dead else "sink"

        return landing

    def check_readable(self) -> None:
        """Reading a table whose current version names a deleted file fails (Spark's FileNotFoundException)."""
        if self.unreadable is not None:
            raise SparkJobError(f"simulated: the {self.unreadable} names a data file a VACUUM deleted")


class _ModelReplay:
    """``replay.ReplayTables`` over one table pair of the model: ``letters`` the dead letters replayed (with their
    run), each write one server job (a kill while it runs leaves it running: an orphan)."""

    def __init__(self, model: SinkModel, letters: list[tuple[Record, int | None]], pipeline: PipelineConfig) -> None:
        self.model, self.letters, self.pipeline = model, letters, pipeline

    def count(self) -> ReplayCounts:
        held: dict[Coordinates, set[int]] = {}
        for r in self.model.rows:
            held.setdefault(coordinates(r), set()).add(r.ts_ms)
        outcomes = Counter(
            replay_outcome(
                same=r.ts_ms in held.get(coordinates(r), ()),
                undecodable=is_undecodable(r, self.pipeline),
                in_sink=coordinates(r) in held,
            )
            for r, _ in self.letters
        )
        return ReplayCounts(
            dead_letters=len(self.letters),
            replayed=outcomes["replay"],
            already_landed=outcomes["landed"],
            still_undecodable=outcomes["undecodable"],
            conflicting=outcomes["conflict"],
        )

    def append_fresh(self, app_id: str, replay_seq: int) -> int | None:
        model = self.model
        decodable = [(r, seq) for r, seq in self.letters if not is_undecodable(r, self.pipeline)]

        def append() -> None:
            held = {coordinates(x) for x in model.rows}
            fresh = [(r, seq) for r, seq in decodable if coordinates(r) not in held]
            prior = model.txn.get(app_id)
            if prior is not None and replay_seq <= prior:
                return
            model.sink_commits += 1
            if model.replace_next is not None:
                model.replaced.append(f"replay {replay_seq}'s sink append (replaced by a {model.replace_next})")
                model.replace_next = None
                return
            model.rows.extend(r for r, _ in fresh)
            model.row_seqs.extend(seq for _, seq in fresh)  # a replayed row keeps its run's _run_seq
            model.replayed.update(id(r) for r, _ in fresh)
            model.txn[app_id] = replay_seq

        model._server_job("replay_writing_sink", Orphan(None, f"replay {replay_seq} sink append", append, owner=model))
        return None

    def update_dead_letters(self, app_id: str, replay_seq: int) -> None:
        model = self.model
        chosen = {id(r) for r, _ in self.letters}

        def merge() -> None:
            held = {(coordinates(x), x.ts_ms) for x in model.rows}
            kept = [
                (r, seq)
                for r, seq in zip(model.dead, model.dead_seqs, strict=True)
                if id(r) not in chosen or (coordinates(r), r.ts_ms) not in held
            ]
            model.dead, model.dead_seqs = [r for r, _ in kept], [seq for _, seq in kept]
            model.dead_txn[app_id] = max(model.dead_txn.get(app_id, 0), replay_seq)

        model._server_job(
            "replay_writing_dead_letters",
            Orphan(None, f"replay {replay_seq} dead-letter MERGE", merge, (True,), model),
        )


class _ModelTables:
    """``incremental.RunTables`` over one table pair of the model (``Frame``s for DataFrames); ``written``: the rows
    each table's append wrote (True: the dead-letter table's)."""

    def __init__(self, model: SinkModel, pipeline: PipelineConfig) -> None:
        self.model, self.pipeline = model, pipeline
        self.written: dict[bool, list[Record]] = {}

    def decoded(self, rows: Frame, undecodable: bool) -> Frame:
        return rows.but(r for r in rows if is_undecodable(r, self.pipeline) == undecodable)

    def failing_on_undecodable(self, rows: Frame) -> Frame:
        return rows.but(rows, failing=True)

    def without_present(self, rows: Frame, paths: Sequence[object], overlaps: Sequence[Split]) -> Frame:
        return rows.but(rows, unless=(*rows.unless, *((self.model, self._dead(p), tuple(overlaps)) for p in paths)))

    def persist(self, rows: Frame) -> Frame:
        return rows.computed()

    def unpersist(self, rows: Frame) -> None:
        del rows

    def append(
        self, rows: Frame, table: object, target: incremental_module.RunTarget, *, dead_letters: bool
    ) -> incremental_module.Found:
        dead = self._dead(table)
        if dead != dead_letters:
            raise AssertionError(f"the run appends its {'dead letters' if dead_letters else 'rows'} to {table}")
        if rows.failing:
            first = next((r for r in rows.computed() if is_undecodable(r, self.pipeline)), None)
            if first is not None:  # the job fails on the record, committing nothing
                raise decode_error(first)
        point, what = ("writing_dead_letters", "dead letters") if dead else ("writing_sink", "sink append")
        ours, kept = self.model._job(point, dead, rows, target.app_id, target.run_seq, what, target.before_commit)
        self.written[dead] = kept
        commit = Commit(version=0, info={}, txns=((target.app_id, target.run_seq),), added_records=len(kept))
        return incremental_module.Found(commit, ours)

    def _dead(self, table: object) -> bool:
        """Whether ``table`` is the dead-letter table of the pipeline's view (else its sink)."""
        return str(table) == str(self.pipeline.dead_letter_table)


class Stalled(BaseException):
    """A backfill's client gave up while its MERGE runs on the server (``Harness.backfill``'s ``stall``)."""


class _ModelMerges:
    """``merge.MergeTables`` over one table pair of the model: each MERGE a server job of ``SinkModel.merge_table``."""

    def __init__(self, model: SinkModel, rows: Sequence[Record], pipeline: PipelineConfig, *, stall: bool) -> None:
        self.model, self.rows, self.pipeline, self.stall = model, rows, pipeline, stall

    def first_undecodable(self) -> UndecodableRecordError:
        return decode_error(min((r for r in self.rows if is_undecodable(r, self.pipeline)), key=coordinates))

    def merge(self, *, dead_letters: bool, marker: tuple[str, int] | None) -> int:
        part = [r for r in self.rows if is_undecodable(r, self.pipeline) == dead_letters]
        inserted: list[int] = []
        job = Orphan(
            None,
            "backfill MERGE",
            lambda: inserted.append(self.model.merge_table(part, dead_letters, marker)),
            (dead_letters,),
            self.model,
        )
        if self.stall:
            self.model.orphans.append(job)
            raise Stalled
        self.model._server_job("backfill_merging", job)
        return inserted[0]


class Lake:
    """The pipeline's tables, each path the product names routed to its ``SinkModel``: the one sink and its
    dead-letter table (key ``""``), or with a ``{stream}`` sink one pair per stream, made by the first call that
    reaches the stream's paths. Every pair shares the pipeline's late writers (``SinkModel.shared``)."""

    def __init__(self, sink: SinkModel, pipeline: PipelineConfig) -> None:
        self.holder = sink
        self.per_stream = pipeline.sink.per_stream
        self.stall = False  # a backfill's client gives up while its first MERGE runs (``Harness.backfill``)
        self.tables: dict[str, SinkModel] = {} if self.per_stream else {"": sink}
        self.paths: dict[str, tuple[str, bool]] = {}
        # The pipeline's stream_pattern is s[0-9]: every table it can name.
        for stream in [f"s{i}" for i in range(10)] if self.per_stream else [""]:
            view = pipeline.for_stream(stream) if stream else pipeline
            self.paths[str(view.sink_table)] = (stream, False)
            self.paths[str(view.dead_letter_table)] = (stream, True)

    def route(self, table: object) -> tuple[SinkModel, bool]:
        """The pair holding ``table`` (a path or ``TableRef``), and whether it is that pair's dead-letter table."""
        stream, dead = self.paths[str(table)]
        return self.route_stream(stream), dead

    def of(self, pipeline: PipelineConfig) -> SinkModel:
        """The pair of a pipeline's view (``PipelineConfig.for_stream``, or the pipeline with one sink)."""
        return self.route(pipeline.sink.path.uri)[0]

    def stream_of(self, model: SinkModel) -> str:
        return next(stream for stream, table in self.tables.items() if table is model)

    # ---- the product's functions that take a table, over the model's tables

    def committed_txn_version(self, table: object, app_id: str) -> int | None:
        model, dead = self.route(table)
        return model.versions(dead, [app_id])[app_id]

    def committed_txn_versions(self, table: object, app_ids: Sequence[str]) -> dict[str, int | None]:
        model, dead = self.route(table)
        return model.versions(dead, app_ids)

    def table_exists(self, table: object) -> bool:
        model, dead = self.route(table)
        return model.exists(dead)

    def is_fence(self, table: object, app_id: str, run_seq: int) -> bool:
        model, dead = self.route(table)
        return model.is_fence(dead, app_id, run_seq)

    def fence_run(self, table: object, kind: str, app_id: str, run_seq: int, reason: str) -> str:
        return self.route(table)[0].fence_run(table, kind, app_id, run_seq, reason)

    def run_frontier(self, table: object, run_seq: int) -> dict[TopicPartition, int]:
        return self.route(table)[0].run_frontier(table, run_seq)

    def landed_from_log(self, sink: object, dead_letters: object, app_id: str, run_seq: int) -> WriteResult:
        return self.route(sink)[0].landed_from_log(sink, dead_letters, app_id, run_seq)

    def landed_frontier(
        self, pipeline: PipelineConfig, after_run_seq: int | None, *, backfills: bool = False
    ) -> dict[TopicPartition, int]:
        return self.of(pipeline).landed_frontier(pipeline, after_run_seq, backfills=backfills)

    def write_incremental(self, frame: list[Record], pipeline: PipelineConfig, *args: Any, **kw: Any) -> WriteResult:
        return self.of(pipeline).write_incremental(frame, pipeline, *args, **kw)

    def replay(self, spark: object, pipeline: PipelineConfig, *args: Any, **kw: Any) -> ReplayCounts:
        return self.of(pipeline).replay(spark, pipeline, *args, **kw)

    def merge_backfill(
        self,
        rows: Frame,
        pipeline: PipelineConfig,
        planned_pairs: object,
        *,
        backfill_sequence: int | None,
        before_write: Callable[[], None] | None,
        **_: Any,
    ) -> WriteResult:
        """``merge.merge_backfill`` over the model's rows (already in the window: ``run_backfill`` filtered them on
        their timestamp): the real ``merge.merge_tables`` decides the MERGEs, the table's ``merge_table`` makes
        each (one server job: a kill while it runs leaves it running; ``stall``: the client gives up then)."""
        model = self.of(pipeline)
        bad = sum(1 for r in rows if is_undecodable(r, pipeline))
        dead_letters, inserted = merge_tables(
            _ModelMerges(model, rows, pipeline, stall=self.stall),
            pipeline,
            records=len(rows),
            undecodable=bad,
            backfill_sequence=backfill_sequence,
            before_write=before_write,
        )
        return WriteResult(records=len(rows), bytes=0, sink_records=inserted, dead_letters=dead_letters)

    def table_files(self, table: object) -> TableFiles | None:
        model, dead = self.route(table)
        return model.table_files(dead)

    def compact(self, table: object) -> int:
        model, dead = self.route(table)
        return model.compact(dead)

    def vacuum(self, table: object, retention_hours: int | None) -> int:
        model, dead = self.route(table)
        return model.vacuum(dead, retention_hours)

    # ---- what the machine reads over every table

    def landed(self) -> Counter[int]:
        return sum((t.landed() for t in self.tables.values()), Counter())

    def awaiting_replay(self) -> list[Record]:
        return [r for t in self.tables.values() for r in t.awaiting_replay()]

    def dead_seqs(self) -> list[int | None]:
        return [seq for t in self.tables.values() for seq in t.dead_seqs]

    def highest_txn(self, app_id: str) -> int:
        """The highest version of ``app_id`` in any table."""
        return max((max(t.txn.get(app_id, 0), t.dead_txn.get(app_id, 0)) for t in self.tables.values()), default=0)

    def lacks(self, app_id: str, run_seq: int, streams: Sequence[str]) -> bool:
        """Whether a sink of ``streams`` (of the one sink: ``[""]``) holds no transaction of ``app_id`` as high as
        ``run_seq`` (the runner's "complete" is every table holding it or a later one)."""
        return any((self.route_stream(s).txn.get(app_id) or 0) < run_seq for s in streams)

    def route_stream(self, stream: str) -> SinkModel:
        if stream not in self.tables:
            self.tables[stream] = SinkModel(self.holder.crasher, shared=self.holder)
        return self.tables[stream]

    def where(self, r: Record) -> dict[str, tuple[int, int]]:
        """Per table pair (by stream), how often the record (by identity) is in its sink and dead-letter table."""
        found = {}
        for stream, t in self.tables.items():
            rows = sum(1 for x in t.rows if x.identity == r.identity)
            dead = sum(1 for x in t.dead if x.identity == r.identity)
            if rows or dead:
                found[stream] = (rows, dead)
        return found


# ------------------------------------------------------------------------------------------------------ harness


class ModelRunner(runner_module.PipelineRunner):
    """The real runner; remembers the broker snapshot and metadata each plan was made from."""

    planned: list[tuple[Plan, BrokerSnapshot, MetadataSnapshot, StateSnapshot]]

    def plan(self, state: StateSnapshot | None = None) -> tuple[Plan, BrokerSnapshot, MetadataSnapshot]:
        state = state or self.store.load()
        plan, brokers, metadata = super().plan(state)
        self.planned.append((plan, brokers, metadata, state))
        return plan, brokers, metadata


class _OneTick:
    """Stands in for a ``LeaseKeeper``'s stop event so that its loop makes exactly one renewal, now."""

    def __init__(self, event: threading.Event) -> None:
        self.event = event
        self.ticked = False

    def wait(self, timeout: float | None = None) -> bool:
        if self.ticked:
            return True
        self.ticked = True
        return False

    def is_set(self) -> bool:
        return self.event.is_set()

    def set(self) -> None:
        self.event.set()


@dataclass
class _WorldLookups:
    """A custom initializer's lookups, answered by the world for one topic's partitions."""

    world: World
    cluster_id: str
    topic: str
    parts: dict[int, WPartition]

    def offsets_for_times(self, timestamp_ms: int) -> dict[tuple[str, int], int | None]:
        return {(self.topic, i): self.world._first_at(p, timestamp_ms) for i, p in self.parts.items()}

    def committed(self, group_id: str) -> dict[tuple[str, int], int | None]:
        return {(self.topic, i): self.world.group_offsets.get((self.cluster_id, self.topic, i)) for i in self.parts}


class Harness:
    """One pipeline over the world: real runner + real state store, world brokers + sink model."""

    def __init__(
        self,
        root: Path,
        world: World,
        pipeline: dict[str, Any],
        *,
        sink: SinkModel | None = None,
        service: InMemoryMetadataService | None = None,
        archive: Archive | None = None,
    ) -> None:
        self.root = root
        self.world = world
        self.archive = archive
        self.crasher = sink.crasher if sink is not None else Crasher()
        self.sink = sink or SinkModel(self.crasher)
        self.service = service or InMemoryMetadataService()
        self.server = ConnectServer(archive)
        self.streams: dict[str, dict[str, set[str]]] = {}
        # Per cluster, its own starting_offsets in the metadata (a mirror's handover). Like a metadata file's
        # cluster entry it is the cluster's, whatever stream lists it (the planner takes any stream's override).
        self.overrides: dict[str, TimestampOffsets] = {}
        # Per cluster, its own stopping_offsets in the metadata: a consumer group's committed offsets.
        self.stop_overrides: dict[str, CommittedOffsets] = {}
        self.settings = dict(pipeline)
        self.committed: list[Plan] = []
        self.abandoned: set[int] = set()  # run_seqs given up, by an operator or by policy
        self.keepers: list[LeaseKeeper] = []
        self.lease_faults = 0  # renewals that fail (a state store timing out), from the next crash point on
        self.violations: list[str] = []
        self.crasher.on_point = self._on_point
        self.sink.on_append = self._check_writer
        self.runner = self._build(pipeline, [])
        self.lake = Lake(self.sink, self.pipeline)

    def _build(self, pipeline: dict[str, Any], planned: list[Any]) -> ModelRunner:
        project = ProjectConfig.model_validate(
            {
                "metadata_service": {"type": "single_cluster", "cluster_id": "unused", "bootstrap_servers": "x:1"},
                # Runs attach to the pipeline's shared session on the model's server (``ConnectServer``).
                "spark": {"remote": ConnectServer.URL},
                "pipelines": [
                    {
                        "id": "p",
                        "stream_pattern": "s[0-9]",
                        "sink": {"path": str(self.root / "sink")},
                        "state_path": str(self.root / "state"),
                        "value": JSON_VALUE,
                        "metadata_retries": {"attempts": 1, "backoff_seconds": 0},
                        # The group commit is monitoring only and talks to real brokers; the model has none.
                        "consumer_group": None,
                        **pipeline,
                    }
                ],
            }
        )
        runner = ModelRunner(context_module.PipelineContext(project, "p", metadata_service=self.service))
        runner.planned = planned
        self.pipeline = runner.pipeline
        self.store: StateStore = runner.store
        self._wrap_store()
        return runner

    def reconfigure(self, **changes: Any) -> None:
        """An operator edits the pipeline's config; the next invocation is a new process reading it."""
        self.settings.update(changes)
        self.runner = self._build(self.settings, self.runner.planned)

    def on_other_machine(self, host: str) -> Harness:
        """The same pipeline run by a process of another machine named ``host`` whose pid namespace id equals
        this one's (the initial pid namespace of every Linux machine has the same id) and whose pid does not
        exist here. It shares the world, the sink, the metadata and the state."""
        other = Harness(
            self.root, self.world, self.settings, sink=self.sink, service=self.service, archive=self.archive
        )
        other.server, other.streams, other.overrides = self.server, self.streams, self.overrides
        other.stop_overrides = self.stop_overrides
        other.lake = self.lake
        other.committed, other.abandoned = self.committed, self.abandoned
        other.runner.planned = self.runner.planned
        own = self.runner.owner
        other.runner.owner = RunOwner(host=host, pid=_absent_pid(), pidns=own.pidns, token="f" * 16)
        self.crasher.on_point, self.sink.on_append = self._on_point, self._check_writer
        return other

    def _wrap_store(self) -> None:
        store = self.store
        commit_run, commit_empty_run = store.commit_run, store.commit_empty_run

        def committing_run(plan: Plan, **kw: Any) -> int:
            version = commit_run(plan, **kw)
            self.committed.append(plan)
            self.crasher.point("after_state_commit")
            return version

        def committing_empty(plan: Plan, **kw: Any) -> int:
            version = commit_empty_run(plan, **kw)
            self.committed.append(plan)
            self.crasher.point("after_state_commit")
            return version

        abandon_run = store.abandon_run

        def abandoning(run_seq: int, **kw: Any) -> int:
            version = abandon_run(run_seq, **kw)
            self.abandoned.add(run_seq)
            return version

        store.commit_run = committing_run  # type: ignore[method-assign]
        store.commit_empty_run = committing_empty  # type: ignore[method-assign]
        store.abandon_run = abandoning  # type: ignore[method-assign]

    # ---- leases

    def _on_point(self, name: str) -> None:
        """A renewal of every live lease fails while ``lease_faults`` lasts (one renewal per crash point)."""
        for keeper in self.keepers:
            if self.lease_faults and not keeper._stopped.is_set() and keeper._lost is None:
                self.lease_faults -= 1
                self._renew_failing(keeper)

    @staticmethod
    def _renew_failing(keeper: LeaseKeeper) -> None:
        store = keeper._store

        def timing_out(*_: Any, **__: Any) -> int:
            raise StateError("simulated: the state's object store timed out (one request)")

        event = keeper._stopped
        store.lease = timing_out  # type: ignore[method-assign]
        keeper._stopped = _OneTick(event)  # type: ignore[assignment]
        try:
            keeper._loop()
        finally:
            keeper._stopped = event
            del store.lease

    def _check_writer(self, what: str, version: int) -> None:
        """A run's data may land only while its lease holds: after a lost lease another process may have taken
        the run over (or abandoned it)."""
        for keeper in self.keepers:
            plan = keeper._plan  # None: an operation's lease (a replay's, a maintenance's)
            ours = plan is not None and plan.run_seq == version
            if ours and keeper._lost is not None and not keeper._stopped.is_set():
                self.violations.append(f"run {version} wrote its {what} after its lease was lost ({keeper._lost})")

    # ---- metadata

    def publish_metadata(self) -> None:
        streams = []
        for sid, placements in sorted(self.streams.items()):
            clusters = {
                cid: ClusterMetadata(
                    cluster_id=cid,
                    bootstrap_servers=self.world.clusters[cid].bootstrap,
                    topics=frozenset(topics),
                    starting_offsets=self.overrides.get(cid),
                    stopping_offsets=self.stop_overrides.get(cid),
                )
                for cid, topics in placements.items()
                if topics
            }
            if clusters:
                streams.append(KafkaStream(stream_id=sid, clusters=clusters))
        self.service.set_streams(streams)

    # ---- execution

    @contextlib.contextmanager
    def patched(self, day: int | None = None) -> Iterator[int]:
        # Each invocation is a new process: a crash in the previous one left a planned head whose owner is this
        # (live) pid, so the clock jumps past every earlier lease, as it would have expired before a real restart.
        # ``day``: the same moment as an earlier invocation (two processes at once, on two machines).
        day = new_day() if day is None else day
        skew = timedelta(days=day)
        harness = self
        lake = self.lake

        class Keeper(LeaseKeeper):
            """Renews only when the model says (``_on_point``): a renewal that succeeds changes nothing else."""

            def start(self) -> LeaseKeeper:
                harness.keepers.append(self)
                return self

        swaps = [
            (abandon_module, "committed_txn_version", lake.committed_txn_version),
            (clock_module, "utc_now", lambda: datetime.now(UTC) + skew),
            (run_guard_module, "LeaseKeeper", Keeper),
            (RunDeadline, "attach", lambda deadline, spark: None),
            (realign_module, "committed_txn_versions", lake.committed_txn_versions),
            (realign_module, "landed_frontier", lake.landed_frontier),
            (abandon_module, "fence_run", lake.fence_run),
            (abandon_module, "is_fence", lake.is_fence),
            (abandon_module, "run_frontier", lake.run_frontier),
            (incremental_module, "landed_from_log", lake.landed_from_log),
            (abandon_module, "remove_run_folder", lambda table, app_id, run_seq: None),
            (abandon_module, "table_exists", lake.table_exists),
            (schema_check_module, "check_sink_schema", lambda spark, pipeline, prepared, tables: None),
            (runner_module, "crash_point", self.crasher.point),
            (recovery_module, "crash_point", self.crasher.point),
            (abandon_module, "crash_point", self.crasher.point),
            (runner_module, "arm_timer", lambda name: None),
            (context_module, "take_broker_snapshot", self.world.take_broker_snapshot),
            (context_module, "KafkaAdmin", self.world.admin),
            (reader_module, "read_splits", self.world.read_splits),
            (incremental_module, "write_incremental", lake.write_incremental),
            (incremental_module, "is_fence", lake.is_fence),
            (incremental_module, "crash_point", self.crasher.point),
            (per_stream_module, "crash_point", self.crasher.point),
            (pyspark_functions, "lit", lambda value: value),
            (archive_module, "archive_rows", self.archive.rows if self.archive else archive_module.archive_rows),
            (archive_module, "_file_pins", self.archive.pins if self.archive else archive_module._file_pins),
            (archive_module, "kafka_side", self.archive.kafka_side if self.archive else archive_module.kafka_side),
            (offset_reset_module, "take_broker_snapshot", self.world.take_broker_snapshot),
            (dead_letters_module, "replay", lake.replay),
            (replay_module, "crash_point", self.crasher.point),
            (dead_letters_module, "committed_txn_versions", lake.committed_txn_versions),
            (dead_letters_module, "table_exists", lake.table_exists),
            (dead_letters_module, "RunOwner", _KilledAtCrash),
            (backfill_module, "RunOwner", _KilledAtCrash),
            # One attempt: a backfill's retries only wait for a planned run, which in the model never finishes by
            # itself (RunInProgressError is what the retries end with).
            (backfill_module, "LEASE_ATTEMPTS", 1),
            (backfill_module, "crash_point", self.crasher.point),
            (sink_package, "merge_backfill", lake.merge_backfill),
            (pyspark_functions, "col", ModelColumn),
            (maintain_module, "table_files", lake.table_files),
            # The real ``compaction.maintain_table`` over the model's tables: Delta's steps are the lake's.
            (compaction_module, "table_files", lake.table_files),
            (compaction_module, "compact", lake.compact),
            (compaction_module, "vacuum", lake.vacuum),
            (compaction_module, "remove_finished_runs", lambda table, app_id, run_seq: 0),
            (compaction_module, "remove_leftovers", lambda table, older_than: 0),
            (compaction_module, "_table_retention_hours", lambda table: 168.0),
            (maintain_module, "RunOwner", _KilledAtCrash),
            (maintain_module, "crash_point", self.crasher.point),
            # A new process: no session cached yet; pyspark's sessions are the model server's.
            (remote_module, "_sessions", {}),
            (pyspark_sql, "SparkSession", self.server),
        ]
        saved = [(m, n, getattr(m, n)) for m, n, _ in swaps]
        for m, n, v in swaps:
            setattr(m, n, v)
        self.crasher.on_point, self.sink.on_append = self._on_point, self._check_writer
        active = getattr(ConnectSession._active_session, "session", None)
        # The model's server takes no token; the suite sets one for its real servers.
        token = os.environ.pop(TOKEN_ENV, None)
        try:
            yield day
        finally:
            for m, n, v in saved:
                setattr(m, n, v)
            ConnectSession._active_session.session = active
            if token is not None:
                os.environ[TOKEN_ENV] = token
            self.keepers = [k for k in self.keepers if not k._stopped.is_set() and k._lost is None]

    def run(
        self, crash_at: int | None, actions: Mapping[int, Callable[[str], None]] | None = None, day: int | None = None
    ) -> Any:
        self.crasher.arm(crash_at, actions)
        with self.patched(day):
            return self.runner.run()

    def abandon(self, run_seq: int, reason: str) -> int:
        """``dynamic-kafka abandon``: the real ``abandon_run``, with this harness's runner's guard."""
        self.crasher.arm(None)
        with self.patched():
            return abandon_module.abandon_run(self.runner.guard, run_seq, reason)

    def realign(self) -> Realignment:
        """``dynamic-kafka realign --yes``: the real ``Pipeline.realign`` (with a table per stream it reads the
        tables of the streams the metadata lists now too), over this harness's runner."""
        self.crasher.arm(None)
        pipeline = Pipeline.__new__(Pipeline)
        pipeline.context, pipeline._runner = self.runner.context, self.runner
        with self.patched():
            return pipeline.realign(apply=True)

    def reset_offsets(self, target: ResetTarget, selection: ResetSelection) -> OffsetReset:
        """``dynamic-kafka offsets reset --yes``: the real ``reset_offsets`` (one state commit, nothing to crash)."""
        self.crasher.arm(None)
        with self.patched():
            return offset_reset_module.reset_offsets(
                self.runner.context, target, selection, "model: an operator moves the offsets", yes=True
            )

    def replay(self, crash_at: int | None, run_seq: int | None) -> ReplayReport:
        """``dynamic-kafka dead-letters replay --yes``: the real ``replay_dead_letters``."""
        self.crasher.arm(crash_at)
        with self.patched():
            return dead_letters_module.replay_dead_letters(self.runner.context, run_seq=run_seq, yes=True)

    def maintain(self, crash_at: int | None, retention_hours: int | None) -> MaintenanceSummary:
        """``dynamic-kafka maintain``: the real ``maintain_pipeline`` (crash points before each step)."""
        self.crasher.arm(crash_at)
        with self.patched():
            return maintain_module.maintain_pipeline(self.runner.context, retention_hours=retention_hours)

    def backfill(self, start_ms: int, end_ms: int, crash_at: int | None, *, stall: bool = False) -> RunSummary | None:
        """``dynamic-kafka backfill``: the real ``backfill.run_backfill`` (plan, checks, the frontier with the
        backfill lease, one read, the window filter, one MERGE per table through ``merge.merge_tables``) with the
        lake's MERGEs. ``stall``: the client gives up while its first MERGE runs on the server (an orphan that
        lands later, or never); None is returned then."""
        self.crasher.arm(crash_at)
        start = datetime.fromtimestamp(start_ms / 1000, UTC)
        end = datetime.fromtimestamp(end_ms / 1000, UTC)
        self.lake.stall = stall
        try:
            with self.patched():
                summary = backfill_module.run_backfill(self.runner.context, start, end)
                self.crasher.point("after_backfill_merge")
        except Stalled:
            return None
        finally:
            self.lake.stall = False
        return summary

    def find_planned(self, plan: Plan) -> tuple[BrokerSnapshot, MetadataSnapshot, StateSnapshot]:
        # The runner adds the archive's part to the plan ``plan()`` returned, and pins the archive stream's decode
        # settings with it (``_with_archive``).
        for p, brokers, metadata, state in reversed(self.runner.planned):
            if p in (plan, plan.model_copy(update={"bootstrap": None, "config_pins": p.config_pins})):
                return brokers, metadata, state
        raise AssertionError(f"run {plan.run_seq} was committed but never planned by the model's runner")


class _KilledAtCrash:
    """``RunOwner`` for the operations that take the writer lease (replay, maintenance): the owner names a pid no
    process has, so that a lease left by an operation the model crashed is seen as its dead process's (a real
    ``kill -9``), as a crashed run's is by the clock jump (``Harness.patched``)."""

    @staticmethod
    def current(operation: OwnerOperation | None = None) -> RunOwner:
        return RunOwner.current(operation).model_copy(update={"pid": _absent_pid()})


def _absent_pid() -> int:
    """A pid no process of this machine has."""
    pid = 4_000_000
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        except PermissionError:
            pass
        pid -= 1


def epoch_ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)
