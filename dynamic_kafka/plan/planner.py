"""The planner: a pure function from (metadata, state, broker offsets, pipeline config) to a plan.

No I/O happens here, so every rule is unit-tested without a broker. The rules, per subscribed partition:

* start is the committed next offset when the state has one (also for a removed-then-re-added partition, which
  resumes where it stopped), else ``earliest`` for a new partition of a known topic, else the cluster's own
  ``starting_offsets`` in the metadata when it sets one (also for a cluster or topic new to a stream the state
  already tracks: a failover to a mirror hands over by timestamp), else ``earliest`` for a cluster or topic new to
  a tracked stream (a migration loses nothing), else the pipeline's starting initializer;
* with a bootstrap archive, a partition's first read starts no lower than its first offset at or after the
  archive's ``until`` (latest when no record is), whichever run reads it first: the archive landed what is older;
* a committed offset below the broker's earliest is data loss: ``on_data_loss: fail`` raises naming every lost
  range; ``skip`` starts at earliest and records the gap;
* a committed offset beyond latest of the same topic, or one the leader epoch recorded with it ended below (the
  log diverged: an unclean leader election, refilled or not), is a truncation, decided by ``on_data_loss`` too;
* a changed topic id (without ids: a committed offset beyond latest, or a vanished partition) means the topic
  was recreated: ``on_topic_recreated: fail`` raises; ``reset`` starts the new topic at earliest and records it;
* stop is the stopping initializer (default latest, the last stable offset under read_committed), never beyond
  latest, then capped by ``max_records_per_partition`` and ``max_records_per_run``;
* with a table per stream, a partition keeps the table it first landed in (:mod:`dynamic_kafka.plan.tables`);
* partitions in the state that the metadata no longer lists are marked removed (offsets kept); with
  ``drain_removed`` they are first read up to their latest offset when reachable, and marked removed only once
  fully read.

Every planned partition appears in the plan, also with an empty range, so the state pins its position: a topic
that started at ``latest`` must not jump forward again at the next run.

Why one module over ~350 lines: the rules above are one decision per partition taken by one builder that shares
the findings and the run cap; split by rule, each part would need the builder's whole state, and reading a rule
would mean reading two files.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, assert_never

from dynamic_kafka.errors import (
    ClusterUnreachableError,
    DataLossError,
    PlanningError,
    TopicMissingError,
    TopicRecreatedError,
)
from dynamic_kafka.frozen import building_many
from dynamic_kafka.initializers import (
    AnyInitializer,
    CommittedOffsets,
    CustomOffsets,
    EarliestOffsets,
    LatestOffsets,
    PipelineStoppingOffsets,
    SpecificOffsets,
    TimestampOffsets,
    to_epoch_ms,
)
from dynamic_kafka.model.plan import Finding, LostRange, Plan, Split, TopicPartition
from dynamic_kafka.plan.tables import as_tables_take

if TYPE_CHECKING:
    from collections.abc import Iterable

    from dynamic_kafka.config.models import PipelineConfig
    from dynamic_kafka.metadata.snapshot import MetadataSnapshot
    from dynamic_kafka.model.snapshots import (
        BrokerSnapshot,
        PartitionOffsets,
        PartitionState,
        StateSnapshot,
        TopicSnapshot,
    )


FORMAT_PIN_PREFIX = "format:"
"""Prefix of the config pins of one stream's resolved value format (``format:<stream id>``)."""


def plan_run(
    *,
    pipeline: PipelineConfig,
    metadata: MetadataSnapshot,
    state: StateSnapshot,
    brokers: BrokerSnapshot,
    run_seq: int,
    now: datetime,
) -> Plan:
    """Plans one incremental run.

    Raises:
        DataLossError: committed offsets below earliest and ``on_data_loss: fail``; names every lost range.
        TopicRecreatedError: a topic was recreated and ``on_topic_recreated: fail``.
        TopicMissingError: topics the metadata lists do not exist and ``on_topic_missing: fail``.
        ClusterUnreachableError: an active cluster did not answer and ``skip_unreachable_clusters`` is off.
        PlanningError: an initializer cannot resolve a partition (e.g. no committed offset and ``reset: none``).
    """
    with building_many():  # a Split, a key and a finding or two per partition
        builder = _PlanBuilder(pipeline, metadata, state, brokers, now)
        builder.plan_subscribed()
        builder.plan_removed()
    if builder.losses or builder.truncations or builder.bootstrap_gaps:
        raise DataLossError(builder.losses, truncated=builder.truncations, bootstrap_gaps=builder.bootstrap_gaps)
    missing = [(f.cluster_id or "", f.topic or "") for f in builder.findings if f.kind == "topic_missing"]
    if missing and pipeline.on_topic_missing == "fail":
        raise TopicMissingError(missing)
    splits = as_tables_take(
        pipeline, _apply_run_cap(builder.splits, pipeline.max_records_per_run, builder.findings), state
    )
    removals = [key for key, target in builder.removals if _fully_read(key, target, splits)]
    return Plan(
        pipeline_id=pipeline.id,
        run_seq=run_seq,
        splits=tuple(splits),
        removals=tuple(removals),
        skipped_clusters=tuple(builder.skipped),
        findings=tuple(builder.findings),
        metadata_fingerprint=metadata.fingerprint,
        config_pins=config_pins(pipeline, {s.stream_id for s in splits if s.stop_offset > s.start_offset}),
        planned_at=now,
    )


def bootstrap_due(pipeline: PipelineConfig, state: StateSnapshot) -> bool:
    """Whether the next run is the pipeline's bootstrap: it has an archive and nothing landed yet (no run, or the
    last one was a bootstrap run that was abandoned; operations recorded since do not count). An abandoned later
    run does not make it due again, even when no partition has a position (the bootstrap run read no Kafka): the
    archive's first part landed, and the next part continues from the chain of plans.
    """
    last = state.landing_run
    if pipeline.bootstrap is None:
        return False
    if last is None:
        return True
    archive = last.plan.bootstrap
    return last.status == "abandoned" and not state.partitions and archive is not None and archive.switch


def first_run_pipeline(pipeline: PipelineConfig, state: StateSnapshot) -> PipelineConfig:
    """The pipeline as its next run plans it: on the first run of a pipeline with a bootstrap archive, every
    partition without state starts at the first offset at or after the archive's ``until`` (the archive holds what
    is older); else the pipeline itself.
    """
    if pipeline.bootstrap is None or not bootstrap_due(pipeline, state):
        return pipeline
    until = TimestampOffsets(timestamp_ms=to_epoch_ms(pipeline.bootstrap.until))
    return pipeline.starting_at(until)


def config_pins(pipeline: PipelineConfig, streams: Iterable[str] = ()) -> dict[str, str]:
    """Per setting that decides what a run writes, a short hash of its value. A crashed run re-executed under
    other values would write its records differently from what was planned (another table, another decoding: a
    record undecodable only under the new format would go to a dead-letter transaction that may already exist).

    ``streams``: the streams whose records the plan reads (a split's first stream decides its format); each gets a
    ``format:<stream>`` pin of its resolved value format. A ``schema_file`` is pinned by its contents, once
    prepared (:attr:`Plan.decoding`), not by its path here: a moved file with the same schema decodes alike.
    """
    values: dict[str, object] = {
        "sink": [str(pipeline.sink.path), str(pipeline.sink.resolved_dead_letter_path)],
        # The pins keep the names of the keys before the `value:` and `key:` sections: plans written then
        # still compare alike.
        "key_format": pipeline.key.format,
        "value_format": pipeline.value.format,
        "value_schema": pipeline.value.schema_ddl,
        "isolation_level": pipeline.isolation_level,
        "on_decode_error": pipeline.on_decode_error,
        "json_strict": pipeline.json_strict,
    }
    # A record subject name strategy and a value expression are pinned only when set, so plans written before they
    # existed keep their pins.
    if pipeline.key.subject_name_strategy != "topic":
        values["key_subject_name_strategy"] = [pipeline.key.subject_name_strategy, pipeline.key.record_name]
    for stream_id in sorted(streams):
        fmt = pipeline.value_format_of(stream_id)
        pinned: list[object] = [fmt.format, fmt.schema_ddl, fmt.schema_file is not None]
        if fmt.subject_name_strategy != "topic":
            pinned += [fmt.subject_name_strategy, fmt.record_name]
        if fmt.expression is not None:
            pinned.append(fmt.expression)
        values[f"{FORMAT_PIN_PREFIX}{stream_id}"] = pinned
    return {
        name: hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]
        for name, value in values.items()
    }


class _PlanBuilder:
    def __init__(
        self,
        pipeline: PipelineConfig,
        metadata: MetadataSnapshot,
        state: StateSnapshot,
        brokers: BrokerSnapshot,
        now: datetime,
    ) -> None:
        self.pipeline = pipeline
        self.metadata = metadata
        self.state = state
        self.brokers = brokers
        self.now = now
        self.splits: list[Split] = []
        self.findings: list[Finding] = []
        self.losses: list[LostRange] = []
        self.skipped: list[str] = []
        self.covered: set[TopicPartition] = set()
        self.removals: list[tuple[TopicPartition, int | None]] = []
        self.truncations: list[LostRange] = []
        self.bootstrap_gaps: list[LostRange] = []
        # The first run of a pipeline with a bootstrap archive: Kafka starts at the archive's `until`.
        self.bootstrapping = bootstrap_due(pipeline, state)
        # Streams the state has partition rows of (active or removed): a topic new to one of them is discovered.
        self.state_streams: set[str] = {sid for p in state.partitions.values() for sid in p.stream_ids}

    def note(self, kind: str, message: str, **where: object) -> None:
        self.findings.append(Finding.model_validate({"kind": kind, "message": message, **where}))

    def plan_subscribed(self) -> None:
        topics = self.metadata.topics()
        if not topics:
            self.note("empty_metadata", "the subscription resolved to no cluster and no topic; nothing to read")
        clusters = self.metadata.clusters()
        # Grouped once: looking each topic up in the whole state is O(topics x partitions).
        by_topic: dict[tuple[str, str], list[PartitionState]] = {}
        for key, committed in self.state.partitions.items():
            by_topic.setdefault((key.cluster_id, key.topic), []).append(committed)
        for cluster_id, error in sorted(self.metadata.unresolved.items()):
            # Its pattern's topics are unknown this run: keep (cover) every partition a pattern of it matches.
            self._unreachable(cluster_id, error)
            patterns = self.metadata.patterns(cluster_id)
            self.covered.update(
                key
                for key in self.state.partitions
                if key.cluster_id == cluster_id and any(p.fullmatch(key.topic) for p in patterns)
            )
        for (cluster_id, topic), stream_ids in topics.items():
            known = by_topic.get((cluster_id, topic), [])
            cluster = self.brokers.clusters.get(cluster_id)
            if cluster is None or not cluster.reachable:
                self._unreachable(cluster_id, cluster.error if cluster else None)
                self.covered.update(p.key for p in known)
                continue
            snapshot = cluster.topics.get(topic)
            if snapshot is None or not snapshot.exists:
                self.note(
                    "topic_missing",
                    f"topic {topic!r} is listed in the metadata but does not exist on cluster {cluster_id!r}",
                    cluster_id=cluster_id,
                    topic=topic,
                )
                self.covered.update(p.key for p in known)
                continue
            bootstrap = clusters[cluster_id].bootstrap_servers
            self._plan_topic(cluster_id, topic, stream_ids, snapshot, known, bootstrap)

    def _unreachable(self, cluster_id: str, error: str | None) -> None:
        if cluster_id in self.skipped:
            return
        if not self.pipeline.skip_unreachable_clusters:
            raise ClusterUnreachableError(
                f"cannot be reached ({error or 'no answer'}); nothing was written.",
                cluster_id=cluster_id,
                hint="Fix connectivity, or set `skip_unreachable_clusters: true` to read the other clusters.",
            )
        self.skipped.append(cluster_id)
        self.note(
            "cluster_skipped",
            f"cluster {cluster_id!r} is unreachable ({error or 'no answer'}); skipped, offsets untouched",
            cluster_id=cluster_id,
        )

    def _recreation(
        self, snapshot: TopicSnapshot, same: list[PartitionState], stale: list[PartitionState]
    ) -> str | None:
        """Why the topic counts as recreated, or None. Decided by topic id: the topic was recreated when the state
        knows it only under other ids. Rows of another id next to rows of the current id are leftovers of an
        earlier reset (the old topic had more partitions), not a new recreation. Without ids (state written before
        ids were recorded, or a broker that gives none), a vanished partition or a committed offset beyond latest
        is taken for a recreation, as before.
        """
        if stale and not same:
            return f"topic id changed from {sorted({str(p.topic_id) for p in stale})[0]} to {snapshot.topic_id}"
        if snapshot.topic_id and any(p.topic_id for p in same):
            return None  # same id: a committed offset beyond latest is a truncation (see _resume), never a recreation
        for p in sorted(same, key=lambda p: p.partition):
            offsets = snapshot.partitions.get(p.partition)
            if offsets is None:
                return f"partition {p.partition} no longer exists"
            if p.next_offset > offsets.latest:
                return f"committed offset {p.next_offset} of partition {p.partition} is beyond latest {offsets.latest}"
        return None

    def _plan_topic(
        self,
        cluster_id: str,
        topic: str,
        stream_ids: tuple[str, ...],
        snapshot: TopicSnapshot,
        known: list[PartitionState],
        bootstrap: str,
    ) -> None:
        # Rows of another topic id belong to an earlier incarnation of this topic name: they never resume, and the
        # ones the current topic has no partition for are marked removed in this run's commit (else their offsets
        # would look like a recreation again on every run).
        same: list[PartitionState] = []
        stale: list[PartitionState] = []
        for p in known:  # one pass: `p not in same` compared models pairwise, O(partitions^2) per topic
            (stale if snapshot.topic_id and p.topic_id and p.topic_id != snapshot.topic_id else same).append(p)
        for p in stale:
            if p.partition not in snapshot.partitions:
                self.covered.add(p.key)
                if p.status == "active":
                    self.removals.append((p.key, None))
        reason = self._recreation(snapshot, same, stale)
        if reason is not None:
            if self.pipeline.on_topic_recreated == "fail":
                raise TopicRecreatedError(cluster_id, topic, reason)
            self.note(
                "topic_recreated",
                f"topic {topic!r} on cluster {cluster_id!r} was recreated ({reason}); reading it from earliest",
                cluster_id=cluster_id,
                topic=topic,
            )
        starting, stopping = self.metadata.initializers(
            cluster_id, self.pipeline.starting_offsets, self.pipeline.stopping_offsets
        )
        override = self.metadata.starting_override(cluster_id)
        by_partition = {p.partition: p for p in same}
        # A new topic on a stream the state already tracks was added after the pipeline started (a migration, a
        # topic added to the stream, a failover). The pipeline's initializer was for the stream's first run, so
        # without a word from the metadata it is read from earliest: records written to it before this run are not
        # skipped by a `latest` or timestamp initializer. The cluster's own starting_offsets is that word: a mirror
        # holds records the old cluster already landed, and its timestamp says where they end.
        discovered = not known and override is None and bool(self.state_streams.intersection(stream_ids))
        if not known and snapshot.partitions:
            if override is not None:
                how = f"{_describe(override)} (the starting_offsets of cluster {cluster_id!r})"
            else:
                how = "earliest (its stream already has state)" if discovered else _describe(starting)
            self.note(
                "new_topic",
                f"new topic {topic!r} on cluster {cluster_id!r}: starting at {how}",
                cluster_id=cluster_id,
                topic=topic,
            )
        for partition, offsets in sorted(self._chosen_partitions(cluster_id, topic, snapshot).items()):
            key = TopicPartition(cluster_id=cluster_id, topic=topic, partition=partition)
            self.covered.add(key)
            committed = by_partition.get(partition)
            if reason is not None:
                start: int | None = offsets.earliest
            elif committed is not None:
                start = self._resume(key, committed, offsets)
            elif same:
                self.note(
                    "new_partition",
                    f"new partition {key}: reading from earliest {offsets.earliest}",
                    cluster_id=cluster_id,
                    topic=topic,
                    partition=partition,
                )
                start = offsets.earliest
            elif discovered:
                start = offsets.earliest
            else:
                start = self._initial_start(key, starting, snapshot, offsets)
            if committed is None and reason is None:
                start = self._not_below_until(key, start, snapshot)
            if start is None:
                continue
            stop = self._stop(key, stopping, snapshot, offsets, start)
            self.splits.append(
                Split(
                    cluster_id=cluster_id,
                    topic=topic,
                    partition=partition,
                    start_offset=start,
                    stop_offset=stop,
                    stream_ids=stream_ids,
                    topic_id=snapshot.topic_id,
                    leader_epoch=offsets.leader_epoch,
                    bootstrap_servers=bootstrap,
                )
            )

    def _chosen_partitions(self, cluster_id: str, topic: str, snapshot: TopicSnapshot) -> dict[int, PartitionOffsets]:
        """The topic's partitions the metadata's partition set selects (all without a set). A partition left out of
        the set is not covered, so its state row is marked removed with its offset kept, as a removed topic's is.
        """
        chosen = self.metadata.partition_set(cluster_id, topic)
        if chosen is None:
            return snapshot.partitions
        missing = sorted(chosen.difference(snapshot.partitions))
        if missing:
            self.note(
                "partition_missing",
                f"partition(s) {', '.join(map(str, missing))} of topic {topic!r} on cluster {cluster_id!r} are in "
                f"the metadata's partition set but do not exist; not read",
                cluster_id=cluster_id,
                topic=topic,
            )
        return {p: offsets for p, offsets in snapshot.partitions.items() if p in chosen}

    def _resume(self, key: TopicPartition, committed: PartitionState, offsets: PartitionOffsets) -> int | None:
        start = committed.next_offset
        if committed.status == "removed":
            self.note(
                "resumed",
                f"{key} is back in the metadata; resuming at its kept offset {start}",
                **key.model_dump(),
            )
        if start > offsets.latest:
            return self._truncated(key, start, offsets.latest, offsets)
        if offsets.diverged_at is not None and offsets.diverged_at < start:
            return self._truncated(key, start, max(offsets.diverged_at, offsets.earliest), offsets)
        if start >= offsets.earliest:
            return start
        lost = LostRange(**key.model_dump(), from_offset=start, to_offset=offsets.earliest)
        if self.pipeline.on_data_loss == "fail":
            self.losses.append(lost)
            return None
        self.note(
            "data_loss",
            f"{key}: offsets [{start}, {offsets.earliest}) were deleted before they were read; skipped",
            **lost.model_dump(),
        )
        return offsets.earliest

    def _truncated(self, key: TopicPartition, committed: int, at: int, offsets: PartitionOffsets) -> int | None:
        """The same topic's log no longer holds what was read below the committed offset: its latest offset fell
        below it, or (KIP-320) the leader epoch recorded with it ended at ``at`` below it, so producers may have
        refilled the reused offsets already. Either is an unclean leader election (or, for the first, the isolation
        level changed to read_committed while a transaction was open). The offsets ``[at, committed)`` were read
        before and now hold, or will hold, new records. A data-loss policy decision: ``fail`` names the range;
        ``skip`` resumes at ``at`` (the new records there are read) and records the range.
        """
        truncated = LostRange(**key.model_dump(), from_offset=at, to_offset=committed)
        if self.pipeline.on_data_loss == "fail":
            self.truncations.append(truncated)
            return None
        how = (
            f"latest is now {offsets.latest}"
            if at == offsets.latest
            else f"the leader epoch recorded with it ended at {at}, latest is {offsets.latest}"
        )
        self.note(
            "truncated",
            f"{key}: the log was truncated below the committed offset {committed} ({how}); offsets "
            f"[{at}, {committed}) were read before and are reused by new records; resuming at {at}",
            **truncated.model_dump(),
        )
        return at

    def _initial_start(
        self, key: TopicPartition, starting: AnyInitializer, snapshot: TopicSnapshot, offsets: PartitionOffsets
    ) -> int | None:
        wanted: int | None
        match starting:
            case EarliestOffsets():
                return offsets.earliest
            case LatestOffsets():
                return offsets.latest
            case TimestampOffsets():
                found = snapshot.start_lookups.get(key.partition)
                if self.bootstrapping and found is not None and found == offsets.earliest > 0:
                    return self._bootstrap_gap(key, offsets)
                return offsets.latest if found is None else self._clamp(key, found, offsets, "timestamp")
            case CommittedOffsets(group_id=group_id, reset=reset):
                wanted = snapshot.start_lookups.get(key.partition)
                if wanted is None:
                    return self._fallback(key, reset, offsets, f"consumer group {group_id!r}")
                return self._clamp(key, wanted, offsets, f"consumer group {group_id!r}")
            case SpecificOffsets(fallback=fallback, group_id=group_id):
                wanted = starting.offsets.get(key.topic, {}).get(key.partition)
                if wanted is not None:
                    return self._clamp(key, wanted, offsets, "specific offsets")
                wanted = None if group_id is None else snapshot.start_lookups.get(key.partition)
                if wanted is None:
                    return self._fallback(key, fallback, offsets, "specific offsets")
                return self._clamp(key, wanted, offsets, f"consumer group {group_id!r}")
            case CustomOffsets(function=function):
                # Checked within [earliest, latest] when it was called (custom_offsets.resolve_custom).
                wanted = snapshot.start_lookups.get(key.partition)
                if wanted is None:
                    raise PlanningError(
                        f"starting_offsets function {function!r} was not asked about {key}, a partition no run "
                        "has read.",
                        hint="Run again: the brokers' snapshot and the state disagreed about it.",
                    )
                return wanted
            case _:
                assert_never(starting)

    def _not_below_until(self, key: TopicPartition, start: int | None, snapshot: TopicSnapshot) -> int | None:
        """A partition's first read under a bootstrap archive starts no lower than its first offset at or after the
        archive's ``until``, whichever run reads it first: the archive already landed the records below, as rows
        without Kafka coordinates that no dedupe of a later run can match. Only the bootstrap run's initializer
        starts there by itself; a cluster skipped or a topic unsubscribed during that run, or a partition, topic or
        cluster of a stream that appears later, would otherwise start at earliest or the initializer.
        """
        floor = snapshot.floor(key.partition)
        if start is None or floor is None or start >= floor:
            return start
        self.note(
            "bootstrap_until",
            f"{key}: first read; starting at {floor}, the first offset at or after the bootstrap archive's until, "
            f"not at {start} (the archive holds the records before it)",
            **key.model_dump(),
            from_offset=start,
            to_offset=floor,
        )
        return floor

    def _bootstrap_gap(self, key: TopicPartition, offsets: PartitionOffsets) -> int | None:
        """The bootstrap's ``until`` is at or before the partition's earliest retained record, and records before
        it were deleted: those may be newer than ``until``, in neither the archive nor Kafka. A data-loss policy
        decision, as a committed offset below earliest is.
        """
        lost = LostRange(**key.model_dump(), from_offset=0, to_offset=offsets.earliest)
        if self.pipeline.on_data_loss == "fail":
            self.bootstrap_gaps.append(lost)
            return None
        self.note(
            "data_loss",
            f"{key}: the bootstrap's until is older than the earliest retained record (offset {offsets.earliest}); "
            f"records deleted below it may be newer than until and are in neither source; starting at earliest",
            **lost.model_dump(),
        )
        return offsets.earliest

    def _fallback(self, key: TopicPartition, strategy: str, offsets: PartitionOffsets, what: str) -> int:
        if strategy == "earliest":
            return offsets.earliest
        if strategy == "latest":
            return offsets.latest
        raise PlanningError(
            f"{what} has no offset for {key} and the reset strategy is 'none'.",
            hint="Commit an offset for it, list it explicitly, or set reset/fallback to earliest or latest.",
        )

    def _clamp(self, key: TopicPartition, wanted: int, offsets: PartitionOffsets, what: str) -> int:
        clamped = min(max(wanted, offsets.earliest), offsets.latest)
        if clamped != wanted:
            self.note(
                "offset_clamped",
                f"{key}: {what} gave offset {wanted}, outside the available "
                f"[{offsets.earliest}, {offsets.latest}]; using {clamped}",
                **key.model_dump(),
                from_offset=wanted,
                to_offset=clamped,
            )
        return clamped

    def _stop(
        self,
        key: TopicPartition,
        stopping: PipelineStoppingOffsets,
        snapshot: TopicSnapshot,
        offsets: PartitionOffsets,
        start: int,
    ) -> int:
        stop: int | None
        match stopping:
            case TimestampOffsets() | CustomOffsets():
                # A custom answer was checked within [earliest, latest] when it was called (resolve_custom).
                stop = snapshot.stop_lookups.get(key.partition)
            case SpecificOffsets():
                stop = stopping.offsets.get(key.topic, {}).get(key.partition)
            case CommittedOffsets(group_id=group_id, reset=reset):
                stop = snapshot.stop_lookups.get(key.partition)
                if stop is None:
                    stop = max(start, self._fallback(key, reset, offsets, f"stopping consumer group {group_id!r}"))
            case LatestOffsets():
                stop = offsets.latest
            case _:
                assert_never(stopping)
        bounded = max(start, min(offsets.latest if stop is None else stop, offsets.latest))
        return self._cap_partition(key, start, bounded)

    def _cap_partition(self, key: TopicPartition, start: int, stop: int) -> int:
        cap = self.pipeline.max_records_per_partition
        if cap is None or stop - start <= cap:
            return stop
        self.note(
            "capped",
            f"{key}: {stop - start} records pending, reading {cap} (max_records_per_partition)",
            **key.model_dump(),
            from_offset=start + cap,
            to_offset=stop,
        )
        return start + cap

    def plan_removed(self) -> None:
        for key, committed in sorted(self.state.partitions.items(), key=lambda kv: str(kv[0])):
            if key in self.covered or committed.status == "removed":
                continue
            offsets = self._removed_offsets(committed)
            if self.pipeline.drain_removed and offsets is not None:
                self._drain(key, committed, offsets)
                continue
            self.removals.append((key, None))
            if offsets is not None and offsets.latest > committed.next_offset:
                self.note(
                    "removed_unread",
                    f"{key} was removed from the metadata with offsets [{committed.next_offset}, {offsets.latest}) "
                    "unread; set `drain_removed: true` to read them before removal",
                    **key.model_dump(),
                    from_offset=committed.next_offset,
                    to_offset=offsets.latest,
                )
            elif offsets is None and self.pipeline.drain_removed:
                self.note(
                    "removed_unread",
                    f"{key} was removed from the metadata and cannot be reached to drain it; records after offset "
                    f"{committed.next_offset} may be unread",
                    **key.model_dump(),
                    from_offset=committed.next_offset,
                )
            else:
                self.note(
                    "removed",
                    f"{key} was removed from the metadata; its offset {committed.next_offset} is kept",
                    **key.model_dump(),
                )

    def _removed_offsets(self, committed: PartitionState) -> PartitionOffsets | None:
        """The broker offsets of a removed partition, if its cluster answered and it is still the same topic."""
        cluster = self.brokers.clusters.get(committed.cluster_id)
        if cluster is None or not cluster.reachable:
            return None
        snapshot = cluster.topics.get(committed.topic)
        if snapshot is None or not snapshot.exists:
            return None
        if committed.topic_id and snapshot.topic_id and committed.topic_id != snapshot.topic_id:
            return None
        offsets = snapshot.partitions.get(committed.partition)
        if offsets is None or offsets.latest < committed.next_offset:
            return None
        return offsets

    def _drain(self, key: TopicPartition, committed: PartitionState, offsets: PartitionOffsets) -> None:
        start = self._resume(key, committed, offsets)
        if start is None:
            return
        stop = self._cap_partition(key, start, offsets.latest)
        split = Split(
            **key.model_dump(),
            start_offset=start,
            stop_offset=stop,
            stream_ids=committed.stream_ids or ("(removed)",),
            topic_id=committed.topic_id,
            leader_epoch=offsets.leader_epoch,
            bootstrap_servers=committed.bootstrap_servers,
            draining=True,
        )
        self.splits.append(split)
        self.removals.append((key, offsets.latest))
        self.note(
            "removed",
            f"{key} was removed from the metadata; draining [{start}, {offsets.latest}) before marking it removed",
            **key.model_dump(),
            from_offset=start,
            to_offset=offsets.latest,
        )


def _describe(initializer: AnyInitializer) -> str:
    """An initializer as a finding names it: a timestamp with its UTC time, so a plan shows the handover point."""
    match initializer:
        case TimestampOffsets(timestamp_ms=timestamp_ms):
            at = datetime.fromtimestamp(timestamp_ms / 1000, tz=UTC)
            return f"timestamp {at.isoformat(timespec='milliseconds').replace('+00:00', 'Z')}"
        case CustomOffsets(function=function):
            return f"custom {function}"
        case EarliestOffsets() | LatestOffsets() | CommittedOffsets() | SpecificOffsets():
            return initializer.kind
        case _:
            assert_never(initializer)


def _fully_read(key: TopicPartition, drain_target: int | None, splits: list[Split]) -> bool:
    """A drained partition is marked removed only once this run reads it up to its latest offset; a capped drain
    leaves it active (but unlisted), so the next run drains the rest.
    """
    if drain_target is None:
        return True
    return any(s.key == key and s.stop_offset == drain_target for s in splits)


def _apply_run_cap(splits: list[Split], cap: int | None, findings: list[Finding]) -> list[Split]:
    """Shares ``max_records_per_run`` fairly: every split with pending records gets an equal share, repeatedly,
    until the cap is used up. Deterministic, and no partition starves behind a larger one.
    """
    sizes = [s.record_count for s in splits]
    if cap is None or sum(sizes) <= cap:
        return splits
    granted = [0] * len(splits)
    open_splits = [i for i, size in enumerate(sizes) if size > 0]
    remaining = cap
    while remaining > 0 and open_splits:
        share = max(1, remaining // len(open_splits))
        for i in list(open_splits):
            give = min(share, sizes[i] - granted[i], remaining)
            granted[i] += give
            remaining -= give
            if granted[i] == sizes[i]:
                open_splits.remove(i)
            if remaining == 0:
                break
    findings.append(
        Finding(
            kind="capped",
            message=f"{sum(sizes)} records pending, reading {cap} (max_records_per_run)",
            from_offset=cap,
            to_offset=sum(sizes),
        )
    )
    return [s.narrowed(s.start_offset, s.start_offset + g) for s, g in zip(splits, granted, strict=True)]
