"""The mutation check of the exactly-once guards (docs/guards.md): each guard is removed in turn and the test named
for it is run; the guard is tested when that test fails without it.

Each guard below is the guard's text in its file and what replaces it (a no-op that still runs). The text must
occur exactly once in its file, else the script stops before changing anything: the code moved, update the entry.
The file is put back after its test, on failure and on Ctrl-C too (``finally``); a file left changed by a killed
script is restored with ``git checkout -- FILE``.

Run it on a clean tree, from the repository root, with the suite's usual environment (integration tests start
Kafka and Spark; ``DYNAMIC_KAFKA_TEST_CLUSTERS`` reuses running clusters across the guards' pytest sessions):

    .venv/bin/python scripts/mutate_guards.py --list          # the guards and their tests
    .venv/bin/python scripts/mutate_guards.py --only runner-lease-check fence-read-back
    .venv/bin/python scripts/mutate_guards.py                 # every guard (tens of minutes)

Each line says whether the test failed without the guard (what it should do), passed, or timed out (which says
nothing); each run's output is kept in ``--logs`` (default ``mutation-logs/``) to read why it failed. Exit status 1
when some guard's test did not fail.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Guard:
    """One exactly-once guard: where it is, how it is removed, and the test that must fail without it."""

    name: str
    path: str
    guard: str
    removed: str
    test: str


GUARDS = (
    Guard(
        "run-lock",
        "dynamic_kafka/protocol/guard.py",
        "            if lock and not held.enter_context(try_exclusive_lock(path)):\n"
        "                raise in_progress_error(self.store)",
        "            if False:\n                pass",
        "tests/unit/test_run_guard_rules.py::test_a_run_finding_the_run_lock_taken_is_refused_and_writes_nothing",
    ),
    Guard(
        "state-behind-sink",
        "dynamic_kafka/protocol/run.py",
        "        check_not_behind(self.pipeline, state, self.store.path)\n",
        "",
        "tests/unit/test_run_guard_rules.py::test_a_state_behind_its_sink_is_refused_before_anything_is_planned",
    ),
    Guard(
        "backfill-behind-sink",
        "dynamic_kafka/protocol/realign.py",
        "    if position.backfill is not None and position.backfill > state.backfill_sequence:",
        "    if False:",
        "tests/unit/test_run_guard_rules.py::"
        "test_a_state_restored_from_before_a_backfill_is_refused_and_realign_rebuilds_its_frontier",
    ),
    Guard(
        "live-owner-refused",
        "dynamic_kafka/protocol/abandon.py",
        "    if head.lease_is_fresh(now) and not (owner is not None and owner.is_gone()):",
        "    if False:",
        "tests/unit/test_run_guard_rules.py::test_a_planned_run_with_a_fresh_lease_on_another_host_is_not_recovered",
    ),
    Guard(
        "owner-gone-same-boot",
        "dynamic_kafka/state/owner.py",
        "        if self.boot is None or here is None or self.boot != here:",
        "        if False:",
        "tests/unit/test_leases.py::test_an_owner_on_another_machine_with_the_same_hostname_is_never_taken_for_gone",
    ),
    Guard(
        "state-exact-version",
        "dynamic_kafka/state/table.py",
        "            dt = self.open(expected_version)",
        "            dt = self.open()",
        "tests/unit/test_run_guard_rules.py::test_a_lease_renewal_that_loses_the_state_stops_the_run_from_committing",
    ),
    Guard(
        "backfill-lease-holds-runs",
        "dynamic_kafka/state/store.py",
        "        if lease is None or lease.expires_at is None or lease.expires_at <= self._clock():\n"
        "            return",
        "        return",
        "tests/unit/test_leases.py::test_a_backfill_lease_keeps_runs_and_other_backfills_away_until_it_is_released",
    ),
    Guard(
        "lease-renewal-lost",
        "dynamic_kafka/state/lease.py",
        "            if self._holding_version() == _ELSEWHERE:",
        "            if False:",
        "tests/unit/test_leases.py::test_a_holder_whose_run_was_taken_over_is_stopped_at_its_check_before_the_next_renewal",
    ),
    Guard(
        "runner-lease-check",
        "dynamic_kafka/protocol/guard.py",
        "        if self._keeper is not None:\n            self._keeper.check()",
        "        pass",
        "tests/integration/test_backfill_guards.py::"
        "test_a_run_that_lost_its_lease_before_the_write_writes_nothing_and_fails_retriably",
    ),
    Guard(
        "config-pins",
        "dynamic_kafka/protocol/recovery.py",
        "    if not in_sink and not fenced:\n        check_config(context, plan)",
        "    pass",
        "tests/integration/test_decode_pins.py::"
        "test_json_strict_flipped_under_a_crashed_run_is_refused_and_restored_lands_every_record_once",
    ),
    Guard(
        "key-pins",
        "dynamic_kafka/decoding/registry_formats.py",
        '    pinned = {(pin.cluster_id, pin.topic): pin for pin in pins if pin.role == "key"}',
        "    pinned: dict[tuple[str, str], DecodePin] = {}",
        "tests/integration/test_decode_pins.py::test_a_recovery_decodes_keys_with_the_pinned_key_schema_ids",
    ),
    Guard(
        "operation-beside-planned-run",
        "dynamic_kafka/state/store.py",
        '        if head is not None and head.status == "planned":\n            raise self.planned_error(head)',
        "        if False:\n            raise self.planned_error(head)",
        "tests/unit/test_offset_reset_rules.py::"
        "test_an_operation_is_refused_beside_a_planned_run_and_after_another_commit",
    ),
    Guard(
        "data-loss",
        "dynamic_kafka/plan/planner.py",
        "        if start >= offsets.earliest:\n            return start",
        "        if True:\n            return start",
        "tests/unit/test_planner.py::TestPolicies::test_data_loss_fails_naming_every_lost_range",
    ),
    Guard(
        "topic-id",
        "dynamic_kafka/plan/planner.py",
        "        reason = self._recreation(snapshot, same, stale)",
        "        reason = None",
        "tests/unit/test_planner.py::TestPolicies::test_recreated_topic_fails_by_default",
    ),
    Guard(
        "leader-epoch",
        "dynamic_kafka/plan/planner.py",
        "        if offsets.diverged_at is not None and offsets.diverged_at < start:",
        "        if False:",
        "tests/unit/test_planner.py::TestPolicies::test_diverged_log_refilled_past_the_committed_offset_fails_naming_the_range",
    ),
    Guard(
        "backfill-mirror-clamp",
        "dynamic_kafka/operations/backfill.py",
        "        handover = starting if isinstance(starting, TimestampOffsets) "
        "and starting.timestamp_ms > start_ms else None",
        "        handover = None",
        "tests/model/test_holes.py::test_new_a_backfill_repeated_across_a_mirror_failover_does_not_land_the_mirrored_copies",
    ),
    Guard(
        "backfill-floor-clamp",
        "dynamic_kafka/operations/backfill.py",
        "        if floor > split.start_offset:",
        "        if False:",
        "tests/model/test_holes.py::test_new_backfill_merge_keeps_a_recreated_topics_records",
    ),
    Guard(
        "topics-unchanged-before-commit",
        "dynamic_kafka/protocol/prepare.py",
        "        context.check_topics_unchanged(self.plan, self.connections, backfill=backfill)",
        "        if backfill:\n"
        "            context.check_topics_unchanged(self.plan, self.connections, backfill=backfill)",
        "tests/integration/test_topic_recreated_during_run.py::test_fail_stops_the_run_with_nothing_committed",
    ),
    Guard(
        "backfill-topics-unchanged",
        "dynamic_kafka/protocol/prepare.py",
        "        context.check_topics_unchanged(self.plan, self.connections, backfill=backfill)",
        "        if not backfill:\n"
        "            context.check_topics_unchanged(self.plan, self.connections, backfill=backfill)",
        "tests/integration/test_backfill_guards.py::"
        "test_a_backfill_whose_topic_is_recreated_before_its_merge_merges_nothing_and_fails_retriably",
    ),
    Guard(
        "backfill-lease-check",
        "dynamic_kafka/protocol/guard.py",
        "        if self._keeper is not None:\n            self._keeper.check()",
        "        pass",
        "tests/integration/test_backfill_guards.py::test_a_backfill_whose_lease_was_taken_before_its_merge_merges_nothing",
    ),
    Guard(
        "backfill-overlap-dedupe",
        "dynamic_kafka/sink/incremental.py",
        "    return tables.without_present(decoded, [target.sink_path, target.dead_letter_path], target.overlaps)",
        "    return decoded",
        "tests/integration/test_backfill_overlap.py::test_an_incremental_run_skips_what_a_backfill_landed_beyond_its_offsets",
    ),
    Guard(
        "dead-letter-dedupe-in-own-append",
        "dynamic_kafka/sink/incremental.py",
        "            bad = tables.without_present(bad, [target.dead_letter_path], target.overlaps)",
        "            pass",
        "tests/model/test_holes.py::test_a_backfill_merge_racing_a_run_does_not_duplicate_dead_letters",
    ),
    Guard(
        "commit-re-read",
        "dynamic_kafka/sink/incremental.py",
        "    if commit is None:\n        raise _overwritten(table, target)",
        '    if commit is None:\n        return Found(Commit(version=0, info={"dynamic_kafka.commit_id": commit_id}, '
        "txns=(), added_records=0), ours=True)",
        "tests/integration/test_sink_commits.py::"
        "test_a_run_whose_sink_commit_another_process_replaced_fails_retriably_and_the_next_run_lands_it_once",
    ),
    Guard(
        "staging-folder-committed-files",
        "dynamic_kafka/sink/staged_append.py",
        "        _check_committed(table, folder, {info.base_name: info.size or 0 for info in files}, committed)",
        "        pass",
        "tests/integration/test_sink_commits.py::"
        "test_a_stray_file_in_a_staging_folder_never_lands_and_the_next_run_removes_the_leftovers",
    ),
    Guard(
        "fence-on-abandon",
        "dynamic_kafka/protocol/abandon.py",
        '        if fence_run(sink, "sink", pipeline.id, plan.run_seq, reason) == "landed":',
        "        if False:",
        "tests/integration/test_abandon_fence.py::test_no_late_writer_of_an_abandoned_run_lands_anything",
    ),
    Guard(
        "fence-read-by-recovery",
        "dynamic_kafka/protocol/recovery.py",
        "    fenced = holds_fence(pipeline, plan, [table for table, txn in txns if txn == plan.run_seq])",
        "    fenced = False",
        "tests/integration/test_abandon_fence.py::test_an_abandon_interrupted_after_its_fence_is_finished_by_the_next_run",
    ),
    Guard(
        "fence-read-back",
        "dynamic_kafka/sink/fence.py",
        "        if not _holds_own_commit(ref, app_id, run_seq, commit_id):",
        "        if False:",
        "tests/unit/test_fence.py::test_a_fence_whose_log_entry_another_writer_replaced_is_committed_again",
    ),
    Guard(
        "abandon-raises-frontier",
        "dynamic_kafka/protocol/abandon.py",
        "                _raise_to(landed, run_frontier(dead_letters, plan.run_seq))\n            else:",
        "                pass\n            else:",
        "tests/integration/test_abandon_fence.py::test_the_dead_letters_of_an_abandoned_run_are_not_landed_again",
    ),
    Guard(
        "run-deadline",
        "dynamic_kafka/spark/deadline.py",
        "            self._tags.cancel(self.tag)",
        "            pass",
        "tests/integration/test_run_guards.py::test_a_spark_job_still_running_at_the_run_deadline_is_interrupted",
    ),
    Guard(
        "maintenance-lease-check",
        "dynamic_kafka/protocol/guard.py",
        "        if self._keeper is not None:\n            self._keeper.check()",
        "        pass",
        "tests/integration/test_sink_maintenance.py::test_a_maintenance_whose_lease_was_taken_stops_before_its_next_step",
    ),
    Guard(
        "vacuum-retention-floor",
        "dynamic_kafka/operations/maintain.py",
        "    _check_floor(pipeline, retention_hours, unsafe=unsafe_vacuum_retention)\n",
        "",
        "tests/integration/test_sink_maintenance.py::"
        "test_a_vacuum_retention_below_the_floor_is_refused_so_an_in_flight_writers_file_stays",
    ),
    Guard(
        "publication-fences-previous-cluster",
        "dynamic_kafka/publish/protocol.py",
        "    session = log.open(moves[-1].place)\n    try:\n        return session.progress()\n"
        "    finally:\n        session.close()\n",
        "    return log.peek(moves[-1].place)\n",
        "tests/model/test_publication_protocol.py::"
        "test_the_publication_protocol_publishes_every_row_once_across_crashes_zombies_and_moves",
    ),
    Guard(
        "publication-move-start",
        "dynamic_kafka/publish/protocol.py",
        "        return Start(max(own or 0, last.start_version), None)",
        "        return Start(own or 0, None)",
        "tests/model/test_publication_protocol.py::"
        "test_the_publication_protocol_publishes_every_row_once_across_crashes_zombies_and_moves",
    ),
    Guard(
        "publication-append-only",
        "dynamic_kafka/publish/source.py",
        "            elif removed:",
        "            elif False:",
        "tests/unit/test_publication_rules.py::"
        "test_a_version_that_removed_rows_is_refused_and_a_compaction_publishes_nothing",
    ),
    Guard(
        "publication-pending-plan-refused",
        "dynamic_kafka/publish/slices.py",
        "        if self.session.pending() is not None:\n            raise PlanPendingError\n",
        "",
        "tests/model/test_publication_slices.py::"
        "test_large_runs_in_slices_publish_every_row_once_across_killed_tasks_retries_zombies_and_moves",
    ),
    Guard(
        "publication-pending-plan-first",
        "dynamic_kafka/publish/slices.py",
        "        pending = session.pending()\n",
        "        pending = None\n",
        "tests/model/test_publication_slices.py::"
        "test_large_runs_in_slices_publish_every_row_once_across_killed_tasks_retries_zombies_and_moves",
    ),
    Guard(
        "publication-slice-skips-done",
        "dynamic_kafka/publish/slices.py",
        "        first = piece.first if done is None else max(done, piece.first)",
        "        first = piece.first",
        "tests/model/test_publication_slices.py::"
        "test_large_runs_in_slices_publish_every_row_once_across_killed_tasks_retries_zombies_and_moves",
    ),
    Guard(
        "publication-settle-before-move",
        "dynamic_kafka/publish/slices.py",
        "    if not moves or moves[-1].place == place:\n        return\n    previous = moves[-1].place\n",
        "    return\n    previous = moves[-1].place\n",
        "tests/model/test_publication_slices.py::"
        "test_large_runs_in_slices_publish_every_row_once_across_killed_tasks_retries_zombies_and_moves",
    ),
    Guard(
        "bootstrap-first-read-floor",
        "dynamic_kafka/plan/planner.py",
        "                start = self._not_below_until(key, start, snapshot)",
        "                pass",
        "tests/unit/test_bootstrap_rules.py::TestAFirstReadAfterTheBootstrapRun",
    ),
    Guard(
        "bootstrap-due-after-its-own-run",
        "dynamic_kafka/plan/planner.py",
        "not state.partitions and archive is not None and archive.switch",
        "not state.partitions",
        "tests/unit/test_bootstrap_rules.py::TestArchiveOverSeveralRuns::"
        "test_an_abandoned_later_part_does_not_make_the_bootstrap_due_when_no_partition_was_read",
    ),
    Guard(
        "reset-mirror-clamp",
        "dynamic_kafka/operations/offsets_reset.py",
        "    floors = {cid: handovers.get(cid, until_ms) for cid in {k.cluster_id for k in selected}}",
        "    floors = {cid: until_ms for cid in {k.cluster_id for k in selected}}",
        "tests/model/test_holes.py::test_an_offsets_rewind_after_a_mirror_failover_does_not_land_the_mirrored_copies",
    ),
    Guard(
        "backfill-records-its-table",
        "dynamic_kafka/operations/backfill.py",
        "        streams=tables_of_partitions(context.pipeline, plan.read_splits),",
        "        streams=None,",
        "tests/model/test_holes.py::"
        "test_a_backfill_before_a_topics_first_run_keeps_the_topic_in_the_table_it_merged_into",
    ),
)


def _check_texts(guards: list[Guard]) -> None:
    for g in guards:
        found = (ROOT / g.path).read_text().count(g.guard)
        if found != 1:
            sys.exit(f"{g.name}: its text occurs {found} times in {g.path} (want once): update the entry")


def _run(g: Guard, timeout: int, logs: Path) -> tuple[str, float]:
    """Runs ``g``'s test with ``g`` removed, its output kept in ``logs``; returns the outcome and the seconds."""
    path = ROOT / g.path
    original = path.read_text()
    path.write_text(original.replace(g.guard, g.removed, 1))
    started = time.monotonic()
    try:
        command = [sys.executable, "-m", "pytest", g.test, "-x", "-q", "-p", "no:cacheprovider"]
        command += ["-o", f"timeout={timeout}"]
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    finally:
        path.write_text(original)
    output = done.stdout + done.stderr
    (logs / f"{g.name}.log").write_text(output)
    if "+ Timeout +" in output:  # a test stopped by pytest-timeout says nothing about the guard
        outcome = "TIMED OUT"
    elif done.returncode == 1:
        outcome = "fails without it"
    elif done.returncode == 0:
        outcome = "PASSES WITHOUT IT"
    else:
        outcome = f"PYTEST EXITED {done.returncode}"
    return outcome, time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", metavar="NAME", help="these guards only")
    parser.add_argument("--list", action="store_true", help="list the guards and their tests, change nothing")
    parser.add_argument("--timeout", type=int, default=1800, help="pytest-timeout per test, seconds (default 1800)")
    parser.add_argument("--logs", type=Path, default=Path("mutation-logs"), help="folder for each run's output")
    args = parser.parse_args()
    chosen = [g for g in GUARDS if not args.only or g.name in args.only]
    unknown = set(args.only or ()) - {g.name for g in GUARDS}
    if unknown:
        sys.exit(f"unknown guards: {', '.join(sorted(unknown))}; see --list")
    _check_texts(chosen)
    if args.list:
        for g in chosen:
            print(f"{g.name}\t{g.path}\t{g.test}")
        return 0
    args.logs.mkdir(parents=True, exist_ok=True)
    unguarded = []
    for g in chosen:
        outcome, seconds = _run(g, args.timeout, args.logs)
        print(f"{g.name}\t{outcome}\t{seconds:.0f}s\t{g.test}", flush=True)
        if outcome != "fails without it":
            unguarded.append(g.name)
    if unguarded:
        print(f"not shown guarded by their tests: {', '.join(unguarded)} (outputs in {args.logs})", file=sys.stderr)
    return 1 if unguarded else 0


if __name__ == "__main__":
    sys.exit(main())
