"""Helpers of the exactly-once integration tests (crash safety, concurrent runs, Spark standalone).

Records are numbered values; what the sink must hold is computed from the delivered records (their partition and
offset), so every check compares exact record sets, duplicates included.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from devtools.testing.kafka import Record, create_topic, produce, unique_name
from devtools.testing.pipeline import PipelineHarness, Row
from dynamic_kafka.state.lease import RunOwner

if TYPE_CHECKING:
    import subprocess
    from collections.abc import Callable, Mapping, Sequence
    from pathlib import Path

    from devtools.local_kafka import ClusterEndpoint

Coordinates = tuple[str, str, int]  # cluster, topic, partition


class TwoClusterStream:
    """The stream ``orders`` on one topic of "east" and one of "west" (fresh names), with what was produced, and
    ``harness``, the pipeline ``p`` reading it in ``folder`` (``spark``: the session for in-process runs;
    ``spark_config``: the project's ``spark`` section, e.g. a Spark Connect ``remote``)."""

    def __init__(
        self,
        clusters: Mapping[str, ClusterEndpoint],
        folder: Path,
        *,
        spark: Callable[[], Any] | None = None,
        spark_config: Mapping[str, Any] | None = None,
        partitions: int = 2,
    ) -> None:
        self.bootstrap = {name: clusters[name].bootstrap_servers for name in ("east", "west")}
        self.harness = harness = PipelineHarness(
            folder, clusters=self.bootstrap, spark=spark, spark_config=spark_config
        )
        self.topics = {"east": unique_name("orders"), "west": unique_name("orders-v2")}
        for cluster, topic in self.topics.items():
            create_topic(self.bootstrap[cluster], topic, partitions)
        harness.set_streams({"orders": {cluster: [topic] for cluster, topic in self.topics.items()}})
        self.rows: list[Row] = []

    def produce(self, tag: str, east: int, west: int) -> list[Row]:
        """Produces ``east`` and ``west`` records valued ``<cluster>-<tag>-<n>``; returns their sink rows."""
        rows: list[Row] = []
        for cluster, count in (("east", east), ("west", west)):
            records = [Record(value=f"{cluster}-{tag}-{i}".encode(), key=f"k{i}".encode()) for i in range(count)]
            delivered = produce(self.bootstrap[cluster], self.topics[cluster], records)
            rows += [_row(cluster, self.topics[cluster], r) for r in delivered]
        self.rows += rows
        return sorted(rows)

    def expected_rows(self) -> list[Row]:
        """Every record produced so far, once, as ``PipelineHarness.sink_rows`` returns them."""
        return sorted(self.rows)

    def end_offsets(self) -> dict[Coordinates, int]:
        """Per partition written to, the offset after the last produced record (what the state must commit)."""
        ends: dict[Coordinates, int] = {}
        for cluster, topic, partition, offset, _ in self.rows:
            key = (cluster, topic, partition)
            ends[key] = max(ends.get(key, 0), offset + 1)
        return ends


class DeadLetterStream:
    """A JSON pipeline ``p`` (``value: {format: json, schema: n INT}``, ``on_decode_error: dead_letter``) on a fresh
    topic of ``servers``, in ``folder``; :meth:`send` produces good and undecodable records. In-process runs use
    ``spark``; CLI runs the project's ``spark`` section, ``spark_config``."""

    def __init__(
        self,
        servers: str,
        folder: Path,
        spark: Any,
        partitions: int,
        spark_config: Mapping[str, Any] | None = None,
    ) -> None:
        self.servers = servers
        self.topic = unique_name("dead-letters")
        create_topic(servers, self.topic, partitions)
        self.harness = PipelineHarness(
            folder,
            clusters={"east": servers},
            spark=lambda: spark,
            spark_config=spark_config,
            value={"format": "json", "schema": "n INT"},
            on_decode_error="dead_letter",
        )
        self.harness.set_streams({"orders": {"east": [self.topic]}})
        self.dead_letter_path = folder / "sink_dead_letter"

    def send(self, tag: str, good: int, bad: int) -> tuple[set[tuple[int, int]], set[tuple[int, int]]]:
        """Produces ``good`` JSON values then ``bad`` undecodable ones; returns their (partition, offset)s."""
        records = [Record(value=json.dumps({"n": i}).encode()) for i in range(good)]
        records += [Record(value=f"not json {tag} {i}".encode()) for i in range(bad)]
        delivered = [(r.partition or 0, r.offset or 0) for r in produce(self.servers, self.topic, records)]
        return set(delivered[:good]), set(delivered[good:])


def table_coordinates(path: Path) -> list[tuple[int, int]]:
    """(partition, offset) of every row of a Delta table, sorted, duplicates kept."""
    from deltalake import DeltaTable

    table = DeltaTable(str(path)).to_pyarrow_table(columns=["partition", "offset"])
    return sorted(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist(), strict=True))


def _row(cluster: str, topic: str, record: Record) -> Row:
    assert record.partition is not None
    assert record.offset is not None
    return (cluster, topic, record.partition, record.offset, record.value)


def committed_offsets(harness: PipelineHarness) -> dict[Coordinates, int]:
    """The state's next offset per partition that has records (partitions never written to start at 0)."""
    partitions = harness.runner().store.load().partitions.values()
    return {(p.cluster_id, p.topic, p.partition): p.next_offset for p in partitions if p.next_offset > 0}


def assert_nothing_left(harness: PipelineHarness) -> None:
    """The next run finds everything committed: nothing to recover, nothing to read, no Spark started."""
    summary = harness.face().run()
    assert summary.recovered_run_seq is None
    assert summary.status == "empty"
    assert summary.records == 0
    assert not summary.spark_started


def cli_runs_together(
    harness: PipelineHarness,
    count: int,
    env: Mapping[str, str] | None = None,
    envs: Sequence[Mapping[str, str]] | None = None,
) -> list[subprocess.CompletedProcess[str]]:
    """Runs ``dynamic-kafka run --json`` in ``count`` processes released at the same moment; waits for all.
    ``envs``: one environment per process (e.g. a run-lock folder each, as on separate hosts)."""
    barrier = threading.Barrier(count)
    results: list[subprocess.CompletedProcess[str] | None] = [None] * count

    def launch(index: int) -> None:
        barrier.wait()
        results[index] = harness.cli("run", "--json", env={**(env or {}), **(envs[index] if envs else {})})

    threads = [threading.Thread(target=launch, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(r is not None for r in results), "a launcher thread failed (see the captured output)"
    return [r for r in results if r is not None]


def summary_of(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The JSON run summary a successful ``run --json`` printed."""
    assert result.returncode == 0, f"run failed (exit {result.returncode}):\n{tail(result.stderr)}"
    summary: dict[str, Any] = json.loads(result.stdout)
    return summary


def window_start_now() -> datetime:
    """Now, floored to Kafka's whole milliseconds: a record produced after this call has a timestamp inside a
    window starting here, and one produced by an earlier step (a run lasts well over a millisecond) has not."""
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def tail(text: str, lines: int = 40) -> str:
    """The last ``lines`` lines of a process's output, for assertion messages."""
    return "\n".join(text.splitlines()[-lines:])


def alive_or_done(condition: Callable[[], Any], runner: threading.Thread) -> Callable[[], Any]:
    """``condition``, failing at once if the run ended first (it was never killed)."""

    def check() -> Any:
        found = condition()
        if not found and not runner.is_alive():
            raise AssertionError("the run process ended before it could be killed")
        return found

    return check


def unreferenced_data_files(sink: Path, referenced: set[str] | None = None) -> list[str]:
    """Data files in the sink's folder (or a staged append's folder in it) that no Delta version references: a
    write that never committed.
    """
    if referenced is None:
        referenced = referenced_files(sink)
    return sorted(p.name for p in sink.rglob("part-*.parquet") if p.name not in referenced)


def referenced_files(sink: Path) -> set[str]:
    """The names of the data files the sink's current Delta version references."""
    from deltalake import DeltaTable

    return {uri.rsplit("/", 1)[-1] for uri in DeltaTable(str(sink)).file_uris()}


def first_run_then_more(stream: TwoClusterStream, *, east: int, west: int) -> dict[Coordinates, int]:
    """Lands 12 + 8 records with a committed run 1 (in process), then produces ``east`` + ``west`` more for the run
    a test crashes; returns the offsets run 1 committed."""
    stream.produce("first", east=12, west=8)
    assert stream.harness.face().run().run_seq == 1
    committed = stream.end_offsets()
    stream.produce("crashed", east=east, west=west)
    return committed


def assert_recovered_once(stream: TwoClusterStream) -> None:
    """Run 2 crashed: 5 + 3 more records, then the next run (in process) finishes run 2 once and lands them as run
    3, and the sink and the committed offsets hold every record produced, once."""
    stream.produce("later", east=5, west=3)
    recovering = stream.harness.face().run()
    assert (recovering.recovered_run_seq, recovering.run_seq, recovering.status) == (2, 3, "committed")
    assert recovering.records == 8
    assert stream.harness.sink_rows() == stream.expected_rows()
    assert committed_offsets(stream.harness) == stream.end_offsets()


def expire_lease(harness: PipelineHarness) -> None:
    """Makes the planned last run's lease expire, as if its process had died (the next run recovers it)."""
    store = harness.runner().store
    state = store.load()
    assert state.last_run is not None
    assert state.last_run.status == "planned"
    assert state.table_version is not None
    dead = RunOwner.current().model_copy(update={"token": "killed"})
    expired = datetime.now(UTC) - timedelta(seconds=1)
    store.lease(state.last_run.plan, owner=dead.text(), lease_expires_at=expired, expected_version=state.table_version)
