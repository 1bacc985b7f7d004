"""Owners and leases without a JVM: a host is a machine (its boot id), a renewal survives transient failures, a
holder that lost its lease is told before it writes, and a backfill's lease keeps runs from planning beside it.

Real state tables (delta-rs) on local disk. The transient failures are real: another commit moving the state's
version under the keeper, the state's folder briefly gone.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pytest

from dynamic_kafka.errors import LeaseLostError, RunInProgressError
from dynamic_kafka.model.plan import Plan, TopicPartition
from dynamic_kafka.model.summary import RunSummary
from dynamic_kafka.protocol.guard import in_progress_error
from dynamic_kafka.state import StateStore
from dynamic_kafka.state.lease import LeaseKeeper, RunOwner
from tests.support.builders import nth_run as a_plan
from tests.support.clock import FakeClock

if TYPE_CHECKING:
    from pathlib import Path

    from dynamic_kafka.state.owner import OwnerOperation

PID = "p"
KEY = TopicPartition(cluster_id="east", topic="orders", partition=0)


def now() -> datetime:
    return datetime.now(UTC)


def dead_pid() -> int:
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(child.stdout)


def planned(store: StateStore, owner: RunOwner, lease: timedelta) -> tuple[Plan, int]:
    """Run 1 committed, run 2 planned by ``owner``; returns run 2's plan and the version holding it."""
    first = a_plan(1)
    store.commit_run(
        first,
        summary=RunSummary.of_plan(first, "committed"),
        expected_version=store.begin_run(first, expected_version=None),
    )
    plan = a_plan(2)
    version = store.begin_run(
        plan, expected_version=store.load().table_version, owner=owner.text(), lease_expires_at=now() + lease
    )
    return plan, version


# --- a host is a machine ------------------------------------------------------------------------------------------


def test_an_owner_on_another_machine_with_the_same_hostname_is_never_taken_for_gone() -> None:
    # Same hostname, same initial pid namespace (its inode number is the same on every machine), a pid that does
    # not exist here: only the boot id tells it is another machine, whose run may be alive.
    twin = RunOwner.current().model_copy(update={"pid": dead_pid(), "boot": "0f0e0d0c-another-machine"})

    assert not twin.is_gone()
    assert RunOwner.current().model_copy(update={"pid": dead_pid()}).is_gone()  # the same machine and boot


def test_the_owner_text_names_the_boot_and_older_owner_texts_still_parse_but_are_never_gone() -> None:
    me = RunOwner.current()
    assert me.boot
    assert f" boot={me.boot} " in me.text()
    assert RunOwner.parse(me.text()) == me

    old = RunOwner.parse(f"host={me.host} pid={dead_pid()} pidns={me.pidns} token=t0")  # written before boot ids

    assert old is not None
    assert (old.host, old.boot, old.pidns, old.token) == (me.host, None, me.pidns, "t0")
    assert not old.is_gone()  # cannot tell the machine: waits for its lease to expire
    assert old.text() == f"host={me.host} pid={old.pid} pidns={me.pidns} token=t0"


# --- renewals survive transient failures --------------------------------------------------------------------------


def test_a_renewal_whose_version_another_commit_moved_renews_at_the_new_version(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state", PID)
    owner = RunOwner.current()
    plan, version = planned(store, owner, timedelta(seconds=30))
    keeper = LeaseKeeper(store, plan, owner, timedelta(seconds=30), version, now, every=timedelta(seconds=0.3))
    # Another commit that keeps this owner (an ambiguous renewal retried by hand) moves the version under the keeper.
    moved = store.lease(
        plan, owner=owner.text(), lease_expires_at=now() + timedelta(seconds=30), expected_version=version
    )
    keeper.start()
    time.sleep(1.2)  # real time: the keeper's thread renews every `every`

    latest = keeper.stop()

    assert latest > moved
    keeper.check()
    store.commit_run(
        plan, summary=RunSummary.of_plan(plan, "committed"), expected_version=latest
    )  # the run still commits


def test_a_renewal_that_fails_while_the_state_is_briefly_gone_is_retried_within_the_lease(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state", PID)
    owner = RunOwner.current()
    plan, version = planned(store, owner, timedelta(seconds=30))
    keeper = LeaseKeeper(
        store,
        plan,
        owner,
        timedelta(seconds=30),
        version,
        now,
        every=timedelta(seconds=0.3),
        retry=timedelta(seconds=0.1),
    )
    (tmp_path / "state").rename(tmp_path / "away")  # the state's folder unreachable for a moment
    keeper.start()
    time.sleep(1.0)  # real time: the keeper's thread renews every `every`
    (tmp_path / "away").rename(tmp_path / "state")
    time.sleep(1.0)

    latest = keeper.stop()

    assert latest > version  # renewed once the state was back
    head = store.load().last_run
    assert head is not None
    assert (head.status, head.owner) == ("planned", owner.text())
    store.commit_run(plan, summary=RunSummary.of_plan(plan, "committed"), expected_version=latest)


def test_a_lease_not_renewed_before_it_ran_out_is_lost_and_the_holder_is_stopped_before_writing(
    tmp_path: Path,
) -> None:
    store = StateStore(tmp_path / "state", PID)
    owner = RunOwner.current()
    plan, version = planned(store, owner, timedelta(seconds=1))
    clock = FakeClock()
    keeper = LeaseKeeper(store, plan, owner, timedelta(seconds=1), version, clock, retry=timedelta(seconds=0.1))
    shutil.move(tmp_path / "state", tmp_path / "away")  # gone for longer than the lease
    keeper.start()
    clock.advance(1.6)

    with pytest.raises(LeaseLostError) as caught:
        keeper.check()

    assert caught.value.retriable
    assert "run 2 of pipeline 'p' lost its lease" in str(caught.value)
    assert "stops before writing the sink" in str(caught.value)
    with pytest.raises(LeaseLostError):
        keeper.stop()


def test_a_holder_whose_run_was_taken_over_is_stopped_at_its_check_before_the_next_renewal(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state", PID)
    owner = RunOwner.current()
    plan, version = planned(store, owner, timedelta(seconds=30))
    keeper = LeaseKeeper(store, plan, owner, timedelta(seconds=30), version, now).start()  # renews every 10 s
    thief = RunOwner.current()
    store.lease(plan, owner=thief.text(), lease_expires_at=now() + timedelta(seconds=30), expected_version=version)

    with pytest.raises(LeaseLostError, match="names another owner now"):
        keeper.check()
    with pytest.raises(LeaseLostError):
        keeper.stop()


# --- the backfill lease -----------------------------------------------------------------------------------------


def test_a_backfill_lease_keeps_runs_and_other_backfills_away_until_it_is_released(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state", PID)
    other_host = RunOwner(host="elsewhere", boot="b-elsewhere", pid=4242, pidns="x", token="t0")
    recorded = store.record_backfill(
        {KEY: 30}, owner=other_host.text(), lease_expires_at=now() + timedelta(minutes=5), attempts=1
    )
    state = store.load()
    assert (recorded.sequence, state.backfill_sequence, state.backfill_owner) == (1, 1, other_host.text())

    with pytest.raises(RunInProgressError) as caught:
        store.begin_run(a_plan(1), expected_version=state.table_version)
    assert "a backfill is in progress for pipeline 'p'" in str(caught.value)
    assert "held by host elsewhere pid 4242" in str(caught.value)
    with pytest.raises(RunInProgressError, match="a backfill is in progress"):
        store.record_backfill({KEY: 40}, owner=RunOwner.current().text(), lease_expires_at=now(), attempts=1)
    assert store.load().table_version == state.table_version  # nothing written

    assert store.release_backfill_lease(owner=other_host.text()) is not None
    state = store.load()
    assert (state.backfill_owner, state.backfilled, state.backfill_sequence) == (None, {KEY: 30}, 1)
    store.begin_run(a_plan(1), expected_version=state.table_version)


def test_a_backfill_lease_that_expired_or_whose_process_is_gone_from_this_machine_holds_nothing(
    tmp_path: Path,
) -> None:
    store = StateStore(tmp_path / "state", PID)
    expired = RunOwner(host="elsewhere", boot="b-elsewhere", pid=4242, pidns="x", token="t0")
    store.record_backfill({KEY: 30}, owner=expired.text(), lease_expires_at=now() - timedelta(seconds=1))
    store.begin_run(a_plan(1), expected_version=store.load().table_version)

    store = StateStore(tmp_path / "state2", PID)
    gone = RunOwner.current().model_copy(update={"pid": dead_pid(), "token": "t1"})
    store.record_backfill({KEY: 30}, owner=gone.text(), lease_expires_at=now() + timedelta(minutes=5))
    store.begin_run(a_plan(1), expected_version=store.load().table_version)


def test_a_backfill_lease_is_renewed_by_its_keeper_and_taken_even_when_no_frontier_rises(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state", PID)
    store.record_backfill({KEY: 30})
    owner = RunOwner.current()
    first_end = now() + timedelta(seconds=3)

    recorded = store.record_backfill({KEY: 30}, owner=owner.text(), lease_expires_at=first_end)

    assert recorded.sequence is None  # no frontier rose: its MERGEs carry no marker
    assert recorded.version is not None
    assert store.load().backfill_owner == owner.text()
    keeper = LeaseKeeper(
        store, None, owner, timedelta(seconds=3), recorded.version, now, every=timedelta(seconds=0.3)
    ).start()
    time.sleep(1.0)  # real time: the keeper's thread renews every `every`
    keeper.check()
    latest = keeper.stop()
    state = store.load()
    assert latest == state.table_version
    assert state.backfill_lease_expires_at is not None
    assert state.backfill_lease_expires_at > first_end
    assert (state.backfilled, state.backfill_sequence) == ({KEY: 30}, 1)  # kept as they were


@pytest.mark.parametrize(
    ("operation", "said"),
    [
        ("replay", "a dead-letter replay is in progress for pipeline 'p'"),
        ("maintenance", "a sink maintenance is in progress for pipeline 'p'"),
        ("backfill", "a backfill is in progress for pipeline 'p'"),
    ],
)
def test_a_run_refused_by_the_writer_lease_names_the_operation_holding_it(
    tmp_path: Path, operation: OwnerOperation, said: str
) -> None:
    # Replays and maintenance take the backfill lease row too: a run refused while they work used to be told "a
    # backfill is in progress", sending its operator looking for a backfill nobody started.
    store = StateStore(tmp_path / "state", PID)
    holder = RunOwner(host="elsewhere", boot="b-elsewhere", pid=4242, pidns="x", token="t0", operation=operation)
    store.record_backfill({}, owner=holder.text(), lease_expires_at=now() + timedelta(minutes=5), attempts=1)
    assert RunOwner.parse(store.load().backfill_owner) == holder

    with pytest.raises(RunInProgressError) as planning:
        store.begin_run(a_plan(1), expected_version=store.load().table_version)
    with pytest.raises(RunInProgressError) as locked_out:
        raise in_progress_error(store)  # what a process that found the run lock taken says

    for caught in (planning, locked_out):
        assert said in str(caught.value)
        assert "held by host elsewhere pid 4242" in str(caught.value)
        assert caught.value.operation == operation


def test_an_owner_written_from_the_machine_id_holds_a_keyed_hash_of_it_never_the_id_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Where the kernel's boot id cannot be read, the machine id tells machines apart; systemd calls it
    # confidential, so the state holds an app-specific keyed hash of it, which still tells this machine from others.
    from deltalake import DeltaTable

    from dynamic_kafka.state import owner as owners

    raw = "4a1c0e5b9d2f48e7a3b6c8d0e1f2a3b4"
    machine_id = tmp_path / "machine-id"
    machine_id.write_text(raw + "\n")
    monkeypatch.setattr(owners, "_BOOT_ID", tmp_path / "no-boot-id")
    monkeypatch.setattr(owners, "_MACHINE_ID", machine_id)
    store = StateStore(tmp_path / "state", PID)
    me = RunOwner.current()

    planned(store, me.model_copy(update={"pid": dead_pid()}), timedelta(minutes=5))

    assert me.boot is not None
    assert me.boot.startswith("machine-")
    assert raw not in me.text()
    head = store.load().last_run
    assert head is not None
    written = RunOwner.parse(head.owner)
    assert written is not None
    assert written.is_gone()  # the same machine (its hash), its process gone
    assert not written.model_copy(update={"boot": "machine-" + raw}).is_gone()  # an owner holding the raw id
    rows = repr(DeltaTable(str(tmp_path / "state")).to_pyarrow_table().to_pylist())
    files = b"".join(p.read_bytes() for p in (tmp_path / "state").rglob("*") if p.is_file())
    assert me.boot in rows
    assert raw not in rows
    assert raw.encode() not in files
