"""The run protocol's guards that need no JVM and no broker: a state behind its sink, the planned run's owner and
lease, realignment, bounded metadata calls, the run deadline, the run lock's inheritance, schema comparison.

Real Delta tables (delta-rs) on local disk; sinks are written with delta-rs with the pipeline's txn, as Spark's
idempotent appends record it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from dynamic_kafka._toolchain.filelock import try_exclusive_lock
from dynamic_kafka.config.models import ProjectConfig, RetryConfig
from dynamic_kafka.errors import MetadataServiceError, RunInProgressError, RunTimeoutError, StateBehindSinkError
from dynamic_kafka.metadata.memory import InMemoryMetadataService
from dynamic_kafka.metadata.models import ClusterMetadata, KafkaStream
from dynamic_kafka.metadata.resolve import BoundedMetadataService, with_retries
from dynamic_kafka.model.plan import Plan, TopicPartition
from dynamic_kafka.model.summary import RunSummary
from dynamic_kafka.protocol.context import PipelineContext
from dynamic_kafka.protocol.realign import landed_frontier, realign
from dynamic_kafka.protocol.run import PipelineRunner
from dynamic_kafka.sink.tables import backfill_app_id
from dynamic_kafka.state import StateStore
from dynamic_kafka.state.lease import LeaseKeeper, RunOwner
from tests.support.builders import nth_run as a_plan

if TYPE_CHECKING:
    from collections.abc import Collection
    from pathlib import Path

PID = "p"


def project(tmp_path: Path, **pipeline: Any) -> ProjectConfig:
    return ProjectConfig.model_validate(
        {
            "metadata_service": {"type": "file", "path": str(tmp_path / "metadata.yaml")},
            # No consumer-group commit: these plans name brokers that do not exist (it would wait on them). A
            # committed plan's cluster that left the metadata is still asked, best effort, for its offsets: the
            # short deadline bounds that wait.
            "pipelines": [
                {
                    "id": PID,
                    "streams": ["orders"],
                    "sink": {"path": str(tmp_path / "sink")},
                    "consumer_group": None,
                    "kafka_timeout_seconds": 0.5,
                    **pipeline,
                }
            ],
        }
    )


def empty_service() -> InMemoryMetadataService:
    """A service whose one stream has no cluster: plans read nothing."""
    return InMemoryMetadataService([KafkaStream(stream_id="orders")])


def runner(tmp_path: Path, service: Any = None, **pipeline: Any) -> PipelineRunner:
    context = PipelineContext(project(tmp_path, **pipeline), PID, metadata_service=service or empty_service())
    return PipelineRunner(context)


def commit(store: StateStore, run_seq: int) -> None:
    state = store.load()
    plan = a_plan(run_seq)
    version = store.begin_run(plan, expected_version=state.table_version)
    store.commit_run(plan, summary=RunSummary.of_plan(plan, "committed"), expected_version=version)


def land(path: Path, run_seq: int, offsets: Collection[int], partition: int = 0) -> None:
    """Appends sink rows of run ``run_seq`` with txn ``(PID, run_seq)``, as an incremental run's write does."""
    _append(path, offsets, partition, run_seq, Transaction(PID, run_seq))


def land_backfill(path: Path, sequence: int, offsets: Collection[int]) -> None:
    """Appends sink rows of a backfill (no ``_run_seq``) with its MERGE's txn ``(PID/backfill, sequence)``."""
    _append(path, offsets, 0, None, Transaction(backfill_app_id(PID), sequence))


def _append(path: Path, offsets: Collection[int], partition: int, run_seq: int | None, txn: Transaction) -> None:
    rows = pa.table(
        {
            "cluster": ["east"] * len(offsets),
            "topic": ["orders"] * len(offsets),
            "partition": pa.array([partition] * len(offsets), pa.int32()),
            "offset": pa.array(list(offsets), pa.int64()),
            "_run_seq": pa.array([run_seq] * len(offsets), pa.int64()),
        }
    )
    write_deltalake(str(path), rows, mode="append", commit_properties=CommitProperties(app_transactions=[txn]))


# --- hole 2: a sink ahead of the state ---------------------------------------------------------------------------


def test_a_state_behind_its_sink_is_refused_before_anything_is_planned(tmp_path: Path) -> None:
    r = runner(tmp_path)
    commit(r.store, 1)
    land(tmp_path / "sink", 1, range(0, 10))
    land(tmp_path / "sink", 2, range(10, 20))  # run 2 landed, but the state was restored to run 1
    before = r.store.load().table_version

    with pytest.raises(StateBehindSinkError) as caught:
        r.run()

    assert not caught.value.retriable
    assert "holds run 2 of this pipeline but the state's last run is 1" in str(caught.value)
    assert "dynamic-kafka realign" in str(caught.value)
    assert r.store.load().table_version == before  # nothing planned


def test_a_dead_letter_table_ahead_of_the_state_is_refused_too(tmp_path: Path) -> None:
    r = runner(tmp_path)
    commit(r.store, 1)
    land(tmp_path / "sink", 1, range(0, 10))
    land(tmp_path / "sink_dead_letter", 3, [25])
    with pytest.raises(StateBehindSinkError, match="sink_dead_letter holds run 3"):
        r.run()


def test_realign_moves_run_seq_past_the_sink_and_raises_the_frontier_without_moving_offsets(tmp_path: Path) -> None:
    r = runner(tmp_path)
    commit(r.store, 1)
    land(tmp_path / "sink", 1, range(0, 10))
    land(tmp_path / "sink", 2, range(10, 20))
    land(tmp_path / "sink", 3, range(20, 24), partition=1)
    offsets_before = r.store.load().partitions

    dry = realign(r.pipeline, r.store, yes=False)
    assert (dry.needed, dry.applied, dry.next_run_seq) == (True, False, 4)
    assert dry.frontier == {"east/orders/0": 20, "east/orders/1": 24}
    assert r.store.load().next_run_seq == 2  # nothing changed

    done = realign(r.pipeline, r.store, yes=True)

    state = r.store.load()
    assert done.applied
    assert state.next_run_seq == 4
    assert state.last_run is not None
    assert state.last_run.status == "committed"
    assert state.partitions == offsets_before
    tp0 = TopicPartition(cluster_id="east", topic="orders", partition=0)
    assert state.backfilled[tp0] == 20
    assert realign(r.pipeline, r.store, yes=True).needed is False
    summary = r.run()  # no longer refused
    assert summary.run_seq == 4


def test_realign_counts_a_planned_head_as_not_landed_in_the_state(tmp_path: Path) -> None:
    r = runner(tmp_path)
    commit(r.store, 1)
    state = r.store.load()
    r.store.begin_run(a_plan(2), expected_version=state.table_version)
    land(tmp_path / "sink", 2, range(10, 20))
    land(tmp_path / "sink", 3, range(20, 30))
    assert landed_frontier(r.pipeline, 1) == {TopicPartition(cluster_id="east", topic="orders", partition=0): 30}
    assert realign(r.pipeline, r.store, yes=True).frontier == {"east/orders/0": 30}
    assert r.store.load().next_run_seq == 4


def test_a_state_restored_from_before_a_backfill_is_refused_and_realign_rebuilds_its_frontier(tmp_path: Path) -> None:
    r = runner(tmp_path)
    commit(r.store, 1)
    land(tmp_path / "sink", 1, range(0, 10))
    # A backfill merged offsets 5..29 (its frontier 30 is in a newer state than this one, restored from a backup).
    land_backfill(tmp_path / "sink", 1, range(5, 30))
    before = r.store.load().table_version

    with pytest.raises(StateBehindSinkError) as caught:
        r.run()
    assert "holds backfill 1 of this pipeline but the state knows backfills up to 0" in str(caught.value)
    assert "dynamic-kafka realign" in str(caught.value)
    assert r.store.load().table_version == before  # nothing planned

    dry = realign(r.pipeline, r.store, yes=False)
    assert (dry.needed, dry.applied, dry.next_run_seq) == (True, False, 2)
    assert (dry.state_backfill, dry.sink_backfill) == (0, 1)
    assert dry.frontier == {"east/orders/0": 30}  # from the backfill's rows; the run's rows are known

    realign(r.pipeline, r.store, yes=True)
    state = r.store.load()
    assert state.backfill_sequence == 1
    assert state.backfilled == {TopicPartition(cluster_id="east", topic="orders", partition=0): 30}
    assert state.last_run is not None
    assert (state.last_run.run_seq, state.last_run.status) == (1, "committed")  # the runs were not behind
    assert realign(r.pipeline, r.store, yes=True).needed is False
    assert r.run().run_seq == 2  # no longer refused


def test_realign_of_a_table_per_stream_reads_every_streams_table(tmp_path: Path) -> None:
    r = runner(tmp_path, streams=["eu", "us"], sink={"path": str(tmp_path / "t" / "{stream}")})
    eu, us = (
        a_plan(1).splits[0].model_copy(update={"partition": p, "stream_ids": (s,)}) for p, s in ((0, "eu"), (1, "us"))
    )
    plan = a_plan(1).model_copy(update={"splits": (eu, us)})
    version = r.store.begin_run(plan, expected_version=r.store.load().table_version)
    r.store.commit_run(plan, summary=RunSummary.of_plan(plan, "committed"), expected_version=version)
    land(tmp_path / "t" / "eu", 1, range(0, 10))
    land(tmp_path / "t" / "us", 1, range(0, 10), partition=1)
    # The state was restored from before run 2 (landed in eu's table) and a backfill (merged into us's table).
    land(tmp_path / "t" / "eu", 2, range(10, 20))
    _append(tmp_path / "t" / "us", range(10, 15), 1, None, Transaction(backfill_app_id(PID), 1))

    with pytest.raises(StateBehindSinkError, match=r"t/eu holds run 2"):
        r.run()
    done = realign(r.pipeline, r.store, yes=True)

    assert (done.needed, done.applied, done.next_run_seq) == (True, True, 3)
    assert (done.sink_txn, done.sink_backfill) == (2, 1)
    assert done.frontier == {"east/orders/0": 20, "east/orders/1": 15}  # each from its stream's table
    assert r.store.load().backfill_sequence == 1
    assert realign(r.pipeline, r.store, yes=True).needed is False


# --- hole 5: owner and lease -------------------------------------------------------------------------------------


def planned_by(store: StateStore, owner: str, lease_expires_at: datetime) -> Plan:
    commit(store, 1)
    state = store.load()
    plan = a_plan(2)
    store.begin_run(plan, expected_version=state.table_version, owner=owner, lease_expires_at=lease_expires_at)
    return plan


def test_a_planned_run_with_a_fresh_lease_on_another_host_is_not_recovered(tmp_path: Path) -> None:
    r = runner(tmp_path)
    other = RunOwner(host="elsewhere", pid=4242, pidns="x", token="t0")
    planned_by(r.store, other.text(), datetime.now(UTC) + timedelta(minutes=5))
    land(tmp_path / "sink", 2, range(10, 20))
    before = r.store.load().table_version

    with pytest.raises(RunInProgressError) as caught:
        r.run()

    assert "held by host elsewhere pid 4242" in str(caught.value)
    assert "(it planned run_seq 2 first)" in str(caught.value)
    assert r.store.load().table_version == before


def test_a_planned_run_whose_lease_expired_is_recovered(tmp_path: Path) -> None:
    r = runner(tmp_path)
    other = RunOwner(host="elsewhere", pid=4242, pidns="x", token="t0")
    planned_by(r.store, other.text(), datetime.now(UTC) - timedelta(seconds=1))
    land(tmp_path / "sink", 2, range(10, 20))  # it reached the sink: recovery commits only (no JVM)

    summary = r.run()

    assert (summary.recovered_run_seq, summary.run_seq, summary.status) == (2, 3, "empty")
    assert [(h.run_seq, h.status) for h in r.store.run_history()][:2] == [(3, "committed"), (2, "committed")]


def test_a_planned_run_of_a_dead_process_on_this_host_is_recovered_at_once(tmp_path: Path) -> None:
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = RunOwner.current().model_copy(update={"pid": int(child.stdout), "token": "t1"})
    assert dead.is_gone()
    r = runner(tmp_path)
    planned_by(r.store, dead.text(), datetime.now(UTC) + timedelta(minutes=5))
    land(tmp_path / "sink", 2, range(10, 20))
    assert r.run().recovered_run_seq == 2


def test_an_owner_is_gone_only_when_this_host_can_tell() -> None:
    me = RunOwner.current()
    assert RunOwner.parse(me.text()) == me
    assert RunOwner.parse(None) is None
    assert not me.is_gone()  # this very process
    assert not me.model_copy(update={"pid": os.getppid()}).is_gone()  # alive
    assert not me.model_copy(update={"host": socket.gethostname() + "-x", "pid": 2**22 + 7}).is_gone()
    assert not me.model_copy(update={"pidns": "other", "pid": 2**22 + 7}).is_gone()


def test_the_lease_keeper_renews_and_hands_over_the_latest_version(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state", PID)
    owner = RunOwner.current()
    commit(store, 1)
    state = store.load()
    plan = a_plan(2)
    first_end = datetime.now(UTC) + timedelta(seconds=3)
    version = store.begin_run(
        plan, expected_version=state.table_version, owner=owner.text(), lease_expires_at=first_end
    )
    keeper = LeaseKeeper(
        store, plan, owner, timedelta(seconds=3), version, lambda: datetime.now(UTC), every=timedelta(seconds=0.3)
    ).start()
    time.sleep(1.5)  # real time: the keeper's thread renews every `every`
    latest = keeper.stop()

    assert latest > version
    head = store.load().last_run
    assert head is not None
    assert head.owner == owner.text()
    assert head.lease_expires_at is not None
    assert head.lease_expires_at > first_end
    store.commit_run(plan, summary=RunSummary.of_plan(plan, "committed"), expected_version=latest)


def test_a_lease_renewal_that_loses_the_state_stops_the_run_from_committing(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state", PID)
    owner = RunOwner.current()
    commit(store, 1)
    state = store.load()
    plan = a_plan(2)
    version = store.begin_run(plan, expected_version=state.table_version, owner=owner.text())
    thief = RunOwner.current()
    store.lease(plan, owner=thief.text(), lease_expires_at=datetime.now(UTC), expected_version=version)
    keeper = LeaseKeeper(
        store, plan, owner, timedelta(seconds=3), version, lambda: datetime.now(UTC), every=timedelta(seconds=0.1)
    ).start()
    time.sleep(0.6)  # real time: the keeper's thread renews every `every`
    with pytest.raises(RunInProgressError):
        keeper.stop()


def test_an_older_state_table_gains_the_lease_columns(tmp_path: Path) -> None:
    from dynamic_kafka.state import rows

    old = pa.schema([f for f in rows.SCHEMA if f.name not in ("owner", "lease_expires_at")])
    row = rows.run_row("head", a_plan(1), "committed", committed_at=datetime.now(UTC))
    row = {k: v for k, v in row.items() if k in old.names}
    write_deltalake(str(tmp_path / "state"), pa.Table.from_pylist([row], schema=old), partition_by=["kind"], name=PID)
    store = StateStore(tmp_path / "state", PID)
    state = store.load()
    assert state.next_run_seq == 2
    store.begin_run(a_plan(2), expected_version=state.table_version, owner="o", lease_expires_at=datetime.now(UTC))
    head = store.load().last_run
    assert head is not None
    assert head.owner == "o"
    assert "owner" in DeltaTable(str(tmp_path / "state")).schema().to_arrow().names


# --- hole 12: deadlines --------------------------------------------------------------------------------------------


class HangingService(InMemoryMetadataService):
    def __init__(self, seconds: float) -> None:
        super().__init__([KafkaStream(stream_id="orders")])
        self.seconds = seconds
        self.calls = 0

    def describe_streams(self, stream_ids: Collection[str]) -> dict[str, KafkaStream]:
        self.calls += 1
        time.sleep(self.seconds)
        return super().describe_streams(stream_ids)

    def describe_cluster(self, cluster_id: str) -> ClusterMetadata | None:
        time.sleep(self.seconds)
        return None


def test_a_hung_metadata_call_fails_after_its_deadline_and_is_retried() -> None:
    service = HangingService(30)
    retries = RetryConfig(attempts=2, backoff_seconds=0, timeout_seconds=0.3)
    started = time.monotonic()
    with pytest.raises(MetadataServiceError, match=r"did not answer within 0\.3s") as caught:
        with_retries(lambda: service.describe_streams(["orders"]), retries, "resolving metadata")
    assert time.monotonic() - started < 5
    assert caught.value.retriable
    assert service.calls == 2
    with pytest.raises(MetadataServiceError, match="describing cluster east"):
        BoundedMetadataService(service, 0.2).describe_cluster("east")


def test_a_run_past_max_run_seconds_fails_retriably_before_anything_is_planned(tmp_path: Path) -> None:
    r = runner(tmp_path, service=HangingService(1.5), max_run_seconds=1)
    with pytest.raises(RunTimeoutError) as caught:
        r.run()
    assert caught.value.retriable
    assert "exceeded max_run_seconds (1s)" in str(caught.value)
    assert r.store.load().table_version is None


def test_the_run_lock_dies_with_its_process_even_while_a_child_lives_on(tmp_path: Path) -> None:
    lock = tmp_path / "run.lock"
    holder = (
        "import subprocess, sys, time\n"
        "from pathlib import Path\n"
        "from dynamic_kafka._toolchain.filelock import try_exclusive_lock\n"
        f"with try_exclusive_lock(Path({str(lock)!r})) as taken:\n"
        "    assert taken\n"
        "    child = subprocess.Popen(['sleep', '60'], close_fds=False)\n"
        "    print(child.pid, flush=True)\n"
        "    time.sleep(60)\n"
    )
    process = subprocess.Popen([sys.executable, "-c", holder], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    child_pid = int(process.stdout.readline())
    try:
        with try_exclusive_lock(lock) as taken:
            assert not taken  # held by the parent
        process.kill()
        process.wait()
        os.kill(child_pid, 0)  # the child still lives
        with try_exclusive_lock(lock) as taken:
            assert taken  # ... and does not hold the lock
    finally:
        process.kill()
        os.kill(child_pid, 9)


def test_the_run_lock_folder_can_be_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dynamic_kafka._toolchain.cache import CACHE_ENV
    from dynamic_kafka.protocol.guard import RUN_LOCK_DIR_ENV
    from dynamic_kafka.protocol.guard import run_lock_path as _run_lock_path
    from dynamic_kafka.storage import parse_location

    monkeypatch.delenv(RUN_LOCK_DIR_ENV, raising=False)
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    local = _run_lock_path(parse_location("/data/p_state"), PID)
    assert local.parent == tmp_path / "cache" / "run-locks", "never beside the tables"
    monkeypatch.setenv(RUN_LOCK_DIR_ENV, str(tmp_path / "locks"))
    found = _run_lock_path(parse_location("s3://lake/p_state"), PID)
    assert found.parent == tmp_path / "locks"
    assert found.name.startswith("p-")
    assert found.name != local.name


def test_a_run_finding_the_run_lock_taken_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    # The lock's guard at its call site: the empty plan would otherwise be committed beside the holder.
    from dynamic_kafka.protocol.guard import run_lock_path as _run_lock_path

    r = runner(tmp_path)
    commit(r.store, 1)
    before = r.store.load().table_version

    with try_exclusive_lock(_run_lock_path(r.pipeline.resolved_state_path, PID)) as taken:
        assert taken
        with pytest.raises(RunInProgressError, match="another run is in progress for pipeline 'p'"):
            r.run()

    assert r.store.load().table_version == before


# --- hole 6: schema comparison -------------------------------------------------------------------------------------


def test_schema_differences_name_every_column_that_would_not_fit() -> None:
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
    )

    from dynamic_kafka.sink.schema_check import schema_differences

    def struct(*fields: tuple[str, Any]) -> StructType:
        return StructType([StructField(n, t, True) for n, t in fields])

    written = struct(
        ("key", BinaryType()),
        ("value", struct(("id", IntegerType()), ("tags", ArrayType(StringType())), ("new", StringType()))),
        ("_run_seq", LongType()),
    )
    existing = struct(
        ("key", StringType()),
        ("value", struct(("id", LongType()), ("tags", ArrayType(StringType())), ("old", StringType()))),
        ("_run_seq", LongType()),
        ("extra", StringType()),
    )
    assert schema_differences(written, existing) == [
        "key: the sink has string, the pipeline writes binary",
        "value.id: the sink has bigint, the pipeline writes int",
        "value.new: not in the sink (the pipeline writes string)",
    ]
    assert schema_differences(written, written) == []
