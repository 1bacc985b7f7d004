"""A staged commit adds exactly the files its Spark job committed, as the manifest committer's task manifests name
them, never what a listing of the staging folder finds; in process and over Spark Connect, on local disk.

- the add actions of a staged commit are the files the job's manifests name (the manifests are read where the job
  commit moved them, before the commit; afterwards they are removed with the other hidden files);
- on S3 (the local S3 server, through S3A, which Hadoop's manifest committer refuses) and in a Spark without the
  committer's binding, the file committer's output is staged, its listing checked, and nothing hidden stays;
- a file planted in the staging folder under the job's own naming (as a retried task attempt's output under the
  v2 file committer would be) is refused: the run fails retriably with nothing committed, the next run lands every
  record once.

What killed staged writes leave is removed once their run is finished (``dynamic_kafka.sink.leftovers``):

- a recovery that finds its run already in the sink (the attempt that landed it died before its clean-up) removes
  the run's other attempts and the hidden files of the landed one;
- maintenance removes the staging folders of finished runs whatever their age: a run abandoned before abandoning
  removed them, hidden leftovers of a committed run; a later run's folder (one in flight) stays.
"""

from __future__ import annotations

import json
import shutil
from typing import TYPE_CHECKING, Any

import pytest
from deltalake import DeltaTable

from dynamic_kafka.errors import DynamicKafkaError
from dynamic_kafka.operations.maintain import maintain_pipeline
from dynamic_kafka.sink import committed_txn_version, staged_append
from dynamic_kafka.sink.tables import run_commit
from tests.integration.test_object_storage import s3_stream
from tests.support.clock import past_the_planned_runs_lease
from tests.support.exactly_once import TwoClusterStream, assert_nothing_left, expire_lease

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from devtools.local_kafka import ClusterEndpoint

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


def _job_manifest_files(folder: Path) -> set[str]:
    """The files the task manifests under a staging attempt's folder name (relative to the table's root)."""
    names: set[str] = set()
    for manifest in folder.glob("_manifests/*/*-manifest.json"):
        for entry in json.loads(manifest.read_text())["files"]:
            names.add(f"{folder.parent.name}/{folder.name}/{entry['d'].rsplit('/', 1)[1]}")
    return names


def _table_files(sink: Path) -> set[str]:
    return set(DeltaTable(str(sink)).get_add_actions(flatten=True).column("path").to_pylist())


def _newest_attempt(sink: Path) -> Path:
    return max(sink.glob("dk-run-*/*"), key=lambda p: p.stat().st_mtime)


def test_a_staged_commit_adds_exactly_the_files_its_jobs_manifests_name(
    kafka_clusters: dict[str, ClusterEndpoint], spark_mode: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = TwoClusterStream(kafka_clusters, tmp_path, spark=spark_mode.session, spark_config=spark_mode.config)
    harness = stream.harness
    stream.produce("first", east=4, west=2)
    assert harness.runner().run().run_seq == 1  # creates the sink (delta-spark)
    before = _table_files(harness.sink_path)
    stream.produce("second", east=5, west=3)
    named: list[set[str]] = []

    def manifests_at_staging(name: str) -> None:
        if name == "after_staging":
            named.append(_job_manifest_files(_newest_attempt(harness.sink_path)))

    monkeypatch.setattr(staged_append, "crash_point", manifests_at_staging)
    assert harness.runner().run().run_seq == 2

    added = _table_files(harness.sink_path) - before
    assert len(named) == 1
    assert added == named[0]
    assert harness.sink_rows() == stream.expected_rows()
    hidden = [p for p in harness.sink_path.glob("dk-run-*/**/*") if p.name.startswith((".", "_"))]
    assert hidden == []


def test_a_file_planted_under_the_jobs_own_name_is_refused_and_never_lands(
    kafka_clusters: dict[str, ClusterEndpoint], spark_mode: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = TwoClusterStream(kafka_clusters, tmp_path, spark=spark_mode.session, spark_config=spark_mode.config)
    harness = stream.harness
    stream.produce("first", east=4, west=2)
    assert harness.runner().run().run_seq == 1
    stream.produce("second", east=5, west=3)
    planted: list[Path] = []

    def plant(name: str) -> None:
        if name != "after_staging" or planted:
            return
        written = sorted(_newest_attempt(harness.sink_path).glob("part-*.parquet"))[0]
        # Another task number, the same job: what a second task attempt's output looks like.
        twin = written.with_name(written.name.replace(written.name[:10], "part-00097", 1))
        shutil.copyfile(written, twin)
        planted.append(twin)

    monkeypatch.setattr(staged_append, "crash_point", plant)
    with pytest.raises(DynamicKafkaError) as raised:
        harness.runner().run()

    monkeypatch.undo()
    assert raised.value.retriable
    assert planted[0].name in str(raised.value)
    assert "not committed by its job" in str(raised.value)
    assert committed_txn_version(harness.sink_path, "p") == 1
    past_the_planned_runs_lease(monkeypatch, harness.runner().store)
    assert harness.runner().run().recovered_run_seq == 2
    assert harness.sink_rows() == stream.expected_rows()
    assert not planted[0].exists()
    assert_nothing_left(harness)


class _KilledError(BaseException):
    """The run's process "dies" here: no handler of the product's catches it (they catch ``Exception``)."""


def _killed(name: str) -> Callable[..., None]:
    def die(*_: object) -> None:
        raise _KilledError(name)

    return die


def _hidden(folder: Path) -> list[Path]:
    return [p for p in folder.glob("**/*") if p.name.startswith((".", "_"))]


def test_a_recovery_that_finds_its_run_in_the_sink_removes_the_runs_other_attempts(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = TwoClusterStream(kafka_clusters, tmp_path, spark=lambda: spark)
    harness = stream.harness
    stream.produce("first", east=3, west=2)
    assert harness.runner().run().run_seq == 1
    stream.produce("second", east=4, west=1)
    run_folder = harness.sink_path / "dk-run-2-p"
    with monkeypatch.context() as patched:  # attempt 1 dies with its files staged
        patched.setattr(staged_append, "crash_point", _killed("after_staging"))
        with pytest.raises(_KilledError):
            harness.runner().run()
    expire_lease(harness)
    with monkeypatch.context() as patched:  # attempt 2 lands the run and dies before its clean-up
        patched.setattr(staged_append, "_remove_leftovers", _killed("after the commit"))
        with pytest.raises(_KilledError):
            harness.runner().run()
    expire_lease(harness)
    assert committed_txn_version(harness.sink_path, "p") == 2
    assert len(list(run_folder.iterdir())) == 2
    landed = {path.split("/")[1] for path in _table_files(harness.sink_path) if path.startswith("dk-run-2-p/")}

    summary = harness.runner().run()

    assert summary.recovered_run_seq == 2
    assert {p.name for p in run_folder.iterdir()} == landed
    assert _hidden(run_folder) == []
    assert harness.sink_rows() == stream.expected_rows()
    assert_nothing_left(harness)


def test_maintenance_removes_the_staging_folders_of_finished_runs_whatever_their_age(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = TwoClusterStream(kafka_clusters, tmp_path, spark=lambda: spark, partitions=1)
    harness = stream.harness
    stream.produce("first", east=3, west=2)
    assert harness.runner().run().run_seq == 1
    stream.produce("abandoned", east=2, west=2)
    with monkeypatch.context() as patched:
        patched.setattr(staged_append, "crash_point", _killed("after_staging"))
        with pytest.raises(_KilledError):
            harness.runner().run()
    expire_lease(harness)
    # Abandoned as before abandoning removed a run's staging folder.
    with monkeypatch.context() as patched:
        patched.setattr("dynamic_kafka.protocol.abandon.remove_run_folder", lambda *_: None)
        harness.face().abandon(2, "its records are not wanted")
    abandoned = harness.sink_path / "dk-run-2-p"
    assert list(abandoned.glob("*/part-*.parquet"))
    summary = harness.runner().run()
    assert (summary.run_seq, summary.status) == (3, "committed")
    [landed] = (harness.sink_path / "dk-run-3-p").iterdir()
    temporary = landed / "_temporary" / "0" / "part-00000-killed.snappy.parquet"
    in_flight = harness.sink_path / "dk-run-9-p" / "0123456789ab" / "_temporary" / "0" / "part-00000-x.snappy.parquet"
    for planted in (temporary, in_flight):
        planted.parent.mkdir(parents=True)
        planted.write_bytes(b"half a parquet file")
    rows = harness.sink_rows()

    maintained = maintain_pipeline(harness.runner().context)  # the tables' own retention: 7 days

    assert not abandoned.exists()
    assert not (landed / "_temporary").exists()
    assert in_flight.exists()
    assert maintained.tables[0].leftovers_removed >= 2
    assert harness.sink_rows() == rows


def test_a_staged_commit_on_s3_adds_the_file_committers_files_and_leaves_no_hidden_object(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, s3_storage: dict[str, Any], tmp_path: Path
) -> None:
    from deltalake.fs import DeltaStorageHandler
    from pyarrow.fs import FileSelector, PyFileSystem

    stream = s3_stream(kafka_clusters, tmp_path, s3_storage, spark)
    harness = stream.harness
    stream.produce("first", east=3, west=2)
    assert harness.face().run().run_seq == 1
    stream.produce("second", east=4, west=1)

    assert harness.face().run().run_seq == 2

    sink = harness.face().config.sink_table
    commit = run_commit(sink, "p", 2)
    assert commit is not None
    assert commit.info.get("dynamic_kafka.commit_id")  # a staged (delta-rs) commit
    store = PyFileSystem(DeltaStorageHandler(sink.delta_rs_uri, sink.storage_options()))
    objects = [info.path for info in store.get_file_info(FileSelector("dk-run-2-p", recursive=True)) if info.is_file]
    # Leaves only: S3A keeps an empty marker object per folder.
    staged = [path for path in objects if not any(other.startswith(f"{path.rstrip('/')}/") for other in objects)]
    assert sorted(commit.added_paths) == sorted(staged)
    assert all(path.endswith(".parquet") for path in staged)
    assert harness.sink_rows() == stream.expected_rows()


def test_a_spark_without_the_committer_binding_stages_through_the_file_committer(
    kafka_clusters: dict[str, ClusterEndpoint], spark_mode: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As a Connect server started without the spark-hadoop-cloud jar: the commit protocol's class is not found.
    monkeypatch.setattr(staged_append, "COMMIT_PROTOCOL", "org.apache.spark.internal.io.cloud.NoSuchCommitProtocol")
    stream = TwoClusterStream(kafka_clusters, tmp_path, spark=spark_mode.session, spark_config=spark_mode.config)
    harness = stream.harness
    stream.produce("first", east=3, west=2)
    assert harness.face().run().run_seq == 1
    stream.produce("second", east=4, west=1)

    assert harness.face().run().run_seq == 2

    commit = run_commit(harness.face().config.sink_table, "p", 2)
    assert commit is not None
    assert commit.info.get("dynamic_kafka.commit_id")  # staged (delta-rs)
    assert all(path.startswith("dk-run-2-p/") for path in commit.added_paths)
    assert _hidden(harness.sink_path / "dk-run-2-p") == []
    assert harness.sink_rows() == stream.expected_rows()
