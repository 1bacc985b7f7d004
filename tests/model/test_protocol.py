"""Model-based test of the exactly-once protocol (issue 11): a Hypothesis state machine drives the REAL runner,
planner and state store against a simulated world (``world.py``), with crashes between any two steps of a run.

The invariant, checked after every operation: no record is in the sink (or dead-letter table) twice; and after
every committed run, every record the world still holds that the policies say must land (``Oracle``) is in the sink
exactly once, and every such record that retention or a topic deletion took before it landed was reported (a
``data_loss`` / ``topic_recreated`` finding, or a ``DataLossError``), never silently.

Runs ``DYNAMIC_KAFKA_MODEL_EXAMPLES`` examples (default 25: about 10 s of CPU; the wall time grows with the
machine's load); ``make soak`` sets it to thousands (``-s`` shows the counts). The suite's 25 are a smoke of the
invariants on fresh random examples every run (no example database); the search for new holes is the soak's job,
and every hole found so far is replayed exactly by ``test_holes.py``. Open holes are gated by ``world.KNOWN_HOLES``
(today: issue 24's item 6, see HOLES.md); see ``HOLES.md`` for their minimal examples and ``test_holes.py`` for their
replays.

Besides the brokers and the pipeline's own runs, the world has the actors of issue 24: operators (abandon,
realign, decode settings edited, also between a crash and its recovery), other writers of the sink (OPTIMIZE,
DELETE, VACUUM, a backfill's MERGE, one of them taking a run append's version), late writers (a killed client's
append finished by the server, a stalled backfill MERGE, at any later step or inside a run), a live run of another
machine (with the same host name or not), failed lease renewals, and a mirrored topic failing over with a
timestamp handover (a mirrored copy is the same record as its original for the invariant).

Issue 35 adds the operations, each through the product's own function: offsets reset, dead-letter replay and
maintenance (with crashes inside the last two), a bootstrap archive landed over several parts whose files may be
rewritten, and state backups taken under a planned run. A table per stream (a ``{stream}`` sink: each record once,
in its topic's first stream's table) and the pipeline's shared Spark Connect session expiring between or during
runs are driven too. How the model runs the product's steps that call Spark (through ports of their own, the
model's tables storing rows only): docs/design.md, "How the protocol model drives the product", and
docs/decisions/0070-protocol-model.md and 0085-model-ports.md.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from dynamic_kafka.errors import (
    ArchiveChangedError,
    ClusterUnreachableError,
    CommitOverwrittenError,
    ConfigError,
    DataLossError,
    DynamicKafkaError,
    RunInProgressError,
    SparkJobError,
    StateBehindSinkError,
    StateError,
    TopicMissingError,
    TopicRecreatedError,
    UndecodableRecordError,
)
from dynamic_kafka.initializers import CommittedOffsets, CustomOffsets, SpecificOffsets, TimestampOffsets
from dynamic_kafka.model.snapshots import BrokerSnapshot, StateSnapshot
from dynamic_kafka.operations.offsets_reset import ResetSelection, ResetTarget
from dynamic_kafka.sink.tables import backfill_app_id
from tests.model.world import JSON_VALUE, KNOWN_HOLES, Archive, Crash, Harness, Orphan, Record, World, new_day

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from dynamic_kafka.metadata.snapshot import MetadataSnapshot
    from dynamic_kafka.model.plan import Plan, TopicPartition
    from dynamic_kafka.model.snapshots import PartitionOffsets, TopicSnapshot
    from dynamic_kafka.operations.offsets_reset import OffsetReset

pytestmark = pytest.mark.model

CLUSTERS = ("c1", "c2")
TOPICS = ("a", "b")
STREAMS = ("s1", "s2")
RENAMED = ("s0", "s4")  # the new ids of renamed streams: one sorting before the others, one after

STATS: Counter[str] = Counter()

# The starting initializers the model draws besides earliest and latest: per-partition offsets whose other
# partitions follow the consumer group ``group_commits`` moves (then latest), and a user's own function. Either
# places only a partition's first start: read again at a later run, it would land records twice.
STARTING: dict[str, dict[str, Any]] = {
    "specific": {"specific": {"offsets": {"a": {0: 1}}, "group_id": "ahead", "fallback": "latest"}},
    "custom": {"custom": {"function": "tests.support.initializers:two_before_latest"}},
}

# The stopping initializer the model draws besides latest: a user's own function that holds each partition's newest
# record back at every run. Its answer moves the committed offsets; a crashed run must stop where it was planned to.
HELD_BACK = 1
STOPPING: dict[str, dict[str, Any]] = {
    "custom": {"custom": {"function": "tests.support.initializers:hold_back", "args": {"back": HELD_BACK}}},
}

Key = tuple[str, str, int]  # cluster, topic id, partition


class ProtocolViolationError(AssertionError):
    """The protocol broke its promise in the model."""


class Oracle:
    """Which records must land, from the policies alone (never from the planner's code).

    A partition of a topic id is "watched" from the first committed run that saw it subscribed; records at offsets
    from ``required_from`` on must land. ``required_from`` is the earliest offset for a new partition of a known
    topic, for a recreated topic (``on_topic_recreated: reset``) and for a new topic on a stream the state already
    tracks (Flink's rule for discovered partitions; hole 9); otherwise the starting initializer decides.
    """

    def __init__(self, world: World, harness: Harness, holes: frozenset[str]) -> None:
        self.world = world
        self.harness = harness
        self.holes = holes
        self.required_from: dict[Key, int] = {}
        self.topic_ids: dict[tuple[str, str], set[str]] = {}
        self.reported: dict[Key, list[tuple[int, int]]] = {}
        self.reported_topics: set[tuple[str, str]] = set()  # (cluster, topic id): loss reported for all of it
        # Offsets an offsets reset skipped forward over: reported in its history entry, owed to no table.
        self.skipped: dict[Key, list[tuple[int, int]]] = {}
        self.blocked: str | None = None
        self.archive_topic: str | None = None
        self.tables: dict[tuple[str, str], str] = {}  # (cluster, topic) -> the stream whose table it lands in

    def on_reset(self, reset: OffsetReset) -> None:
        """An applied ``offsets reset``: a range it skips is owed to no table (its history entry names it)."""
        for c in reset.changes:
            if c.topic_id is not None and c.to_offset > c.from_offset:
                key = (c.cluster_id, c.topic_id, c.partition)
                self.skipped.setdefault(key, []).append((c.from_offset, c.to_offset))

    def _is_skipped(self, r: Record) -> bool:
        return any(lo <= r.offset < hi for lo, hi in self.skipped.get((r.cluster_id, r.topic_id, r.partition), []))

    def _is_reported(self, r: Record) -> bool:
        if (r.cluster_id, r.topic_id) in self.reported_topics:
            return True
        return any(lo <= r.offset < hi for lo, hi in self.reported.get((r.cluster_id, r.topic_id, r.partition), []))

    def report_losses(self, error: DataLossError) -> None:
        for lost in error.losses:
            for tid in self.topic_ids.get((lost.cluster_id, lost.topic), set()):
                key = (lost.cluster_id, tid, lost.partition)
                self.reported.setdefault(key, []).append((lost.from_offset, lost.to_offset))

    def on_commit(self, plan: Plan, brokers: BrokerSnapshot, metadata: MetadataSnapshot, state: StateSnapshot) -> None:
        starting = self.harness.pipeline.starting_offsets.kind
        topics = metadata.topics()
        # Streams the state tracked when the run was planned: a topic new to one of them is read from earliest.
        tracked = {sid for row in state.partitions.values() for sid in row.stream_ids}
        current: dict[tuple[str, str], str] = {}
        for (cid, topic), sids in topics.items():
            cluster = brokers.clusters.get(cid)
            snap = cluster.topics.get(topic) if cluster is not None and cluster.reachable else None
            if snap is None or not snap.exists or snap.topic_id is None:
                continue
            tid = snap.topic_id
            current[(cid, topic)] = tid
            known_ids = self.topic_ids.setdefault((cid, topic), set())
            fresh, recreated = tid not in known_ids, bool(known_ids - {tid})
            for p, offsets in snap.partitions.items():
                key = (cid, tid, p)
                if key in self.required_from:
                    continue
                override = self.harness.overrides.get(cid)
                archive = self.harness.archive
                if archive is not None and fresh and not recreated and tid == self.archive_topic:
                    # The bootstrap's first run starts Kafka at ``until``: the archive holds what is older.
                    rf = self.world.first_at(tid, p, archive.until_ms, offsets.latest)
                elif not fresh or recreated:
                    rf = offsets.earliest
                elif override is not None:
                    # The cluster's own starting offsets apply to a partition without state (issue 24, item 1).
                    rf = self.world.first_at(tid, p, override.timestamp_ms, offsets.latest)
                elif starting == "earliest" or tracked.intersection(sids):
                    rf = offsets.earliest
                else:
                    rf = self._first_start(topic, p, snap, offsets)
                self.required_from[key] = rf
            known_ids.add(tid)
        split_ids = {(s.cluster_id, s.topic, s.partition): s.topic_id for s in plan.splits}
        for f in plan.findings:
            if f.kind == "data_loss" and f.cluster_id and f.topic and f.partition is not None:
                lost_id = split_ids.get((f.cluster_id, f.topic, f.partition))
                if lost_id is not None and f.from_offset is not None and f.to_offset is not None:
                    lost = (f.from_offset, f.to_offset)
                    self.reported.setdefault((f.cluster_id, lost_id, f.partition), []).append(lost)
            if f.kind == "topic_recreated" and f.cluster_id and f.topic:
                for tid in self.topic_ids.get((f.cluster_id, f.topic), set()) - {current.get((f.cluster_id, f.topic))}:
                    self.reported_topics.add((f.cluster_id, tid))
        self.on_tables(plan, metadata)
        self.check_run(plan, brokers, metadata)
        self.check_archive()

    def _first_start(self, topic: str, partition: int, snap: TopicSnapshot, offsets: PartitionOffsets) -> int:
        """Where the pipeline's own starting initializer places a partition no run has read (``STARTING``)."""
        starting = self.harness.pipeline.starting_offsets
        if isinstance(starting, SpecificOffsets):
            listed = starting.offsets.get(topic, {}).get(partition)
            # The group's offset as the brokers answered the plan (the group may move on before the commit).
            wanted = listed if listed is not None else snap.start_lookups.get(partition)
            return offsets.latest if wanted is None else min(max(wanted, offsets.earliest), offsets.latest)
        if isinstance(starting, CustomOffsets):
            return max(offsets.earliest, offsets.latest - 2)  # tests.support.initializers:two_before_latest
        return offsets.latest

    def check_archive(self) -> None:
        """Every row of every archive file a committed part read (as its plan pinned it: the file may have been
        rewritten since) landed exactly once, and a part that left files
        for later is followed by the next part (``max_files_per_run``)."""
        archive = self.harness.archive
        if archive is None or self.blocked is not None:
            return
        landed = self.landed()
        outstanding: tuple[str, ...] = ()
        for plan in self.harness.committed:
            read = plan.bootstrap
            if read is None:
                if outstanding:
                    raise ProtocolViolationError(
                        f"run {plan.run_seq} committed without the bootstrap's next part: archive files "
                        f"{', '.join(outstanding)} never land"
                    )
                continue
            for name in read.files:
                for r in archive.as_pinned(name, read.file_pins):
                    if r.ts_ms < archive.until_ms:
                        self._check_record(r, landed, f"run {plan.run_seq} (archive file {name})")
            outstanding = read.remaining

    def _stop_bound(self, cluster_id: str, snap: TopicSnapshot, partition: int, metadata: MetadataSnapshot) -> int:
        """How far runs may read a partition, from the policies and the brokers' answers the plan was made from:
        its latest offset, where a consumer group got to when the cluster stops at committed offsets, or
        ``HELD_BACK`` before latest under the custom stopping function."""
        latest = snap.partitions[partition].latest
        pipeline = self.harness.pipeline
        _, stopping = metadata.initializers(cluster_id, pipeline.starting_offsets, pipeline.stopping_offsets)
        if isinstance(stopping, CustomOffsets):
            return max(snap.partitions[partition].earliest, latest - HELD_BACK)
        if not isinstance(stopping, CommittedOffsets):
            return latest
        found = snap.stop_lookups.get(partition)
        if found is None:
            return latest if stopping.reset == "latest" else 0
        return min(found, latest)

    def check_run(self, plan: Plan, brokers: BrokerSnapshot, metadata: MetadataSnapshot) -> None:
        """Liveness after a committed run: what it covered landed exactly once, losses were reported."""
        if self.blocked is not None or plan.capped:
            return
        landed = self.landed()
        for s in plan.splits:
            if s.draining or s.topic_id is None:
                continue
            bound = self._stop_bound(
                s.cluster_id, brokers.clusters[s.cluster_id].topics[s.topic], s.partition, metadata
            )
            rf = self.required_from.get((s.cluster_id, s.topic_id, s.partition))
            if rf is None:
                continue
            history = self.world.by_topic_id[s.topic_id].partitions[s.partition].history
            for offset in range(rf, bound):
                r = history.get(offset)
                if r is not None:
                    self._check_record(r, landed, f"run {plan.run_seq}")
            # Older incarnations of the same topic name: what they held unread is lost; it must have been said.
            for old in self.topic_ids.get((s.cluster_id, s.topic), set()) - {s.topic_id}:
                for p, part in enumerate(self.world.by_topic_id[old].partitions):
                    orf = self.required_from.get((s.cluster_id, old, p))
                    if orf is None:
                        continue
                    for offset, r in part.history.items():
                        if offset >= orf:
                            self._check_record(r, landed, f"run {plan.run_seq} (old topic id {old})")

    def landed(self) -> Counter[int]:
        """How often each record is in the tables (with a table per stream: in all of them)."""
        return self.harness.lake.landed()

    def _tables(self, r: Record) -> str:
        found = self.harness.lake.where(r)
        if not self.harness.lake.per_stream:
            rows, dead = found.get("", (0, 0))
            return f" (sink table {rows}, dead letters {dead})"
        return " (" + ", ".join(f"stream {s}'s sink {n}, dead letters {d}" for s, (n, d) in sorted(found.items())) + ")"

    def on_tables(self, plan: Plan, metadata: MetadataSnapshot) -> None:
        """With a table per stream, the table a topic's records land in, for good: the first stream listing it
        (the shared-topic rule) when a committed run first read it."""
        topics = metadata.topics()
        for s in plan.splits:
            sids = topics.get((s.cluster_id, s.topic))
            if sids:
                self.tables.setdefault((s.cluster_id, s.topic), sids[0])

    def on_backfill(self, recorded: Iterable[TopicPartition], streams: Mapping[str, Mapping[str, set[str]]]) -> None:
        """With a table per stream, a topic a backfill recorded a frontier of before any committed run read it
        lands in the table of the first stream listing it then (the backfill merges it there), for good."""
        for key in recorded:
            listing = sorted(sid for sid, placed in streams.items() if key.topic in placed.get(key.cluster_id, ()))
            if listing:
                self.tables.setdefault((key.cluster_id, key.topic), listing[0])

    def _check_table(self, r: Record, when: str, where: str) -> None:
        """A record lands in the table of its topic's stream (``on_tables``), not in another stream's."""
        lake = self.harness.lake
        wanted = self.tables.get((r.cluster_id, r.topic))
        if not lake.per_stream or wanted is None:
            return
        found = sorted(lake.where(r))
        if found and found != [wanted]:
            raise ProtocolViolationError(
                f"after {when}: record {where} is in the table of stream {found[0]}, not in stream {wanted}'s, "
                f"where its topic landed first{self._tables(r)}"
            )

    def _check_record(self, r: Record, landed: Counter[int], when: str) -> None:
        if r.identity in self.harness.lake.holder.purged:
            return  # a user's DELETE took it out of the sink on purpose
        n = landed[r.identity]
        where = f"{r.cluster_id}/{r.topic}[{r.partition}]@{r.offset} (topic id {r.topic_id}, uid {r.uid})"
        if r.identity != r.uid:
            where += f" (a mirrored copy of uid {r.identity})"
        if n > 1:
            raise ProtocolViolationError(f"after {when}: record {where} is in the sink {n} times{self._tables(r)}")
        self._check_table(r, when, where)
        if n == 0 and self._is_skipped(r):
            return  # an operator's reset skipped it, and the run history says so
        if n == 0 and r.gone is None:
            raise ProtocolViolationError(f"after {when}: record {where} is still on the broker but not in the sink")
        if n == 0 and r.gone in ("retention", "deleted") and not self._is_reported(r):
            raise ProtocolViolationError(f"after {when}: record {where} was lost ({r.gone}) and no finding reported it")


class ProtocolMachine(RuleBasedStateMachine):
    """The world, the pipeline, crashes and recovery."""

    holes: ClassVar[frozenset[str]] = KNOWN_HOLES

    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="dk-model-"))
        self.world = World()
        for cid in CLUSTERS:
            self.world.add_cluster(cid)
        self.world.create_topic("c1", "a", 2)
        self.world.create_topic("c1", "b", 1)
        self.world.create_topic("c2", "a", 1)
        self.harness: Harness
        self.oracle: Oracle
        self.processed = 0
        self.pending = False  # the state has a planned run (a crash left it)
        self.backup: Path | None = None
        self.backup_settings: dict[str, Any] = {}
        self.backup_edited = False
        self.frontier_topics: set[tuple[str, str]] = set()
        self.state = StateSnapshot(pipeline_id="p")
        self.pending_seq = 0
        self.edited_under_plan = False  # a pinned setting was edited while the head run was planned
        self.mirror: str | None = None  # the cluster producers write topic m to (None: no mirrored topic yet)
        self.archive_topic: str | None = None

    def _history(self) -> Archive:
        """Topic a's history before the bootstrap's ``until``, in Kafka and in three archive files (round robin,
        in time order); retention has taken the first record from a[0] (the archive still holds it)."""
        for partition in (0, 1):
            self.world.produce("c1", "a", partition, 2, txn=False, bad=False)
        history = Archive(str(self.root / "archive"), self.world.clock_ms + 1)
        Path(history.location).mkdir()
        older = sorted(self.world.records.values(), key=lambda r: r.ts_ms)
        for i, r in enumerate(older):
            history.files.setdefault(f"{history.location}/part-{i % 3}.json", []).append(r)
        self.world.delete_records("c1", "a", 0, 1)
        self.archive_topic = self.world.clusters["c1"].topics["a"].topic_id
        STATS["archives"] += 1
        return history

    def teardown(self) -> None:
        if hasattr(self, "harness"):
            self.count_final()
        shutil.rmtree(self.root, ignore_errors=True)

    # ------------------------------------------------------------------------------------------------ setup

    @initialize(
        starting=st.sampled_from(["earliest", "latest", "specific", "custom"]),
        stopping=st.sampled_from(["latest", "latest", "latest", "custom"]),
        on_data_loss=st.sampled_from(["skip", "skip", "fail"]),
        drain_removed=st.booleans(),
        skip_unreachable=st.booleans(),
        cap=st.sampled_from([None, None, 3]),
        archive=st.sampled_from([None, None, 1, 2]),
        per_stream=st.sampled_from([False, False, True]),
        on_topic_missing=st.sampled_from(["warn", "warn", "fail"]),
    )
    def setup(
        self,
        starting: str,
        on_data_loss: str,
        drain_removed: bool,
        skip_unreachable: bool,
        cap: int | None,
        stopping: str = "latest",
        archive: int | None = None,
        per_stream: bool = False,
        on_topic_missing: str = "warn",
    ) -> None:
        """``archive``: a bootstrap archive of topic a's history in three files, landed ``archive`` files a run
        (not with ``per_stream``, which the product refuses); ``per_stream``: a table per stream
        (``sink.path: tables/{stream}``). ``on_topic_missing: fail`` refuses every run and backfill while a
        subscribed topic is deleted."""
        pipeline: dict[str, Any] = {
            "starting_offsets": STARTING.get(starting, starting),
            "stopping_offsets": STOPPING.get(stopping, stopping),
            "on_data_loss": on_data_loss,
            "on_topic_recreated": "reset",
            "on_topic_missing": on_topic_missing,
            "drain_removed": drain_removed,
            "skip_unreachable_clusters": skip_unreachable,
            "max_records_per_partition": cap,
        }
        history = None
        if per_stream:
            pipeline["sink"] = {"path": str(self.root / "tables" / "{stream}")}
            STATS["tables per stream"] += 1
        elif archive is not None:
            history = self._history()
            until = datetime.fromtimestamp(history.until_ms / 1000, UTC)
            pipeline["bootstrap"] = {
                "path": history.location,
                "format": "json",
                "until": until.isoformat(),
                "cluster": "c1",
                "stream": "s1",
                "max_files_per_run": archive,
            }
        if stopping == "custom":
            STATS["custom stops"] += 1
        STATS["sequences"] += 1
        self.harness = Harness(self.root, self.world, pipeline, archive=history)
        self.oracle = Oracle(self.world, self.harness, self.holes)
        self.oracle.archive_topic = self.archive_topic
        self.harness.streams = {"s1": {"c1": {"a"}}}
        self.harness.publish_metadata()

    # ------------------------------------------------------------------------------------------------ world

    @rule(
        cid=st.sampled_from(CLUSTERS),
        topic=st.sampled_from(TOPICS),
        partition=st.integers(0, 3),
        count=st.integers(1, 4),
        txn=st.booleans(),
        bad=st.booleans(),
        lax=st.booleans(),
    )
    def produce(
        self, cid: str, topic: str, partition: int, count: int, txn: bool, bad: bool, lax: bool = False
    ) -> None:
        """``bad``: the first record is not JSON; ``lax``: the last has a field the value schema lacks."""
        if topic in self.world.clusters[cid].topics:
            self.world.produce(cid, topic, partition, count, txn=txn, bad=bad, lax=lax)
            STATS["records"] += count

    @rule(
        cid=st.sampled_from(CLUSTERS),
        topic=st.sampled_from(TOPICS),
        partition=st.integers(0, 3),
        count=st.integers(1, 5),
    )
    def retention(self, cid: str, topic: str, partition: int, count: int) -> None:
        if topic in self.world.clusters[cid].topics:
            self.world.delete_records(cid, topic, partition, count)

    @rule(
        cid=st.sampled_from(CLUSTERS),
        topic=st.sampled_from(TOPICS),
        partition=st.integers(0, 3),
        count=st.integers(1, 3),
    )
    def truncation(self, cid: str, topic: str, partition: int, count: int) -> None:
        """An unclean leader election: the log end moves back, the next records get the same offsets again."""
        if topic in self.world.clusters[cid].topics:
            self.world.truncate(cid, topic, partition, count)

    @rule(cid=st.sampled_from(CLUSTERS), topic=st.sampled_from(TOPICS), partition=st.integers(0, 3))
    def leader_change(self, cid: str, topic: str, partition: int) -> None:
        """A clean leader change (a broker restart): a new leader epoch, no record lost; nothing may be flagged."""
        if topic in self.world.clusters[cid].topics:
            self.world.leader_change(cid, topic, partition)

    @rule(
        cid=st.sampled_from(CLUSTERS),
        topic=st.sampled_from(TOPICS),
        partition=st.integers(0, 3),
        pick=st.integers(0, 9),
    )
    def compaction(self, cid: str, topic: str, partition: int, pick: int) -> None:
        if topic in self.world.clusters[cid].topics:
            self.world.compact(cid, topic, partition, pick)

    @rule(
        cid=st.sampled_from(CLUSTERS),
        topic=st.sampled_from(TOPICS),
        partitions=st.integers(1, 3),
        gone_first=st.booleans(),
    )
    def recreate_topic(self, cid: str, topic: str, partitions: int, gone_first: bool) -> None:
        """Delete (if it exists) and create again: a new topic id, any partition count."""
        if topic in self.world.clusters[cid].topics:
            self.world.delete_topic(cid, topic)
            if gone_first:
                return  # stays missing until a later recreate
        self.world.create_topic(cid, topic, partitions)

    @rule(cid=st.sampled_from(CLUSTERS), up=st.booleans())
    def cluster_availability(self, cid: str, up: bool) -> None:
        self.world.clusters[cid].up = up

    # --------------------------------------------------------------------------------------------- metadata

    @rule(sid=st.sampled_from(STREAMS), cid=st.sampled_from(CLUSTERS), topic=st.sampled_from(TOPICS))
    def place_topic(self, sid: str, cid: str, topic: str) -> None:
        """Stream added, cluster added or re-added, topic added or moved here (with ``unplace_topic``)."""
        self.harness.streams.setdefault(sid, {}).setdefault(cid, set()).add(topic)
        self.harness.publish_metadata()

    @rule(
        sid=st.sampled_from(STREAMS),
        cid=st.sampled_from(CLUSTERS),
        topic=st.sampled_from(TOPICS),
        count=st.integers(1, 3),
    )
    def place_topic_in_use(self, sid: str, cid: str, topic: str, count: int) -> None:
        """A migration: the topic already holds records when the metadata starts listing it."""
        self.produce(cid, topic, 0, count, False, False)
        self.place_topic(sid, cid, topic)

    @rule(sid=st.sampled_from(STREAMS), cid=st.sampled_from(CLUSTERS), topic=st.sampled_from(TOPICS))
    def unplace_topic(self, sid: str, cid: str, topic: str) -> None:
        self.harness.streams.get(sid, {}).get(cid, set()).discard(topic)
        self.harness.publish_metadata()

    @rule(sid=st.sampled_from(STREAMS), cid=st.sampled_from(CLUSTERS))
    def remove_cluster_from_stream(self, sid: str, cid: str) -> None:
        self.harness.streams.get(sid, {}).pop(cid, None)
        self.harness.publish_metadata()

    @rule(sid=st.sampled_from(STREAMS), to=st.sampled_from(RENAMED))
    def rename_stream(self, sid: str, to: str) -> None:
        """The metadata renames a stream (its topics listed under another id): with a table per stream, the
        partitions it landed keep their table."""
        if sid not in self.harness.streams:
            return
        for cid, topics in self.harness.streams.pop(sid).items():
            self.harness.streams.setdefault(to, {}).setdefault(cid, set()).update(topics)
        self.harness.publish_metadata()
        STATS["stream renames"] += 1

    @rule(cid=st.sampled_from(CLUSTERS), active=st.booleans())
    def cluster_activity(self, cid: str, active: bool) -> None:
        """The service calls a cluster inactive (or active again) while the streams still list it."""
        self.harness.service.set_active(cid, active)

    @rule(cid=st.sampled_from(CLUSTERS), reset=st.sampled_from([None, "earliest", "latest"]))
    def stop_at_group(self, cid: str, reset: str | None) -> None:
        """A cluster's runs stop where a consumer group got to (``reset`` where it has no offset), or no longer."""
        if reset is None:
            self.harness.stop_overrides.pop(cid, None)
        else:
            self.harness.stop_overrides[cid] = CommittedOffsets(group_id="ahead", reset=reset)
        self.harness.publish_metadata()

    @rule(
        cid=st.sampled_from(CLUSTERS),
        topic=st.sampled_from(TOPICS),
        partition=st.integers(0, 3),
        back=st.integers(0, 3),
    )
    def group_commits(self, cid: str, topic: str, partition: int, back: int) -> None:
        """The group a committed stopping point follows gets to ``back`` records before the end (or goes back)."""
        t = self.world.clusters[cid].topics.get(topic)
        if t is not None and partition < len(t.partitions):
            self.world.group_offsets[(cid, topic, partition)] = max(0, t.partitions[partition].end - back)

    @rule(sid=st.sampled_from(STREAMS))
    def remove_stream(self, sid: str) -> None:
        self.harness.streams.pop(sid, None)
        self.harness.publish_metadata()

    @rule(cid=st.sampled_from(CLUSTERS), with_metadata=st.booleans())
    def change_bootstrap(self, cid: str, with_metadata: bool) -> None:
        """The cluster moves to new brokers; the metadata follows now, or at a later ``publish``."""
        cluster = self.world.clusters[cid]
        n = int(cluster.bootstrap.split("-")[1].split(":")[0]) + 1
        cluster.bootstrap = f"{cid}-{n}:9092"
        if with_metadata:
            self.harness.publish_metadata()

    @rule()
    def publish(self) -> None:
        self.harness.publish_metadata()

    # ------------------------------------------------------------------------------------------------- runs

    def _sink_ahead(self) -> bool:
        last = self.state.last_run
        committed = 0 if last is None else (last.run_seq if last.status == "committed" else last.run_seq - 1)
        lake = self.harness.lake
        backfills = lake.highest_txn(backfill_app_id("p"))
        # The dead-letter table is written first: after a crash between the two appends it is the one ahead.
        runs = lake.highest_txn("p")
        return runs > committed or backfills > self.state.backfill_sequence

    def _pending_plan_unreachable(self) -> bool:
        last = self.state.last_run
        if last is None or last.status != "planned":
            return False
        for s in last.plan.read_splits:
            c = self.world.clusters.get(s.cluster_id)
            if c is None or not c.up:
                return True
            described = self.harness.service.describe_cluster(s.cluster_id)
            if described is None or described.bootstrap_servers != c.bootstrap:
                return True
        return False

    @rule(crash_at=st.one_of(st.none(), st.integers(0, 6)))
    def run(self, crash_at: int | None) -> None:
        self._run(crash_at)

    def _run(
        self,
        crash_at: int | None,
        actions: Mapping[int, Callable[[str], None]] | None = None,
        *,
        recreating: bool = False,
        expiring: bool = False,
    ) -> None:
        """``recreating``: a topic is recreated during the run; ``expiring``: the server closes its session."""
        STATS["runs"] += 1
        sink_ahead = self._sink_ahead()
        pending_unreachable = self._pending_plan_unreachable()
        pending_edited = self.pending and self.edited_under_plan
        replaced = len(self.harness.sink.replaced)
        try:
            self.harness.run(crash_at, actions)
        except Crash:
            STATS["crashes"] += 1
        except CommitOverwrittenError as e:
            if len(self.harness.sink.replaced) == replaced:
                raise ProtocolViolationError(f"a run's commit was overwritten though no one else wrote: {e}") from e
            STATS["overwritten"] += 1  # a foreign commit replaced the run's append: retriable, nothing committed
        except TopicRecreatedError as e:
            if not (recreating and e.retriable):
                raise ProtocolViolationError(f"run failed: {type(e).__name__}: {e}") from e
            STATS["recreated under a run"] += 1  # given up under reset: the next run reads the new topic
        except ConfigError as e:
            if not pending_edited:
                raise ProtocolViolationError(f"run failed: {type(e).__name__}: {e}") from e
            STATS["refused"] += 1  # a crashed run's pinned settings were edited: it waits for the operator
        except UndecodableRecordError:
            if self.harness.pipeline.on_decode_error != "fail":
                raise
        except SparkJobError as e:
            if "ConcurrentAppendException" in str(e):
                STATS["conflicts"] += 1  # a MERGE landed under the run's anti-join read: retriable
            elif expiring and "SESSION_CLOSED" in str(e):
                STATS["sessions lost mid-run"] += 1  # a job of the closed session failed: the next run recovers
            elif not pending_unreachable:
                raise ProtocolViolationError(f"a run failed though every cluster it reads is reachable: {e}") from e
            else:
                STATS["unreachable"] += 1
        except DataLossError as e:
            if self.harness.pipeline.on_data_loss != "fail":
                raise ProtocolViolationError(f"DataLossError under on_data_loss: skip: {e}") from e
            self._check_truncations(e)
            self.oracle.report_losses(e)
            self.oracle.blocked = "data loss under on_data_loss: fail"
        except ClusterUnreachableError:
            STATS["unreachable"] += 1
        except TopicMissingError as e:
            self._check_missing(e)
            STATS["missing topics refused"] += 1
        except RunInProgressError as e:
            raise ProtocolViolationError(f"a lone runner was refused: {e}") from e
        except ArchiveChangedError as e:
            # Refused, nothing written: the operator puts the files back as the first plan pinned them (the
            # newest part's plan carries those pins), and the next run lands the part.
            landing = self.harness.store.load().landing_run
            archive = self.harness.archive
            if (
                archive is None
                or landing is None
                or landing.plan.bootstrap is None
                or not archive.put_back(landing.plan.bootstrap.file_pins)
            ):
                raise ProtocolViolationError(f"run failed though the archive is as pinned: {e}") from e
            STATS["archive changes refused"] += 1
        except DynamicKafkaError as e:
            self._raise_violations()  # what the run did before it failed comes first
            if sink_ahead:  # a fixed hole 2 refuses loudly: accepted, the pipeline waits for the operator
                self.oracle.blocked = f"refused: sink ahead of state: {e}"
            else:
                raise ProtocolViolationError(f"run failed: {type(e).__name__}: {e}") from e
        finally:
            self.harness.lease_faults = 0
        self._raise_violations()
        self._after_state_change()

    def _check_missing(self, error: TopicMissingError) -> None:
        """A run or backfill refused for missing topics: only under ``on_topic_missing: fail``, and only for topics
        the world does not have."""
        if self.harness.pipeline.on_topic_missing != "fail":
            raise ProtocolViolationError(f"TopicMissingError under on_topic_missing: warn: {error}") from error
        present = [(cid, t) for cid, t in error.missing if t in self.world.clusters[cid].topics]
        if present:
            raise ProtocolViolationError(f"refused for missing topics that exist: {present}") from error

    def _raise_violations(self) -> None:
        if self.harness.violations:
            raise ProtocolViolationError(self.harness.violations[0])

    def _check_truncations(self, error: DataLossError) -> None:
        """A truncation the run names must be real: the log was cut back across its first offset (a clean leader
        change must never be flagged)."""
        for t in error.truncated:
            topic = self.world.clusters[t.cluster_id].topics.get(t.topic)
            cuts = topic.partitions[t.partition].truncations if topic is not None else []
            if not any(new_end <= t.from_offset < old_end for new_end, old_end in cuts):
                raise ProtocolViolationError(f"a truncation was reported where none happened: {t}")

    # Runs are what the other rules prepare for: give them more weight than any single world change.
    @rule(crash_at=st.one_of(st.none(), st.integers(0, 6)))
    def run_again(self, crash_at: int | None) -> None:
        self.run(crash_at)

    @rule()
    def run_clean(self) -> None:
        self.run(None)

    def _after_state_change(self) -> None:
        for plan in self.harness.committed[self.processed :]:
            brokers, metadata, state = self.harness.find_planned(plan)
            self.oracle.on_commit(plan, brokers, metadata, state)
        self.processed = len(self.harness.committed)
        self.state = state = self.harness.store.load()
        pending = state.last_run is not None and state.last_run.status == "planned"
        if not pending or (self.pending and self.pending_seq != state.last_run.run_seq):
            self.edited_under_plan = False
        self.pending = pending
        self.pending_seq = state.last_run.run_seq if state.last_run is not None else 0
        self.frontier_topics = {(k.cluster_id, k.topic) for k in state.backfilled}

    @rule(data=st.data(), crash_at=st.one_of(st.none(), st.integers(0, 3)), stall=st.sampled_from([False, False, True]))
    def backfill(self, data: st.DataObject, crash_at: int | None, stall: bool = False) -> None:
        """A time-window backfill over part of what was produced so far; ``stall``: its MERGE is still running
        when the next steps happen (it lands at a later step, maybe in the middle of a run, or never)."""
        first = int(self.world.records[min(self.world.records)].ts_ms) if self.world.records else self.world.clock_ms
        start = data.draw(st.integers(first, self.world.clock_ms + 1), label="start_ms")
        end = data.draw(st.integers(start + 1, self.world.clock_ms + 2), label="end_ms")
        archive = self.harness.archive
        STATS["backfills"] += 1
        sink_ahead = self._sink_ahead()
        before = set(self.state.backfilled)
        try:
            self.harness.backfill(start, end, crash_at, stall=stall)
        except Crash:
            STATS["crashes"] += 1
        except (RunInProgressError, ClusterUnreachableError, SparkJobError):
            pass  # a planned run first, or a cluster down: the backfill fails with nothing merged
        except TopicMissingError as e:
            self._check_missing(e)
        except DataLossError:
            pass
        except StateBehindSinkError as e:
            if not sink_ahead:
                raise ProtocolViolationError(f"a backfill was refused though the state is current: {e}") from e
        except ConfigError as e:
            if archive is None or end > archive.until_ms:
                raise ProtocolViolationError(f"a backfill was refused: {e}") from e
            STATS["backfills refused"] += 1  # the window lies before the bootstrap's until: the archive's time
        self._after_backfill(before)

    def _after_backfill(self, before: set[TopicPartition]) -> None:
        """After a backfill (finished, failed or killed): the oracle learns the topics whose frontier it recorded."""
        self._after_state_change()
        self.oracle.on_backfill(set(self.state.backfilled) - before, self.harness.streams)

    @rule()
    def backup_state(self) -> None:
        """Copy the state table aside (an operator's backup)."""
        if not self.pending:
            self._copy_state()

    @rule()
    def backup_state_under_a_planned_run(self) -> None:
        """A backup taken while a run is planned (crashed, or in flight on another machine): restored, it puts the
        planned head back after that run committed or was abandoned."""
        if self.pending:
            self._copy_state()

    def _copy_state(self) -> None:
        state = Path(self.harness.store.path)
        if state.exists():
            self.backup = self.root / "backup"
            shutil.rmtree(self.backup, ignore_errors=True)
            shutil.copytree(state, self.backup)
            self.backup_settings = dict(self.harness.settings)
            self.backup_edited = self.edited_under_plan
            STATS["backups"] += 1

    @rule()
    def restore_state(self) -> None:
        """Restore the last backup (the state's own error hint suggests restoring or moving it)."""
        if self.backup is not None:
            state = Path(self.harness.store.path)
            shutil.rmtree(state)
            shutil.copytree(self.backup, state)
            STATS["restores"] += 1
            self._after_state_change()
            # A planned head put back is pinned to the settings of its plan: edited since, its recovery refuses.
            edited = self.backup_edited or self.backup_settings != self.harness.settings
            self.edited_under_plan = self.pending and edited

    @rule(pick=st.integers(0, 9), at=st.one_of(st.none(), st.integers(0, 2)))
    def rewrite_archive_files(self, pick: int, at: int | None) -> None:
        """Whoever writes the archive rewrites two of its files (a record moves from one to the next; the archive
        as a whole holds the same rows): now, or during the next run, at its ``at``-th step (between its plan and
        its read when ``at`` is its first)."""
        archive = self.harness.archive
        if archive is None:
            return

        def rewrite(point: str = "") -> None:
            names = sorted(archive.files)
            if archive.move(names[pick % len(names)], names[(pick + 1) % len(names)]):
                STATS["archive rewrites"] += 1

        if at is None:
            rewrite()
        else:
            self._run(None, {at: rewrite})

    # ------------------------------------------------------------------------------------------ operators

    @rule()
    def abandon(self) -> None:
        """`dynamic-kafka abandon` of the planned (crashed) head run, through the real ``abandon_run``."""
        head = self.state.last_run
        if head is None or head.status != "planned":
            return
        try:
            self.harness.abandon(head.run_seq, "model: the operator gives the run up")
        except StateError as e:
            streams = sorted({s.stream_id for s in head.plan.read_splits}) if self.harness.lake.per_stream else [""]
            if self.harness.lake.lacks("p", head.run_seq, streams):
                raise ProtocolViolationError(
                    f"abandon was refused though the sink lacks run {head.run_seq}: {e}"
                ) from e
            return  # complete in the sink: the next run commits it
        STATS["abandons"] += 1
        self._after_state_change()

    @rule()
    def realign(self) -> None:
        """`dynamic-kafka realign --yes` once a run was refused because the sink is ahead of the state."""
        if self.oracle.blocked is None or not self.oracle.blocked.startswith("refused: sink ahead"):
            return
        self.harness.realign()
        self.oracle.blocked = None
        STATS["realigns"] += 1
        self._after_state_change()

    @rule(setting=st.sampled_from(["json_strict", "json_strict", "on_decode_error", "value"]))
    def edit_config(self, setting: str) -> None:
        """An operator flips a decode setting, maybe between a crash and its recovery."""
        now = self.harness.pipeline
        value = {
            "json_strict": not now.json_strict,
            "on_decode_error": "fail" if now.on_decode_error == "dead_letter" else "dead_letter",
            "value": {"format": "string"} if now.value.format == "json" else JSON_VALUE,
        }[setting]
        self.harness.reconfigure(**{setting: value})
        self.edited_under_plan = self.edited_under_plan or self.pending
        STATS["edits"] += 1

    @rule(
        to=st.sampled_from(["earliest", "latest", "timestamp", "offset"]),
        scope=st.sampled_from(["all", "cluster", "topic", "partition"]),
        pick=st.integers(0, 9),
    )
    def offsets_reset(self, to: str, scope: str, pick: int) -> None:
        """`dynamic-kafka offsets reset --yes`, through the real ``reset_offsets``: rewind (the frontier keeps the
        sink's records from landing again) or skip forward (reported in the history), of one partition, one
        topic, one cluster or every active partition."""
        rows = sorted(self.state.partitions.items(), key=lambda kv: str(kv[0]))
        if not rows:
            return
        key, row = rows[pick % len(rows)]
        chosen = {"cluster_id": key.cluster_id, "topic": key.topic, "partition": key.partition}
        wanted = {"all": (), "cluster": ("cluster_id",), "topic": ("cluster_id", "topic")}.get(scope, tuple(chosen))
        selection = ResetSelection(**{k: v for k, v in chosen.items() if k in wanted})
        stamps = sorted(r.ts_ms for r in self.world.records.values())
        target = ResetTarget(
            kind=to,  # type: ignore[arg-type]
            timestamp_ms=stamps[pick * len(stamps) // 10] if to == "timestamp" and stamps else 0,
            offset=max(0, row.next_offset + pick % 7 - 4) if to == "offset" else None,
        )
        try:
            reset = self.harness.reset_offsets(target, selection)
        except (StateError, RunInProgressError) as e:
            if not self.pending:
                raise ProtocolViolationError(f"a reset was refused though no run is planned: {e}") from e
            return  # a planned run (crashed, or live on another machine) first
        except (ConfigError, TopicRecreatedError, ClusterUnreachableError):
            return  # outside the broker's range, below a floor, a topic recreated, a cluster down: nothing changed
        STATS["resets"] += 1
        self.oracle.on_reset(reset)
        self._after_state_change()

    @rule(crash_at=st.one_of(st.none(), st.integers(0, 2)), of_run=st.booleans())
    def replay_dead_letters(self, crash_at: int | None, of_run: bool) -> None:
        """`dynamic-kafka dead-letters replay --yes` (of every dead letter, or of one run's), through the real
        ``replay_dead_letters``, maybe killed at one of its steps (a Spark job killed while it runs may still
        land later)."""
        seqs = [seq for seq in self.harness.lake.dead_seqs() if seq is not None]
        run_seq = seqs[0] if of_run and seqs else None
        try:
            self.harness.replay(crash_at, run_seq)
        except Crash:
            STATS["crashes"] += 1
            STATS["replay crashes"] += 1
            self._after_state_change()
            return
        except (StateError, RunInProgressError) as e:
            if not self.pending:
                raise ProtocolViolationError(f"a replay was refused though no run is planned: {e}") from e
            return  # a planned run (crashed, or live on another machine) first
        STATS["replays"] += 1
        waiting = [r for r in self.harness.lake.awaiting_replay() if run_seq is None]
        if waiting:
            raise ProtocolViolationError(
                f"a finished replay left {len(waiting)} dead letters the sink holds, e.g. uid {waiting[0].uid}"
            )
        self._after_state_change()

    @rule(crash_at=st.one_of(st.none(), st.integers(0, 9)), retention=st.sampled_from([None, 168, 5, 1, 0]))
    def maintain(self, crash_at: int | None, retention: int | None) -> None:
        """`dynamic-kafka maintain [--vacuum-retention H]`, through the real ``maintain_pipeline``: OPTIMIZE and
        VACUUM of both tables, maybe killed before any step."""
        try:
            self.harness.maintain(crash_at, retention)
        except Crash:
            STATS["crashes"] += 1
            STATS["maintenance crashes"] += 1
            return
        except RunInProgressError as e:
            if not self.pending:
                raise ProtocolViolationError(f"maintenance was refused though no run is planned: {e}") from e
            return
        except StateError as e:
            if self.state.table_version is not None:
                raise ProtocolViolationError(f"maintenance was refused though the state exists: {e}") from e
            return  # another writer made the sink before any state: refused, not kept apart from runs
        except (ConfigError, ValueError):
            if self.harness.pipeline.vacuum_retention_problem(retention) is None:
                raise
            STATS["vacuums refused"] += 1  # under the floor (5 hours here): a late writer's files would go
            return
        STATS["maintenances"] += 1

    # -------------------------------------------------------------------------------------- other writers

    @rule(
        kind=st.sampled_from(["OPTIMIZE", "DELETE", "VACUUM", "backfill MERGE"]),
        pick=st.integers(0, 9),
        concurrent=st.booleans(),
    )
    def foreign_commit(self, kind: str, pick: int, concurrent: bool) -> None:
        """Another Spark process commits to the sink: now, or concurrently with the next run append, taking its
        version (delta-spark's local and S3 log stores check, then write: the later writer replaces the commit)."""
        if kind == "backfill MERGE" and not concurrent:
            return  # a MERGE that wins cleanly is the backfill rule's
        lake = self.harness.lake
        tables = [lake.tables[stream] for stream in sorted(lake.tables)]
        if not tables:
            return  # no stream's table yet
        tables[pick % len(tables)].foreign_commit(kind, pick, replace_next=concurrent)
        STATS["foreign commits"] += 1

    @staticmethod
    def _land(orphan: Orphan) -> None:
        """Lands a late write (at any step: between two, or at any point of a run)."""
        orphan.land()
        STATS["late writes"] += 1

    @rule(pick=st.integers(0, 9), never=st.sampled_from([False, False, True]))
    def late_write(self, pick: int, never: bool) -> None:
        """A write that outlived its client lands now (``never``: the server dropped it)."""
        orphans = self.harness.sink.orphans
        if orphans:
            orphan = orphans.pop(pick % len(orphans))
            self.harness.crasher.arm(None)  # between steps no call runs: a crash point armed by the last is void
            if not never:
                self._land(orphan)

    @rule(pick=st.integers(0, 9), at=st.integers(0, 5), crash_at=st.one_of(st.none(), st.integers(0, 6)))
    def run_with_a_late_write(self, pick: int, at: int, crash_at: int | None) -> None:
        """A run during which a write that outlived its client lands (at the run's ``at``-th step)."""
        orphans = self.harness.sink.orphans

        def land(point: str) -> None:
            del point  # the step is the one asked for
            if orphans:
                self._land(orphans.pop(pick % len(orphans)))

        self._run(crash_at, {at: land})

    @rule(
        cid=st.sampled_from(CLUSTERS),
        topic=st.sampled_from(TOPICS),
        partitions=st.integers(1, 3),
        count=st.integers(0, 3),
        at=st.integers(0, 2),
    )
    def run_with_a_topic_recreated(self, cid: str, topic: str, partitions: int, count: int, at: int) -> None:
        """A run during which a topic is deleted and created again (and ``count`` records produced to it), at the
        run's ``at``-th step: between its plan and its read when ``at`` is its first."""
        if topic not in self.world.clusters[cid].topics:
            return

        def recreate(point: str) -> None:
            self.recreate_topic(cid, topic, partitions, gone_first=False)
            if count:
                self.produce(cid, topic, 0, count, False, False)

        self._run(None, {at: recreate}, recreating=True)

    @rule(at=st.integers(0, 3))
    def run_with_a_failed_lease_renewal(self, at: int) -> None:
        """One renewal of the run's lease fails (the state's store timed out once), at the run's ``at``-th step."""

        def fail_once(point: str) -> None:
            self.harness.lease_faults = 1

        self._run(None, {at: fail_once})

    @rule(same_hostname=st.booleans())
    def run_beside_another_machine(self, same_hostname: bool) -> None:
        """A process on another machine planned a run and is still working on it when this one runs."""
        if self.pending:
            return
        other = self.harness.on_other_machine(socket.gethostname() if same_hostname else "another-machine")
        day = new_day()
        try:
            other.run(0, day=day)  # paused right after writing its plan: alive, lease fresh
        except Crash:
            pass
        except DynamicKafkaError:
            pass  # it could not plan (a cluster down, a refusal): nothing to race with
        self._after_state_change()
        if not self.pending:
            return
        owner = self.state.last_run.owner if self.state.last_run is not None else None
        try:
            self.harness.run(None, day=day)
        except RunInProgressError:
            STATS["refused live"] += 1
            return
        except (Crash, DynamicKafkaError):
            pass
        raise ProtocolViolationError(
            f"run {self.pending_seq}, planned by a live process of another machine ({owner}, same host name), was "
            "taken over as crashed"
        )

    # ------------------------------------------------------------------------- the shared Spark Connect session

    @rule()
    def expire_spark_sessions(self) -> None:
        """Between runs, the Spark Connect server closes every session left idle past its timeout, the pipeline's
        shared one among them, and refuses their ids from then on: the next run attaches to the next generation."""
        if self.harness.server.expire():
            STATS["session expiries"] += 1

    @rule(at=st.integers(0, 6), crash_at=st.one_of(st.none(), st.integers(0, 6)))
    def run_with_the_session_expiring(self, at: int, crash_at: int | None) -> None:
        """The server closes the run's session at the run's ``at``-th step (Spark counts a running query as idle):
        a later call of the run attaches again, a job of the closed session fails, and a job running when it
        closed may still commit later. Nothing is committed half; the next run recovers."""

        def expire(point: str) -> None:
            del point
            if self.harness.server.expire():
                STATS["session expiries"] += 1

        self._run(crash_at, {at: expire}, expiring=True)

    # --------------------------------------------------------------------------------------------- mirror

    @rule(partition=st.integers(0, 1), count=st.integers(1, 3), bad=st.booleans())
    def produce_mirrored(self, partition: int, count: int, bad: bool) -> None:
        """Produce to topic m on the cluster producers use; before the failover MirrorMaker 2 copies each record
        to c2 at once (same partition and timestamp)."""
        if self.mirror is None:
            for cid in CLUSTERS:
                self.world.create_topic(cid, "m", 2)
            self.mirror = "c1"
            self.harness.streams["s3"] = {"c1": {"m"}}
            self.harness.publish_metadata()
        produced = self.world.produce(self.mirror, "m", partition, count, txn=False, bad=bad)
        STATS["records"] += count
        if self.mirror == "c1":
            self.world.mirror("c2", "m", produced)

    @rule()
    def fail_over_to_the_mirror(self) -> None:
        """Stream s3 moves to the mirror c2 with a timestamp handover: c2's own ``starting_offsets`` in the metadata
        is the switch time, and producers write to c2 from then on."""
        if self.mirror != "c1":
            return
        switch = self.world.clock_ms + 1
        self.harness.streams["s3"] = {"c2": {"m"}}
        self.harness.overrides["c2"] = TimestampOffsets(timestamp_ms=switch)
        self.harness.publish_metadata()
        self.mirror = "c2"
        STATS["failovers"] += 1

    # ------------------------------------------------------------------------------------------ invariants

    @invariant()
    def no_record_twice(self) -> None:
        if not hasattr(self, "harness"):
            return
        twice = {uid: n for uid, n in self.oracle.landed().items() if n > 1}
        if twice:
            uid, n = next(iter(twice.items()))
            r = self.world.records[uid]
            STATS["duplicated"] += len(twice)
            raise ProtocolViolationError(
                f"record {r.cluster_id}/{r.topic}[{r.partition}]@{r.offset} (topic id {r.topic_id}) is in the sink "
                f"{n} times{self.oracle._tables(r)} ({len(twice)} records duplicated; a mirrored copy counts as its "
                "original)"
            )

    def count_final(self) -> None:
        """Counts for the report: records landed, and required records lost to retention or deletion (each one
        was reported, or a check would have failed)."""
        landed = self.harness.lake.landed()
        STATS["landed"] += len(landed)
        for r in self.world.records.values():
            rf = self.oracle.required_from.get((r.cluster_id, r.topic_id, r.partition))
            if rf is not None and r.offset >= rf and r.gone in ("retention", "deleted") and not landed[r.identity]:
                STATS["lost"] += 1


def examples() -> int:
    return int(os.environ.get("DYNAMIC_KAFKA_MODEL_EXAMPLES", "25"))


def run_machine(machine: type[ProtocolMachine], max_examples: int, steps: int = 40) -> None:
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=max_examples,
            # The suite's run (no DYNAMIC_KAFKA_MODEL_EXAMPLES) draws the same examples each time, so CI's verdict
            # is the commit's and a failure replays; a run given a number explores afresh (make soak).
            derandomize="DYNAMIC_KAFKA_MODEL_EXAMPLES" not in os.environ,
            stateful_step_count=steps,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
            report_multiple_bugs=False,
        ),
    )


# CPU-bound (about 0.1 s of CPU per run); the suite's 600 s limit is for a hung test, and a loaded machine can
# stretch several hundred examples past it, as can a soak's thousands.
@pytest.mark.timeout(0)
def test_protocol_exactly_once(capsys: pytest.CaptureFixture[str]) -> None:
    STATS.clear()
    run_machine(ProtocolMachine, examples())
    with capsys.disabled():
        print(
            "\nmodel: "
            + ", ".join(
                f"{k} {STATS[k]}"
                for k in (
                    "sequences",
                    "runs",
                    "crashes",
                    "backfills",
                    "backfills refused",
                    "abandons",
                    "edits",
                    "refused",
                    "foreign commits",
                    "late writes",
                    "conflicts",
                    "refused live",
                    "failovers",
                    "tables per stream",
                    "custom stops",
                    "stream renames",
                    "session expiries",
                    "sessions lost mid-run",
                    "realigns",
                    "resets",
                    "replays",
                    "backups",
                    "restores",
                    "archives",
                    "archive rewrites",
                    "archive changes refused",
                    "replay crashes",
                    "maintenances",
                    "vacuums refused",
                    "maintenance crashes",
                    "records",
                    "landed",
                    "lost",
                    "unreachable",
                    "missing topics refused",
                    "duplicated",
                )
            )
        )
