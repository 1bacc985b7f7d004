"""Pipelines with sink, dead-letter and state tables on S3 (the local S3 server: moto's, speaking the S3 HTTP API
on loopback), end to end on real clusters, Spark and Delta.

- incremental runs, ``dynamic-kafka status`` and a backfill MERGE, all against S3;
- two CLI runs racing with separate run-lock folders (two hosts: no shared local lock): the state table's
  exact-version commit, a conditional put on S3, lets one through; every record lands once;
- a run killed with SIGKILL at the fault points: the next run finishes it exactly once;
- bad input (missing bucket, unreachable endpoint) fails before anything is written, naming the location.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

from devtools.testing.clusters import distinct_free_ports
from dynamic_kafka.errors import ObjectStoreError
from dynamic_kafka.faults import ENV as FAULT_ENV
from dynamic_kafka.protocol.guard import RUN_LOCK_DIR_ENV
from dynamic_kafka.sink import committed_txn_version
from tests.support.exactly_once import TwoClusterStream, assert_nothing_left, committed_offsets, summary_of, tail

if TYPE_CHECKING:
    from pathlib import Path

    from devtools.local_kafka import ClusterEndpoint
    from devtools.local_s3 import LocalS3Server

# Exported by the local_s3 fixture (tests/conftest.py).
S3_SECRET_ENV = "DYNAMIC_KAFKA_TEST_S3_SECRET"
# Each test is a few Spark jobs on S3: well under a minute on an idle machine, but ten on a loaded shared one.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]

IN_PROGRESS = "another run is in progress for pipeline 'p'"


def s3_stream(
    kafka_clusters: dict[str, ClusterEndpoint], folder: Path, storage: dict[str, Any], spark: Any = None
) -> TwoClusterStream:
    """A two-cluster stream whose pipeline lands in a fresh prefix of bucket ``lake`` (sink, dead letters, state)."""
    stream = TwoClusterStream(kafka_clusters, folder, spark=(lambda: spark) if spark is not None else None)
    stream.harness.configure(sink={"path": f"s3://lake/{uuid.uuid4().hex[:12]}/orders"}, storage=storage)
    return stream


def test_runs_status_and_a_backfill_land_on_s3_exactly_once(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, s3_storage: dict[str, Any], tmp_path: Path
) -> None:
    stream = s3_stream(kafka_clusters, tmp_path, s3_storage, spark)
    harness = stream.harness
    first_rows = stream.produce("first", east=12, west=8)

    first = harness.face().run()

    assert (first.run_seq, first.status, first.records) == (1, "committed", 20)
    assert first.completeness is not None  # the run's files read from S3 with the pipeline's credentials
    assert (first.completeness.landed, first.completeness.matches) == (20, True)
    assert harness.sink_rows() == first_rows
    pipeline = harness.face().config
    assert pipeline.resolved_state_path.uri.startswith("s3://lake/")
    assert not any(tmp_path.glob("sink*")), "nothing may land on local disk"
    assert committed_txn_version(pipeline.sink_table, "p") == 1
    assert harness.face().run().status == "empty"

    status = harness.cli("status", "--json")
    assert status.returncode == 0, tail(status.stderr)
    report = json.loads(status.stdout)
    assert report["total_lag"] == 0
    landed = {(p["cluster_id"], p["topic"], p["partition"]): p["next_offset"] for p in report["partitions"]}
    assert {k: v for k, v in landed.items() if v} == stream.end_offsets()
    assert report["last_run"]["run_seq"] == 2
    assert os.environ[S3_SECRET_ENV] not in status.stdout + status.stderr

    # A backfill over the last hour MERGEs into the S3 sink: records it lacks are inserted, the rest matched.
    later_rows = stream.produce("later", east=3, west=2)
    now = datetime.now(UTC)
    backfill = harness.face().backfill(now - timedelta(hours=1), now + timedelta(minutes=5))
    assert backfill.records == 25
    assert harness.sink_rows() == sorted(first_rows + later_rows)

    # The next run reads the later records again and lands none of them twice.
    after = harness.face().run()
    assert (after.records, after.deduplicated) == (0, 5)
    assert after.completeness is not None  # the backfill's rows found in the S3 sink's overlapping ranges
    assert (after.completeness.landed, after.completeness.deduplicated, after.completeness.matches) == (0, 5, True)
    assert harness.sink_rows() == stream.expected_rows()
    assert committed_offsets(harness) == stream.end_offsets()


def test_two_runs_on_two_hosts_one_wins_at_the_state_commit_and_every_record_lands_once(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, s3_storage: dict[str, Any], tmp_path: Path
) -> None:
    stream = s3_stream(kafka_clusters, tmp_path, s3_storage, spark)
    harness = stream.harness
    stream.produce("first", east=4, west=4)
    assert harness.face().run().run_seq == 1
    stream.produce("raced", east=20, west=10)
    barrier = threading.Barrier(2)
    results: list[Any] = [None, None]

    def launch(index: int) -> None:
        # Each "host" has its own run-lock folder: no local lock is shared, only the S3 state decides.
        env = {RUN_LOCK_DIR_ENV: str(tmp_path / f"host-{index}")}
        barrier.wait()
        results[index] = harness.cli("run", "--json", env=env)

    threads = [threading.Thread(target=launch, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=900)

    winners = [r for r in results if r is not None and r.returncode == 0]
    losers = [r for r in results if r is not None and r.returncode != 0]
    assert (len(winners), len(losers)) == (1, 1), "\n---\n".join(tail(r.stderr) for r in results if r)
    assert IN_PROGRESS in losers[0].stderr, tail(losers[0].stderr)
    assert "Traceback" not in losers[0].stderr
    summary = summary_of(winners[0])
    assert summary["status"] == "committed"
    assert harness.sink_rows() == stream.expected_rows()
    assert committed_offsets(harness) == stream.end_offsets()
    history = {r.run_seq: r.status for r in harness.runner().store.run_history()}
    assert history[1] == history[2] == "committed"
    assert_nothing_left(harness)


@pytest.mark.parametrize("fault", ["after_plan", "after_sink"])
def test_a_run_killed_at_a_fault_point_on_s3_is_finished_exactly_once(
    fault: str, kafka_clusters: dict[str, ClusterEndpoint], spark: Any, s3_storage: dict[str, Any], tmp_path: Path
) -> None:
    stream = s3_stream(kafka_clusters, tmp_path, s3_storage, spark)
    harness = stream.harness
    first_rows = stream.produce("first", east=6, west=4)
    assert harness.face().run().run_seq == 1
    crashed_rows = stream.produce("crashed", east=5, west=3)

    crash = harness.cli("run", "--json", env={FAULT_ENV: fault})

    assert crash.returncode == -9, f"the run was not killed:\n{tail(crash.stderr)}"
    head = harness.runner().store.load().last_run
    assert head is not None
    assert (head.run_seq, head.status) == (2, "planned")
    sink = harness.face().config.sink_table
    if fault == "after_sink":
        assert committed_txn_version(sink, "p") == 2
        assert harness.sink_rows() == sorted(first_rows + crashed_rows)
    else:
        assert committed_txn_version(sink, "p") == 1
        assert harness.sink_rows() == first_rows

    later_rows = stream.produce("later", east=2, west=2)
    recovering = harness.face().run()

    assert recovering.recovered_run_seq == 2
    assert (recovering.run_seq, recovering.records) == (3, len(later_rows))
    assert harness.sink_rows() == stream.expected_rows()
    assert committed_offsets(harness) == stream.end_offsets()
    assert_nothing_left(harness)


def test_a_missing_bucket_or_an_unreachable_store_fails_before_anything_is_written(
    kafka_clusters: dict[str, ClusterEndpoint], s3_storage: dict[str, Any], local_s3: LocalS3Server, tmp_path: Path
) -> None:
    stream = TwoClusterStream(kafka_clusters, tmp_path)
    harness = stream.harness
    stream.produce("first", east=2, west=2)
    secret = os.environ[S3_SECRET_ENV]

    # The state on a bucket that does not exist: the first read of the state says so.
    harness.configure(sink={"path": "s3://no-such-bucket/orders"}, storage=s3_storage)
    with pytest.raises(ObjectStoreError, match=r"bucket 'no-such-bucket' of s3://no-such-bucket/orders_state"):
        harness.face().run()

    # Local state, the sink on a missing bucket: refused before the plan is written.
    harness.configure(sink={"path": "s3://no-such-bucket/orders"}, state_path="state", storage=s3_storage)
    with pytest.raises(ObjectStoreError, match=r"bucket 'no-such-bucket' of s3://no-such-bucket/orders does not"):
        harness.face().run()
    assert harness.runner().store.load().table_version is None

    (closed,) = distinct_free_ports(1)
    harness.configure(
        sink={"path": "s3://lake/unreachable/orders"},
        state_path=None,
        storage={**s3_storage, "endpoint": f"http://127.0.0.1:{closed}"},
    )
    with pytest.raises(ObjectStoreError, match=rf"object store at http://127.0.0.1:{closed} is unreachable") as caught:
        harness.face().run()
    assert caught.value.retriable
    assert secret not in str(caught.value)
