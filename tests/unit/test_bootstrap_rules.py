"""Bootstrap from an archive (issue 27, item 1): config, column mapping and the first run's plan, without Spark."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pytest
from pydantic import ValidationError

from dynamic_kafka.config.models import PipelineConfig
from dynamic_kafka.decoding.prepared import PreparedDecoding
from dynamic_kafka.errors import ArchiveChangedError, ConfigError, DataLossError, StateError
from dynamic_kafka.initializers import EarliestOffsets, TimestampOffsets
from dynamic_kafka.metadata.models import ClusterMetadata, KafkaStream, metadata_fingerprint
from dynamic_kafka.metadata.snapshot import MetadataSnapshot
from dynamic_kafka.model.plan import ArchiveRead, TopicPartition
from dynamic_kafka.model.snapshots import (
    BrokerSnapshot,
    ClusterSnapshot,
    PartitionOffsets,
    PartitionState,
    RunRecord,
    StateSnapshot,
    TopicSnapshot,
)
from dynamic_kafka.model.summary import RealignedPositions, RunSummary
from dynamic_kafka.operations.backfill import after_bootstrap, offsets_window
from dynamic_kafka.operations.offsets_reset import ResetTarget, decide_reset
from dynamic_kafka.plan.planner import bootstrap_due, first_run_pipeline, plan_run
from dynamic_kafka.spark.bootstrap_archive import (
    abandoned_archive_runs,
    map_columns,
    next_archive_part,
    with_archive_decoding,
)
from dynamic_kafka.state import StateStore
from dynamic_kafka.state.rows import apply_plan

if TYPE_CHECKING:
    from pathlib import Path

    from dynamic_kafka.model.plan import Plan

UNTIL = datetime(2026, 1, 1, tzinfo=UTC)
NOW = datetime(2026, 11, 27, tzinfo=UTC)


def pipeline(**bootstrap: Any) -> PipelineConfig:
    return PipelineConfig.model_validate(
        {
            "id": "p",
            "streams": ["orders"],
            "sink": {"path": "/tmp/s"},
            "bootstrap": {"path": "/tmp/archive", "format": "parquet", "until": "2026-01-01T00:00:00Z", **bootstrap},
        }
    )


class TestConfig:
    def test_until_is_utc_and_stream_defaults_to_the_only_stream(self) -> None:
        p = pipeline(until="2026-01-01T01:00:00+01:00")
        assert p.bootstrap is not None
        assert p.bootstrap.until == UNTIL
        assert (p.bootstrap_stream, p.bootstrap.cluster) == ("orders", "archive")

    def test_unknown_sink_column_and_missing_stream_are_refused(self) -> None:
        with pytest.raises(ValidationError, match="payload is not a sink column"):
            pipeline(columns={"payload": "value"})
        with pytest.raises(ValidationError, match=r"bootstrap\.stream is required"):
            PipelineConfig.model_validate(
                {
                    "id": "p",
                    "stream_pattern": "o.*",
                    "sink": {"path": "/tmp/s"},
                    "bootstrap": {"path": "/tmp/a", "format": "json", "until": "2026-01-01T00:00:00Z"},
                }
            )
        with pytest.raises(ValidationError, match="not an ISO-8601 timestamp"):
            pipeline(until=1767225600)


class TestColumnMapping:
    def test_same_names_map_by_themselves_and_columns_add_to_them(self) -> None:
        archive = {"payload": "string", "timestamp": "timestamp", "key": "binary", "partition": "int"}
        assert map_columns(pipeline(columns={"value": "payload"}), archive) == {
            "value": "payload",
            "timestamp": "timestamp",
            "key": "key",
            "partition": "partition",
        }

    def test_every_problem_is_named_in_one_error_before_anything_is_written(self) -> None:
        archive = {"payload": "struct<a:int>", "when": "string", "extra": "int"}
        with pytest.raises(ConfigError) as refused:
            map_columns(pipeline(columns={"value": "payload", "key": "missing"}), archive)
        message = str(refused.value)
        assert "`key` is mapped to `missing`, which the archive does not have" in message
        assert "`value` needs a column of type binary or string; `payload` is struct<a:int>" in message
        assert "no archive column is mapped to `timestamp`" in message
        assert "archive column(s) extra, when map to no sink column" in message
        assert "Nothing was written" in message
        assert refused.value.hint is not None
        assert "bootstrap.ignore" in refused.value.hint

    def test_ignored_columns_are_not_refused(self) -> None:
        archive = {"value": "string", "ts": "timestamp_ntz", "note": "string"}
        assert map_columns(pipeline(columns={"timestamp": "ts"}, ignore=["note"]), archive) == {
            "value": "value",
            "timestamp": "ts",
        }


def archive_read(**overrides: Any) -> ArchiveRead:
    """A planned archive part, as plan_archive pins it."""
    defaults = {
        "location": "/a",
        "format": "parquet",
        "until": UNTIL,
        "columns": {"value": "value", "timestamp": "timestamp"},
        "cluster": "archive",
        "stream": "orders",
        "rows": 3,
    }
    return ArchiveRead.model_validate({**defaults, **overrides})


def snapshot(earliest: int, latest: int, found: int | None) -> BrokerSnapshot:
    topic = TopicSnapshot(
        topic="orders",
        topic_id="id-1",
        partitions={0: PartitionOffsets(earliest=earliest, latest=latest)},
        start_lookups={0: found},
    )
    return BrokerSnapshot(clusters={"east": ClusterSnapshot(cluster_id="east", topics={"orders": topic})}, taken_at=NOW)


def first_plan(p: PipelineConfig, brokers: BrokerSnapshot, state: StateSnapshot | None = None) -> Plan:
    state = state or StateSnapshot(pipeline_id="p")
    stream = KafkaStream(
        stream_id="orders",
        clusters={"east": ClusterMetadata(cluster_id="east", bootstrap_servers="e:1", topics=frozenset({"orders"}))},
    )
    meta = MetadataSnapshot(streams={"orders": stream}, fingerprint=metadata_fingerprint([stream]))
    return plan_run(
        pipeline=first_run_pipeline(p, state),
        metadata=meta,
        state=state,
        brokers=brokers,
        run_seq=state.next_run_seq,
        now=NOW,
    )


class TestFirstRunPlan:
    def test_kafka_starts_at_the_offset_for_until_on_the_first_run_only(self) -> None:
        p = pipeline()
        assert p.starting_offsets == EarliestOffsets()
        first = first_run_pipeline(p, StateSnapshot(pipeline_id="p"))
        assert first.starting_offsets == TimestampOffsets(timestamp_ms=int(UNTIL.timestamp() * 1000))
        plan = first_plan(p, snapshot(0, 10, 4))
        assert [(s.start_offset, s.stop_offset) for s in plan.splits] == [(4, 10)]
        ran = StateSnapshot(
            pipeline_id="p",
            last_run=RunRecord(pipeline_id="p", run_seq=1, status="committed", plan=plan, planned_at=NOW),
        )
        assert first_run_pipeline(p, ran) is p

    def test_until_older_than_the_earliest_retained_record_is_a_gap_for_the_data_loss_policy(self) -> None:
        with pytest.raises(DataLossError) as lost:
            first_plan(pipeline(), snapshot(5, 10, 5))
        assert [(g.from_offset, g.to_offset) for g in lost.value.bootstrap_gaps] == [(0, 5)]
        assert "the bootstrap's `until` is older than the earliest record Kafka still holds" in str(lost.value)

        skipped = first_plan(pipeline().model_copy(update={"on_data_loss": "skip"}), snapshot(5, 10, 5))
        assert [(s.start_offset, s.stop_offset) for s in skipped.splits] == [(5, 10)]
        assert [f.kind for f in skipped.findings if f.is_warning] == ["data_loss"]

    def test_nothing_deleted_is_no_gap(self) -> None:
        """Earliest 0: Kafka still holds everything, whatever the timestamps."""
        plan = first_plan(pipeline(), snapshot(0, 10, 0))
        assert [(s.start_offset, s.stop_offset) for s in plan.splits] == [(0, 10)]


class TestAFirstReadAfterTheBootstrapRun:
    """Only the bootstrap run's initializer starts at ``until``; a partition first read by a later run (its
    cluster skipped then, its topic unsubscribed then, or new to a stream since) starts there too.
    """

    @staticmethod
    def later_plan(starting: object, floor: int | None, *, known: bool = False) -> Plan:
        """Run 2's plan of east/orders partition 0 (earliest 0, latest 10), its floor at ``floor``; ``known``: the
        state already tracks partition 1 of the topic (so partition 0 is a new partition of a read topic)."""
        p = PipelineConfig.model_validate({**pipeline().model_dump(mode="json"), "starting_offsets": starting})
        partitions = {0: PartitionOffsets(earliest=0, latest=10), 1: PartitionOffsets(earliest=0, latest=4)}
        topic = TopicSnapshot(topic="orders", topic_id="id-1", partitions=partitions, floor_lookups={0: floor, 1: 2})
        brokers = BrokerSnapshot(
            clusters={"east": ClusterSnapshot(cluster_id="east", topics={"orders": topic})}, taken_at=NOW
        )
        row = PartitionState(cluster_id="east", topic="orders", partition=1, next_offset=4, topic_id="id-1")
        run_1 = first_plan(pipeline(), snapshot(0, 10, 4))
        first = RunRecord(pipeline_id="p", run_seq=1, status="committed", plan=run_1, planned_at=NOW)
        state = StateSnapshot(
            pipeline_id="p",
            table_version=1,
            last_run=first,
            partitions={row.key: row} if known else {},
        )
        assert not bootstrap_due(p, state)
        return first_plan(p, brokers, state)

    def test_every_first_read_starts_no_lower_than_until_and_a_committed_offset_is_kept(self) -> None:
        for starting, wanted in (("earliest", 0), ({"kind": "specific", "offsets": {"orders": {0: 1, 1: 1}}}, 1)):
            plan = self.later_plan(starting, 6)
            assert [(s.partition, s.start_offset, s.stop_offset) for s in plan.splits] == [(0, 6, 10), (1, 2, 4)]
            raised = {(f.partition, f.from_offset, f.to_offset) for f in plan.findings if f.kind == "bootstrap_until"}
            assert raised == {(0, wanted, 6), (1, wanted, 2)}
        known = self.later_plan("earliest", 6, known=True)  # partition 1 resumes at its offset
        assert [(s.partition, s.start_offset) for s in known.splits] == [(0, 6), (1, 4)]

    def test_a_partition_with_no_record_at_or_after_until_starts_at_latest_and_a_later_start_is_kept(self) -> None:
        nothing_after = self.later_plan("earliest", None)
        assert [(s.partition, s.start_offset, s.stop_offset) for s in nothing_after.splits] == [(0, 10, 10), (1, 2, 4)]
        latest = self.later_plan("latest", 6)
        assert [s.start_offset for s in latest.splits] == [10, 4]
        assert not [f for f in latest.findings if f.kind == "bootstrap_until"]


class TestDagsterMetadata:
    def test_a_bootstrap_run_shows_its_source_and_row_count_and_other_runs_do_not(self) -> None:
        from dynamic_kafka.dagster.metadata import summary_metadata

        read = archive_read(location="s3a://lake/orders", files=("s3a://lake/orders/a.parquet",), rows=120)
        plan = first_plan(pipeline(), snapshot(0, 10, 4)).model_copy(update={"bootstrap": read})
        summary = RunSummary.of_plan(plan, "committed").model_copy(update={"records": 126})
        shown = summary_metadata(summary, now=NOW)
        assert shown["bootstrap_source"].value == "parquet s3a://lake/orders"
        assert shown["bootstrap_records"].value == 120
        later = RunSummary.of_plan(plan.model_copy(update={"bootstrap": None}), "committed")
        assert "bootstrap_source" not in summary_metadata(later, now=NOW)


class TestArchiveOverSeveralRuns:
    def part(self, files: tuple[str, ...], remaining: tuple[str, ...]) -> ArchiveRead:
        return archive_read(files=files, remaining=remaining)

    def state_after(self, read: ArchiveRead | None, status: str, *, landed: bool = True) -> StateSnapshot:
        plan = first_plan(pipeline(), snapshot(0, 10, 4)).model_copy(update={"bootstrap": read})
        record = RunRecord.model_validate(
            {"pipeline_id": "p", "run_seq": 1, "status": status, "plan": plan, "planned_at": NOW}
        )
        partitions = {row.key: row for row in apply_plan(plan, {}, NOW)} if landed else {}
        return StateSnapshot(pipeline_id="p", last_run=record, partitions=partitions)

    def test_each_run_takes_the_next_files_the_last_one_left(self) -> None:
        after_first = self.state_after(self.part(("f1",), ("f2", "f3", "f4")), "committed")
        second = next_archive_part(after_first, 2)
        assert second is not None
        assert (second.files, second.remaining, second.columns) == (
            ("f2", "f3"),
            ("f4",),
            {"value": "value", "timestamp": "timestamp"},
        )
        assert next_archive_part(self.state_after(self.part(("f4",), ()), "committed"), 2) is None
        assert next_archive_part(self.state_after(None, "committed"), 2) is None

    def test_an_abandoned_part_is_planned_again(self) -> None:
        abandoned = self.state_after(self.part(("f2",), ("f3",)), "abandoned")
        again = next_archive_part(abandoned, 1)
        assert again is not None
        assert (again.files, again.remaining) == (("f2",), ("f3",))

    def test_the_runs_after_an_abandoned_part_carry_it_along_the_chain(self) -> None:
        """Their archive dead letters are final: every later part leaves those rows out (issue 35 row 6)."""
        assert abandoned_archive_runs(StateSnapshot(pipeline_id="p")) == ()
        assert abandoned_archive_runs(self.state_after(self.part(("f1",), ("f2",)), "committed")) == ()
        assert abandoned_archive_runs(self.state_after(self.part(("f1",), ("f2",)), "abandoned")) == (1,)
        earlier = self.part(("f1",), ("f2",)).model_copy(update={"abandoned_runs": (1,)})
        assert abandoned_archive_runs(self.state_after(earlier, "committed")) == (1,)

    def test_the_bootstrap_is_due_until_something_landed(self) -> None:
        p = pipeline(max_files_per_run=1)
        assert bootstrap_due(p, StateSnapshot(pipeline_id="p"))
        first_part = self.part(("f1",), ("f2",)).model_copy(update={"switch": True})
        assert bootstrap_due(p, self.state_after(first_part, "abandoned", landed=False))
        assert not bootstrap_due(p, self.state_after(self.part(("f1",), ()), "committed"))

    def test_an_abandoned_later_part_does_not_make_the_bootstrap_due_when_no_partition_was_read(self) -> None:
        """The bootstrap run read no Kafka (nothing subscribed then), so no partition has a position: its part
        landed all the same, and the next run plans the abandoned part again, not the first one."""
        abandoned = self.state_after(self.part(("f2",), ("f3",)), "abandoned", landed=False)
        assert not bootstrap_due(pipeline(max_files_per_run=1), abandoned)
        again = next_archive_part(abandoned, 1)
        assert again is not None
        assert again.files == ("f2",)
        kafka_only = self.state_after(None, "abandoned", landed=False)
        assert not bootstrap_due(pipeline(), kafka_only)

    def test_a_delta_archive_is_not_split(self) -> None:
        with pytest.raises(ValidationError, match="a Delta archive lands whole"):
            pipeline(format="delta", max_files_per_run=2)


class TestArchiveDecoding:
    def read(self) -> ArchiveRead:
        return archive_read(format="json")

    def test_archive_values_decode_with_their_stream_format_even_when_kafka_has_nothing_to_read(self) -> None:
        """The first run of an idle topic reads no Kafka range: the archive's format alone keeps `value`."""
        p = PipelineConfig.model_validate({**pipeline().model_dump(mode="json"), "value": {"format": "string"}})
        prepared = with_archive_decoding(PreparedDecoding(p), p, self.read().stream)
        assert prepared.legacy is not None
        assert prepared.legacy.format == "string"

    def test_a_registry_stream_cannot_be_bootstrapped(self) -> None:
        p = PipelineConfig.model_validate(
            {
                "id": "p",
                "streams": ["orders"],
                "sink": {"path": "/tmp/s"},
                "value": {"format": "avro"},
                "schema_registry": {"url": "http://127.0.0.1:1"},
                "bootstrap": {"path": "/tmp/a", "format": "json", "until": "2026-01-01T00:00:00Z"},
            }
        )
        with pytest.raises(ConfigError, match="is decoded as avro"):
            with_archive_decoding(PreparedDecoding(p), p, self.read().stream)


class TestArchiveChainAcrossOperations:
    """Issue 35 row 2: the next part of a split archive is found past every operation recorded between two parts
    (offsets reset, dead-letter replay, realign), on the real state store.
    """

    def store_after_run_1(self, tmp_path: Path, status: str, read: ArchiveRead) -> StateStore:
        store = StateStore(tmp_path / "state", "p", clock=lambda: NOW)
        plan = first_plan(pipeline(), snapshot(0, 10, 4)).model_copy(update={"bootstrap": read})
        version = store.begin_run(plan, expected_version=None)
        if status == "committed":
            store.commit_run(plan, summary=RunSummary.of_plan(plan, "committed"), expected_version=version)
        else:
            store.abandon_run(1, reason="given up", expected_version=version)
        return store

    def operate(self, store: StateStore, status: str) -> StateSnapshot:
        state = store.load()
        summary = RunSummary(pipeline_id="p", run_seq=state.next_run_seq, status=status, requested_by="me")  # type: ignore[arg-type]
        store.record_operation(summary, expected_version=state.table_version or 0)
        return store.load()

    @pytest.mark.parametrize("operations", [("reset",), ("replayed",), ("reset", "replayed", "reset")])
    def test_a_reset_or_replay_between_two_parts_keeps_the_chain(
        self, tmp_path: Path, operations: tuple[str, ...]
    ) -> None:
        store = self.store_after_run_1(tmp_path, "committed", archive_read(files=("f1",), remaining=("f2", "f3")))
        for status in operations:
            state = self.operate(store, status)
        following = next_archive_part(state, 1)
        assert following is not None
        assert (following.files, following.remaining) == (("f2",), ("f3",))
        assert not bootstrap_due(pipeline(max_files_per_run=1), state)

    def test_an_operation_after_an_abandoned_part_plans_the_part_again(self, tmp_path: Path) -> None:
        run_1 = archive_read(files=("f1",), remaining=("f2",), switch=True)
        store = self.store_after_run_1(tmp_path, "abandoned", run_1)
        state = self.operate(store, "replayed")
        assert bootstrap_due(pipeline(max_files_per_run=1), state), "nothing landed yet: run 1 is bootstrapped again"

    def test_a_realign_over_runs_the_state_does_not_know_refuses_to_guess_the_next_part(self, tmp_path: Path) -> None:
        store = self.store_after_run_1(tmp_path, "committed", archive_read(files=("f1",), remaining=("f2", "f3")))
        state = store.load()
        positions = RealignedPositions(state_run_seq=1, sink_txn=3)
        store.realign(
            sink_txn=3,
            frontier={},
            summary=RunSummary.realigned("p", positions),
            expected_version=state.table_version,
        )
        with pytest.raises(StateError, match=r"f2, f3.*realign") as refused:
            next_archive_part(store.load(), 1)
        assert "runs 2 to 3" in str(refused.value)


class TestNothingBeforeUntilIsReadFromKafkaAgain:
    """Issue 35 row 4: backfills and rewinds stop at the bootstrap's ``until`` (archive rows have no Kafka
    coordinates, so the coordinate dedupe of a MERGE or of a rewound run's anti-join cannot find them).
    """

    def test_a_backfill_window_starts_no_earlier_than_until_and_one_entirely_before_it_is_refused(self) -> None:
        before, after = datetime(2025, 12, 30, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC)
        assert offsets_window(pipeline(), before, after) == (UNTIL, after)
        with_slack = pipeline().model_copy(update={"event_time": "value.ts", "event_time_slack_seconds": 60})
        assert offsets_window(with_slack, before, after)[0] == UNTIL
        assert after_bootstrap(pipeline(), before, after) == UNTIL
        with pytest.raises(ConfigError, match="lies before the bootstrap archive's until"):
            after_bootstrap(pipeline(), before, UNTIL)

    def test_a_rewind_stops_at_the_first_offset_at_or_after_until(self) -> None:
        key = TopicPartition(cluster_id="east", topic="orders", partition=0)
        topic = TopicSnapshot(
            topic="orders",
            topic_id="id-1",
            partitions={0: PartitionOffsets(earliest=2, latest=20), 1: PartitionOffsets(earliest=0, latest=8)},
            floor_lookups={0: 5, 1: 6},  # the first offsets at or after `until`
        )
        brokers = BrokerSnapshot(
            clusters={"east": ClusterSnapshot(cluster_id="east", topics={"orders": topic})}, taken_at=NOW
        )
        rows = {
            k: PartitionState(cluster_id="east", topic="orders", partition=k.partition, next_offset=n, topic_id="id-1")
            for k, n in ((key, 10), (key.model_copy(update={"partition": 1}), 4))
        }
        state = StateSnapshot(pipeline_id="p", table_version=1, partitions=rows)
        for target in ("earliest", "offset:3"):
            changes = decide_reset(state, brokers, ResetTarget.parse(target), rows).changes
            # partition 1 sits before `until` (a topic added after the bootstrap): a rewind does not move it forward
            assert [(c.partition, c.from_offset, c.to_offset) for c in changes] == [(0, 10, 5)]
        without_archive = brokers.model_copy(
            update={
                "clusters": {
                    "east": ClusterSnapshot(
                        cluster_id="east", topics={"orders": topic.model_copy(update={"floor_lookups": {}})}
                    )
                }
            }
        )
        unclamped = decide_reset(state, without_archive, ResetTarget.parse("earliest"), rows).changes
        assert [(c.partition, c.to_offset) for c in unclamped] == [(0, 2), (1, 0)]


class TestArchivePinnedByItsFirstPlan:
    """Issue 35 row 10: a file of the archive rewritten after a part landed (a record moved from a landed file into
    one still to come) would land that record twice; the first plan's pins guard every file until it lands."""

    def test_a_later_part_whose_file_changed_since_the_first_plan_is_refused(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from dynamic_kafka.spark import bootstrap_archive as archive

        storage = {"f1": (10, 1), "f2": (10, 1), "f3": (10, 1)}

        def listed(spark: object, read: ArchiveRead) -> dict[str, tuple[int, int]]:
            return {name: storage[name] for name in (*read.files, *read.remaining)}

        monkeypatch.setattr(archive, "_file_pins", listed)
        counts = SimpleNamespace(count=lambda: 1)  # the rows' count job: one row per file here
        monkeypatch.setattr(archive, "archive_rows", lambda spark, read, dead_letters: counts)
        first = archive.counted(None, archive_read(files=("f1",), remaining=("f2", "f3")), None)  # type: ignore[arg-type]
        assert first.file_pins == {"f1": (10, 1), "f2": (10, 1), "f3": (10, 1)}
        helper = TestArchiveOverSeveralRuns()
        storage["f2"] = (20, 2)  # after part 1 landed, a record of f1 was moved into f2
        part = next_archive_part(helper.state_after(first, "committed"), 1)
        assert part is not None
        assert part.file_pins == {"f2": (10, 1), "f3": (10, 1)}
        with pytest.raises(ArchiveChangedError, match=r"f2 \(planned 10 bytes modified at 1 ms; now 20 bytes"):
            archive.counted(None, part, None)  # type: ignore[arg-type]
        storage["f2"] = (10, 1)  # put back as the first plan listed it: the part is planned
        assert archive.counted(None, part, None).rows == 1  # type: ignore[arg-type]
