"""The minimal examples the model found for each hole, replayed step by step with the hole's switch off.

A fixed hole's replay is a plain regression test (issue 11's all are). An open hole (issue 24's, at the end) has its
name in ``world.KNOWN_HOLES`` (gating the rule or oracle that finds it, so the suite passes) and a replay here
marked ``pytest.mark.xfail(strict=True, raises=ProtocolViolationError)``: it passes while the hole is open and
fails the suite the day the fix lands, the signal to delete the mark AND the name (then the random model covers
the fixed behaviour too).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pytest

from dynamic_kafka.errors import ConfigError, StateBehindSinkError
from tests.model.test_protocol import STATS, ProtocolMachine
from tests.model.world import KNOWN_HOLES, Harness

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.model


class Replay:
    """Calls machine rules in order, checking the invariant after each, as Hypothesis would."""

    def __init__(self, machine: ProtocolMachine) -> None:
        self.m = machine

    def __getattr__(self, rule: str) -> Any:
        def step(**kwargs: Any) -> None:
            getattr(self.m, rule)(**kwargs)
            self.m.no_record_twice()

        return step


@contextmanager
def machine_without(hole: str, **setup: Any) -> Iterator[Replay]:
    class Machine(ProtocolMachine):
        holes = KNOWN_HOLES - {hole}

    m = Machine()
    try:
        config: dict[str, Any] = {
            "starting": "earliest",
            "on_data_loss": "skip",
            "drain_removed": False,
            "skip_unreachable": False,
            "cap": None,
            **setup,
        }
        m.setup(**config)
        yield Replay(m)
    finally:
        m.teardown()


def test_recreated_with_fewer_partitions_is_reset_once() -> None:
    with machine_without("hole1_recreated_fewer_partitions") as r:
        r.produce(cid="c1", topic="a", partition=1, count=1, txn=False, bad=False)
        r.run_clean()
        r.recreate_topic(cid="c1", topic="a", partitions=1, gone_first=False)
        r.produce(cid="c1", topic="a", partition=0, count=1, txn=False, bad=False)
        r.run_clean()  # reset: the new topic is read from earliest (right)
        r.run_clean()  # the old partition 1 row still "no longer exists": reset again, the record lands twice


def test_sink_txn_ahead_of_state_skips_writes() -> None:
    # Fixed on main by the run guards: the run refuses with StateBehindSinkError (realign repairs the state).
    with machine_without("hole2_sink_txn_ahead_of_state") as r:
        r.produce(cid="c1", topic="a", partition=0, count=1, txn=False, bad=False)
        r.run_clean()
        r.backup_state()
        r.produce(cid="c1", topic="a", partition=0, count=1, txn=False, bad=False)
        r.run_clean()  # run 2: sink txn 2
        r.restore_state()  # the state is back at run 1
        r.produce(cid="c1", topic="a", partition=0, count=1, txn=False, bad=False)
        r.run_clean()  # run 2 again: "already committed" (sink txn 2 >= 2), the new record is never written


def test_old_backfill_frontier_does_not_drop_a_recreated_topics_records() -> None:
    with machine_without("hole3_backfill_frontier_not_keyed_by_topic_id") as r:
        r.produce(cid="c1", topic="a", partition=0, count=3, txn=False, bad=False)
        r.m.harness.backfill(r.m.world.clock_ms - 10, r.m.world.clock_ms + 1, None)
        r.m._after_state_change()
        r.run_clean()
        r.recreate_topic(cid="c1", topic="a", partitions=2, gone_first=False)
        r.produce(cid="c1", topic="a", partition=0, count=2, txn=False, bad=False)
        r.run_clean()  # reset to earliest; offsets 0, 1 are below the old frontier 3: anti-joined away


def test_recovery_abandons_a_plan_whose_range_retention_deleted() -> None:
    with machine_without("hole4_recovery_replays_stale_plan") as r:
        r.produce(cid="c1", topic="a", partition=0, count=3, txn=False, bad=False)
        r.run(crash_at=0)  # killed right after the plan was written
        r.retention(cid="c1", topic="a", partition=0, count=3)
        r.run_clean()  # recovery reads the deleted range: failOnDataLoss, on every later run too


def test_recovery_abandons_a_plan_of_a_recreated_topic() -> None:
    with machine_without("hole4_recovery_replays_stale_plan") as r:
        r.produce(cid="c1", topic="a", partition=0, count=2, txn=False, bad=False)
        r.run(crash_at=0)
        r.recreate_topic(cid="c1", topic="a", partitions=2, gone_first=False)
        r.produce(cid="c1", topic="a", partition=0, count=2, txn=False, bad=False)
        r.run_clean()  # recovery reads the NEW topic's records at the old plan's offsets, commits the old topic id
        r.run_clean()  # the id differs: reset, read from earliest again: the new records land twice


def test_new_topic_on_a_known_stream_starts_at_earliest() -> None:
    with machine_without("hole9_new_topic_starts_at_latest", starting="latest") as r:
        r.produce(cid="c1", topic="a", partition=0, count=1, txn=False, bad=False)
        r.run_clean()  # first run: latest (right, by the starting initializer)
        r.place_topic(sid="s1", cid="c1", topic="b")
        r.produce(cid="c1", topic="b", partition=0, count=2, txn=False, bad=False)
        r.run_clean()  # b is new on a stream with state: starts at latest, its 2 records are never read


def test_new_backfill_merge_keeps_a_recreated_topics_records() -> None:
    with machine_without("new_backfill_merge_not_keyed_by_topic_id") as r:
        r.produce(cid="c1", topic="a", partition=0, count=2, txn=False, bad=False)
        r.run_clean()
        r.recreate_topic(cid="c1", topic="a", partitions=2, gone_first=False)
        r.produce(cid="c1", topic="a", partition=0, count=2, txn=False, bad=False)
        # A backfill over the new records: the MERGE sees the old topic's rows at (c1, a, 0, 0..1), inserts nothing.
        r.m.harness.backfill(r.m.world.clock_ms - 1, r.m.world.clock_ms + 1, None)
        r.m._after_state_change()
        r.run_clean()  # reset reads [0, 2), below the frontier: anti-joined against the old rows; never lands


def test_new_a_state_restored_from_before_a_backfill_is_refused_until_realigned() -> None:
    with machine_without("new_restored_state_regresses_backfill_frontier") as r:
        r.produce(cid="c1", topic="a", partition=0, count=1, txn=False, bad=False)
        r.run_clean()
        r.backup_state()
        r.produce(cid="c1", topic="a", partition=0, count=2, txn=False, bad=False)
        r.m.harness.backfill(r.m.world.clock_ms - 1, r.m.world.clock_ms + 1, None)  # merges both, frontier 3
        r.m._after_state_change()
        r.restore_state()  # frontier back to none; the sink's run txn is still 1 = the state's last run
        # Once run 2 appended offsets 1, 2 blind, already merged by the backfill. The backfill's MERGE now records
        # its number (1) as a transaction of its own, the restored state knows none: the run is refused.
        with pytest.raises(StateBehindSinkError, match="holds backfill 1 of this pipeline"):
            r.m.harness.run(None)
        assert len(r.m.harness.sink.rows) == 3


def test_recovery_refuses_a_plan_made_under_other_settings() -> None:
    """A crashed run is not executed again under another key format (a semantic setting pinned in its plan): a
    clear ConfigError, nothing written; once the operator abandons it, the next run plans afresh."""
    with machine_without("none") as r:
        r.produce(cid="c1", topic="a", partition=0, count=2, txn=False, bad=False)
        r.run(crash_at=0)  # killed right after the plan was written
        m = r.m
        changed = Harness(m.root, m.world, {"key": {"format": "string"}, "on_topic_recreated": "reset"})
        changed.streams = m.harness.streams
        changed.publish_metadata()
        with pytest.raises(ConfigError, match=r"run 1 was planned .* key\.format changed") as info:
            changed.run(None)
        assert "dynamic-kafka abandon" in str(info.value)
        assert changed.sink.rows == []
        changed.store.abandon_run(1, reason="key.format changed to string")
        changed.run(None)
        assert len(changed.sink.rows) == 2
        assert [(run.run_seq, run.status) for run in changed.store.run_history()] == [
            (2, "committed"),
            (1, "abandoned"),
        ]


def test_new_a_truncation_refilled_before_the_next_run_is_detected() -> None:
    with machine_without("new_truncation_refilled_before_the_next_run") as r:
        r.place_topic_in_use(cid="c1", count=1, sid="s1", topic="a")
        r.run(crash_at=None)  # lands a[0]@0, commits offset 1 under leader epoch 0
        r.truncation(cid="c1", count=1, partition=0, topic="a")  # unclean election: a[0]@0 is gone, epoch 1 at 0
        r.produce(cid="c1", topic="a", partition=0, count=1, txn=False, bad=False)  # a new record at offset 0
        r.run_clean()  # latest 1 == committed 1, but epoch 0 ended at 0: resumes at 0 and lands the new record


def test_new_a_refilled_truncation_fails_naming_the_range_and_a_clean_leader_change_is_not_flagged() -> None:
    with machine_without("new_truncation_refilled_before_the_next_run", on_data_loss="fail") as r:
        r.place_topic_in_use(cid="c1", count=1, sid="s1", topic="a")
        r.produce(cid="c1", topic="a", partition=0, count=2, txn=False, bad=False)
        r.run(crash_at=None)  # commits offset 2 under epoch 0
        r.leader_change(cid="c1", topic="a", partition=0)  # a clean restart: epoch 1 at 2, nothing lost
        r.produce(cid="c1", topic="a", partition=0, count=1, txn=False, bad=False)
        r.run_clean()  # the epoch changed and the check finds nothing: offset 2 is read, no error
        r.truncation(cid="c1", count=2, partition=0, topic="a")  # epoch 2 at 1: offsets 1, 2 are gone
        r.produce(cid="c1", topic="a", partition=0, count=3, txn=False, bad=False)  # refilled to 4, beyond 3
        r.run_clean()  # DataLossError naming [1, 3) (checked against the world's truncation by the machine)
        assert r.m.oracle.blocked == "data loss under on_data_loss: fail"


# ---------------------------------------------------------------------------------------------------- issue 24
# Each replay is one item of issue 24, fixed: a plain regression test.


def test_failover_to_a_mirror_with_a_timestamp_handover_lands_no_mirrored_record_twice() -> None:
    with machine_without("item1_mirror_failover_reads_from_earliest") as r:
        r.produce_mirrored(partition=0, count=2, bad=False)  # c1/m[0]@0, @1, copied to c2/m[0]@0, @1
        r.run_clean()  # lands both from c1
        r.fail_over_to_the_mirror()  # s3 -> c2, c2's starting_offsets {timestamp: switch}
        r.produce_mirrored(partition=0, count=1, bad=False)  # c2/m[0]@2, after the switch
        r.run_clean()  # c2 is new on a tracked stream: read from earliest, the override ignored: 2 copies land again


def test_abandoning_a_run_whose_dead_letters_landed_does_not_land_them_again() -> None:
    with machine_without("item2_abandon_duplicates_dead_letters") as r:
        r.produce(cid="c1", topic="a", partition=0, count=2, txn=False, bad=True)  # @0 not JSON, @1 good
        r.run(crash_at=3)  # killed between the dead-letter append (txn 1) and the sink append
        assert r.m.harness.crasher.crashed_at == "after_dead_letter"
        r.abandon()  # the sink lacks run 1: allowed
        r.run_clean()  # run 2 plans [0, 2) again: @0 lands in the dead letters a second time


def test_a_recovery_abandoned_by_retention_does_not_land_dead_letters_again() -> None:
    with machine_without("item2_abandon_duplicates_dead_letters") as r:
        r.produce(cid="c1", topic="a", partition=0, count=1, txn=False, bad=False)  # @0 good
        r.produce(cid="c1", topic="a", partition=0, count=1, txn=False, bad=True)  # @1 not JSON
        r.run(crash_at=3)  # killed between the dead-letter append (txn 1) and the sink append
        assert r.m.harness.crasher.crashed_at == "after_dead_letter"
        r.retention(cid="c1", topic="a", partition=0, count=1)  # @0 deleted: run 1's range is gone in part
        r.run_clean()  # on_data_loss skip: recovery abandons run 1, run 2 reads [1, 2): @1 dead-lettered twice


def test_a_late_write_of_an_abandoned_run_does_not_land() -> None:
    with machine_without("item3_abandoned_run_not_fenced") as r:
        r.produce(cid="c1", topic="a", partition=0, count=2, txn=False, bad=False)
        r.run(crash_at=2)  # the client is killed while its sink append runs on the Connect server
        assert r.m.harness.crasher.crashed_at == "writing_sink"
        r.abandon()  # the sink lacks run 1: allowed
        r.late_write(pick=0, never=False)  # the server finishes run 1's append: txn 1, both records
        r.run_clean()  # run 2 plans [0, 2) again and appends under txn 2: both records twice


def test_a_decode_setting_edited_before_a_recovery_loses_no_record() -> None:
    with machine_without("item4_decode_inputs_not_pinned") as r:
        r.produce(cid="c1", topic="a", partition=0, count=1, txn=False, bad=True)  # @0 not JSON
        r.produce(cid="c1", topic="a", partition=0, count=1, txn=False, bad=False, lax=True)  # @1 {"id":1,"extra":1}
        r.run(crash_at=3)  # killed between the dead-letter append (@0, txn 1) and the sink append
        assert r.m.harness.crasher.crashed_at == "after_dead_letter"
        r.edit_config(setting="json_strict")  # true: @1 is undecodable now
        r.run_clean()  # the recovery skips the dead letters (txn 1 exists), filters @1 out of the sink: neither


def test_a_run_commits_its_offsets_only_after_finding_its_sink_commit() -> None:
    with machine_without("item5_sink_commit_not_verified") as r:
        r.produce(cid="c1", topic="a", partition=0, count=1, txn=False, bad=False)
        r.foreign_commit(kind="OPTIMIZE", pick=0, concurrent=True)  # takes the version of the next run append
        r.run_clean()  # the append's commit is replaced; sink_version None is accepted; offsets committed


def test_a_backfill_merge_racing_a_run_does_not_duplicate_dead_letters() -> None:
    with machine_without("item6_dead_letters_deduplicated_outside_their_append") as r:
        r.produce(cid="c1", topic="a", partition=0, count=2, txn=False, bad=True)  # @0 not JSON, @1 good
        m = r.m
        m.harness.backfill(m.world.clock_ms - 1, m.world.clock_ms + 1, None, stall=True)  # frontier 2; MERGE runs
        m._after_state_change()
        # The run anti-joins against both tables (nothing yet), the backfill's MERGE lands before the run's
        # dead-letter append (its step 2, after after_plan and before_read): @0 is in the dead letters twice.
        r.run_with_a_late_write(pick=0, at=2, crash_at=None)


def test_a_live_run_on_another_machine_with_the_same_hostname_is_not_taken_over() -> None:
    with machine_without("item7_same_hostname_taken_for_crashed") as r:
        r.produce(cid="c1", topic="a", partition=0, count=1, txn=False, bad=False)
        r.run_beside_another_machine(same_hostname=True)  # its pid is absent here: "provably gone"


def test_a_run_whose_lease_renewal_failed_once_does_not_write_unleased() -> None:
    with machine_without("item8_lease_renewal_not_retried") as r:
        r.produce(cid="c1", topic="a", partition=0, count=1, txn=False, bad=False)
        r.run_with_a_failed_lease_renewal(at=0)  # one renewal fails: the keeper stops for good, the run writes on


def test_a_topic_recreated_between_the_plan_and_the_read_is_not_committed_as_the_old_one() -> None:
    with machine_without("item10_topic_recreated_between_plan_and_read") as r:
        r.produce(cid="c1", topic="a", partition=0, count=2, txn=False, bad=False)
        # After run 1's plan (tid-1, a[0] [0, 2)) and before its read, a is recreated and refilled with 2 records.
        r.run_with_a_topic_recreated(cid="c1", topic="a", partitions=2, count=2, at=0)


def test_new_a_backfill_repeated_across_a_mirror_failover_does_not_land_the_mirrored_copies() -> None:
    with machine_without("new_backfill_repeated_across_a_mirror_failover") as r:
        r.foreign_commit(kind="OPTIMIZE", pick=0, concurrent=False)
        r.produce_mirrored(partition=0, count=1, bad=False)  # c1/m[0]@0, copied to c2/m[0]@0 (same timestamp)
        m = r.m
        ts_ms = min(int(record.ts_ms) for record in m.world.records.values())
        window = (ts_ms, ts_ms + 1)
        m.harness.backfill(*window, None)  # lands c1/m[0]@0
        m._after_state_change()
        r.fail_over_to_the_mirror()  # s3 -> {c2: [m]}, c2's starting_offsets {timestamp: switch}
        m.harness.backfill(*window, None)  # the same window, now over c2: its copy of @0 is merged as a new row
        m._after_state_change()
        m.no_record_twice()


def test_new_a_read_failing_on_a_topic_recreated_empty_under_it_is_that_recreation() -> None:
    # Found by the protocol model: run 2 plans c2/a[0] [0, 1) on the topic run 1's recreation left, and the topic is
    # recreated again, empty, before the read. The read fails (the range is past the new topic's end) before the
    # check of topic ids after the read could run: the failure is the recreation, given up under reset.
    m = ProtocolMachine()
    try:
        m.setup(starting="earliest", on_data_loss="skip", drain_removed=False, skip_unreachable=False, cap=None)
        r = Replay(m)
        r.place_topic(cid="c2", sid="s1", topic="a")
        r.run_with_a_topic_recreated(at=0, cid="c2", count=1, partitions=1, topic="a")
        r.run_with_a_topic_recreated(at=0, cid="c2", count=0, partitions=1, topic="a")
        r.run(crash_at=None)  # the next run reads the new (empty) topic: nothing lost, nothing twice
    finally:
        m.teardown()


# ---------------------------------------------------------------------------------------------------- issue 35
# The operations the model drives since issue 35 (offsets reset, dead-letter replay, maintenance, a bootstrap
# archive): their replays, fixed (an open hole's would be marked xfail(strict=True, raises=ProtocolViolationError)).


def test_a_vacuum_without_retention_leaves_a_late_writer_unreadable() -> None:
    with machine_without("35.9") as r:
        r.produce(cid="c1", topic="a", partition=0, count=1, txn=False, bad=False)
        r.run_clean()  # @0 lands
        r.produce(cid="c1", topic="a", partition=0, count=1, txn=False, bad=False)
        m = r.m
        m.harness.backfill(m.world.clock_ms - 1, m.world.clock_ms + 1, None, stall=True)  # frontier 2; MERGE runs
        m._after_state_change()
        r.maintain(crash_at=None, retention=0)  # VACUUM with no retention deletes the MERGE's uncommitted files
        r.late_write(pick=0, never=False)  # the MERGE commits: its commit names files that are gone
        r.run_clean()  # reading the sink fails: every later run fails (then loss at a repair)


def test_an_offsets_reset_between_two_bootstrap_parts_does_not_end_the_chain() -> None:
    # The archive (topic a's history: a[0]@0..1, a[1]@0..1, a[0]@0 gone to retention) in three files, one a run.
    with machine_without("35.2", archive=1) as r:
        r.run_clean()  # part 1 (part-0.json) and Kafka from until; two files remain
        r.offsets_reset(to="earliest", scope="partition", pick=0)  # a[0] back to its earliest: a history entry
        r.run_clean()  # plans from the reset's entry, which names no archive part: part-1 and part-2 never land


def test_an_archive_file_rewritten_after_its_part_landed_does_not_land_its_rows_again() -> None:
    # Archive files in time order, round robin: part-0 {a[0]@0, a[1]@1}, part-1 {a[0]@1}, part-2 {a[1]@0}.
    with machine_without("35.10", archive=1) as r:
        r.run_clean()  # part-0 lands; the first plan pinned all three files
        r.rewrite_archive_files(pick=0, at=None)  # a[1]@1 moves from part-0 to part-1 (rewritten, same names)
        refused = STATS["archive changes refused"]
        r.run_clean()  # part-1 differs from its pin: refused (it used to land a[1]@1 a second time); put back
        assert STATS["archive changes refused"] == refused + 1
        r.run_clean()  # part-1 as pinned
        r.run_clean()  # part-2: every record of the archive landed once


def test_a_backfill_before_the_bootstrap_run_does_not_land_archive_rows_twice() -> None:
    # Found by the random model (500 examples): the backfill comes BEFORE the bootstrap's first run.
    with machine_without("35.4", archive=1) as r:
        m = r.m
        m.harness.backfill(m.world.clock_ms - 2, m.world.clock_ms + 2, None)  # MERGEs a[1]@1 from Kafka
        m._after_state_change()
        r.run_clean()  # the bootstrap's first part (part-0.json holds a[1]@1) is appended blind: a[1]@1 twice


def test_new_an_archive_file_rewritten_after_a_part_read_it_is_checked_as_the_part_read_it() -> None:
    # Found by the random model (500 examples, 2026-12-06): a record moved from part-2 into part-0 after run 1 read
    # part-0 (as pinned) and before its commit. The oracle had checked part-0 as it is now (a record it never
    # read); the next part's plan is refused (part-2 changed), the files are put back and part-2 lands it.
    with machine_without("35.10", archive=1) as r:
        r.rewrite_archive_files(at=1, pick=2)
        r.run_clean()
        r.run_clean()
        r.run_clean()


def test_a_cluster_skipped_by_the_bootstrap_run_does_not_read_the_archives_history_again() -> None:
    # Found by a 500-example run after the issue-35 fixes: the archive holds topic a's history before until.
    with machine_without("", archive=1, skip_unreachable=True) as r:
        r.change_bootstrap(cid="c1", with_metadata=False)  # c1 moves; the metadata still names the old brokers
        r.run_clean()  # run 1: c1 skipped (unreachable, skip_unreachable), part-0 of the archive lands
        r.change_bootstrap(cid="c1", with_metadata=True)
        r.run_clean()  # c1/a is first read now: from its first offset at or after until, so once


def test_a_topic_unsubscribed_during_the_bootstrap_run_does_not_read_the_archives_history_again() -> None:
    # The same hole reached through the metadata (a second 500-example run found it).
    with machine_without("", archive=1) as r:
        r.unplace_topic(sid="s1", cid="c1", topic="a")  # the archive's topic is not subscribed during run 1
        r.run_clean()  # run 1 lands part-0 of the archive, reads no Kafka
        r.place_topic(sid="s1", cid="c1", topic="a")
        r.run_clean()  # c1/a is first read now: from its first offset at or after until, so once


def test_a_run_whose_shared_session_closes_between_its_two_appends_commits_nothing_and_the_next_run_lands_it() -> None:
    with machine_without("") as r:
        r.produce(cid="c1", topic="a", partition=0, count=2, txn=False, bad=True)
        r.run_clean()
        first = r.m.harness.server.attached[-1]
        r.produce(cid="c1", topic="a", partition=0, count=2, txn=False, bad=True)
        lost = STATS["sessions lost mid-run"]
        # Steps: after the plan, before the read, the dead-letter append, between it and the sink append.
        r.run_with_the_session_expiring(at=3, crash_at=None)
        assert STATS["sessions lost mid-run"] == lost + 1
        sink = r.m.harness.sink
        assert (r.m.pending, sink.txn["p"], sink.dead_txn["p"]) == (True, 1, 2)  # the sink append failed
        r.run_clean()  # the recovery attaches to the next generation and appends run 2's sink rows
        assert not r.m.pending
        assert r.m.harness.server.attached[-1] not in (first, *r.m.harness.server.closed)
        brokers, metadata, _ = r.m.harness.find_planned(r.m.state.last_run.plan)
        r.m.oracle.check_run(r.m.state.last_run.plan, brokers, metadata)


def test_a_pipeline_whose_shared_session_expired_between_runs_lands_the_next_run_in_the_next_generation() -> None:
    with machine_without("") as r:
        for expired in (False, True, True):
            if expired:
                r.expire_spark_sessions()
            r.produce(cid="c1", topic="a", partition=0, count=1, txn=False, bad=False)
            r.run_clean()
        server = r.m.harness.server
        assert (len(set(server.attached)), len(server.closed)) == (3, 2)
        assert r.m.harness.sink.txn["p"] == 3


def test_a_table_per_stream_lands_each_record_once_in_its_streams_table_across_a_crash_between_two_tables() -> None:
    with machine_without("", per_stream=True) as r:
        r.place_topic(sid="s2", cid="c1", topic="b")
        r.produce(cid="c1", topic="a", partition=0, count=2, txn=False, bad=True)
        r.produce(cid="c1", topic="b", partition=0, count=2, txn=False, bad=False)
        # Steps: the plan, the read, s1's dead letters, between s1's appends, s1's sink, between the tables.
        r.run(crash_at=5)
        assert r.m.harness.crasher.crashed_at == "between_tables"
        tables = r.m.harness.lake.tables
        assert (tables["s1"].txn["p"], tables["s2"].txn.get("p")) == (1, None)
        r.run_clean()  # the recovery writes s2's table only
        r.rename_stream(sid="s2", to="s0")  # s0 sorts first: b keeps its table
        r.place_topic(sid="s0", cid="c1", topic="a")  # a is listed by s0 too now: it keeps s1's table
        r.produce(cid="c1", topic="a", partition=1, count=1, txn=False, bad=False)
        r.produce(cid="c1", topic="b", partition=0, count=1, txn=False, bad=False)
        r.run_clean()
        assert sorted(tables) == ["s1", "s2"]
        assert [len(tables[s].rows) + len(tables[s].dead) for s in ("s1", "s2")] == [3, 3]


def test_a_stream_table_first_landed_after_a_state_backup_is_refused_after_the_restore_and_realigned() -> None:
    with machine_without("", per_stream=True) as r:
        r.produce(cid="c1", topic="a", partition=0, count=1, txn=False, bad=False)
        r.run_clean()
        r.backup_state()
        r.place_topic(sid="s2", cid="c1", topic="b")
        r.produce(cid="c1", topic="b", partition=0, count=2, txn=False, bad=False)
        r.run_clean()  # run 2: s2's table, a stream the backup does not know
        r.restore_state()
        r.produce(cid="c1", topic="b", partition=0, count=1, txn=False, bad=False)
        r.run_clean()  # refused: s2's table holds run 2, the state's last run is 1
        assert r.m.oracle.blocked is not None
        r.realign()
        r.run_clean()
        assert r.m.harness.lake.tables["s2"].txn["p"] == 3


def test_a_backfill_before_a_topics_first_run_keeps_the_topic_in_the_table_it_merged_into() -> None:
    with machine_without("35.16", per_stream=True) as r:
        r.place_topic_in_use(cid="c1", count=1, sid="s1", topic="a")
        r.m.harness.backfill(r.m.world.clock_ms - 10, r.m.world.clock_ms + 1, None)  # a[0]@0 into s1's table
        r.m._after_backfill(set())
        r.rename_stream(sid="s1", to="s0")  # s0 sorts first; the state has no row of a to pin it to s1
        r.run_clean()  # a[0]@0 lands in s0's table too: the dedupe below the frontier reads s0's table only


def test_an_abandoned_run_after_a_bootstrap_run_that_read_no_kafka_does_not_land_the_first_part_again() -> None:
    # Found by the random model once the topic could leave the subscription during the bootstrap run: "bootstrap
    # due" was "the last run abandoned and no partition has a position", true here though run 1 landed part-0.
    with machine_without("none", archive=1) as r:
        r.remove_stream(sid="s1")  # nothing subscribed: run 1 lands part-0 and reads no Kafka
        r.run_clean()
        r.run_beside_another_machine(same_hostname=False)  # run 2 planned (part-1) by another machine
        r.abandon()
        r.run_clean()  # part-1 again, not the bootstrap's first part


def test_an_offsets_rewind_after_a_mirror_failover_does_not_land_the_mirrored_copies() -> None:
    with machine_without("35.17") as r:
        r.produce_mirrored(partition=0, count=1, bad=False)  # m[0]@0 on c1, copied to c2
        r.run_clean()  # c1/m[0]@0 lands
        r.fail_over_to_the_mirror()  # s3 reads c2 from the switch time on
        r.run_clean()
        r.offsets_reset(to="earliest", scope="all", pick=0)  # c2/m[0] back to 0: the copy is read again
        r.run_clean()
