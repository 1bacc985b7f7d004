"""``offsets reset`` on real brokers, Spark and Delta, through the CLI's ``main`` in this process:

- without ``--yes`` it shows old and new offsets and what will be read again or skipped, and changes nothing;
- with it, one state commit recorded in the run history (who, why, previous offsets), and the next run reads
  exactly the new ranges: to earliest it reads again (landing only what the sink lacks: a rewind never lands a
  record twice), to latest it skips, to a timestamp and to an offset it starts there;
- it places the kept offset of a cluster the stream no longer lists, so a fail-back starts at the switch time;
- it is refused while the pipeline's run lock is held.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

import pytest
from deltalake import DeltaTable

from devtools.testing.kafka import Record, create_topic, produce, unique_name
from devtools.testing.pipeline import PipelineHarness
from dynamic_kafka._toolchain.filelock import try_exclusive_lock
from dynamic_kafka.cli.main import main
from dynamic_kafka.model.plan import TopicPartition
from dynamic_kafka.model.summary import RunSummary
from dynamic_kafka.protocol.guard import run_lock_path

if TYPE_CHECKING:
    from pathlib import Path

    from devtools.local_kafka import ClusterEndpoint

pytestmark = pytest.mark.integration


def cli(harness: PipelineHarness, *args: str) -> int:
    return main([*args, "--config", str(harness.config_path), "--pipeline", "p"])


def offsets(harness: PipelineHarness) -> dict[tuple[str, int], int]:
    state = harness.runner().store.load()
    return {(k.cluster_id, k.partition): p.next_offset for k, p in state.partitions.items()}


def landed_offsets(harness: PipelineHarness) -> list[int]:
    return [offset for _, _, _, offset, _ in harness.sink_rows()]


def test_reset_moves_the_next_run_to_exactly_the_new_range(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bootstrap = kafka_clusters["east"].bootstrap_servers
    harness = PipelineHarness(tmp_path, clusters={"east": bootstrap}, spark=lambda: spark, value={"format": "string"})
    topic = unique_name("orders")
    create_topic(bootstrap, topic)
    harness.set_streams({"orders": {"east": [topic]}})
    base = int(time.time() * 1000) - 60_000
    produce(bootstrap, topic, [Record(value=f"v{i}".encode(), timestamp_ms=base + i * 1000) for i in range(5)])
    assert harness.face().run().records == 5

    # Without --yes: what would change, and nothing changes.
    assert cli(harness, "offsets", "reset", "--to", "earliest", "--reason", "bad deploy") == 0
    out = capsys.readouterr().out
    assert "a reset would move 1 partition(s) to earliest: 5 offsets read again, 0 skipped" in out
    assert f"  east     {topic}     0     5   0         0       5  read 5 again" in out
    assert "nothing changed; run again with --yes to reset." in out
    assert offsets(harness) == {("east", 0): 5}

    # A rewind after a bad deploy: the bad rows were deleted from the sink; only they land again.
    assert cli(harness, "offsets", "reset", "--to", "earliest", "--reason", "bad deploy", "--yes", "--json") == 0
    done = json.loads(capsys.readouterr().out)
    assert (done["applied"], done["run_seq"], done["read_again"], done["skipped"]) == (True, 2, 5, 0)
    assert offsets(harness) == {("east", 0): 0}
    (record, *_) = harness.runner().store.run_history(limit=1)
    summary = RunSummary.model_validate_json(record.summary_json or "")
    assert (record.run_seq, record.status, summary.status, summary.reason) == (2, "committed", "reset", "bad deploy")
    assert [(c.from_offset, c.to_offset) for c in summary.offset_changes] == [(5, 0)]
    assert summary.requested_by
    assert cli(harness, "offsets", "show", "--json") == 0
    (row,) = json.loads(capsys.readouterr().out)["partitions"]
    assert (row["next_offset"], row["reset"], row["updated_run_seq"]) == (0, True, 2)
    DeltaTable(str(harness.sink_path)).delete("`offset` IN (1, 2)")

    rerun = harness.face().run()

    assert (rerun.run_seq, rerun.records, rerun.deduplicated) == (3, 2, 3)
    assert landed_offsets(harness) == [0, 1, 2, 3, 4], "every record once: the rewind lands only what was missing"
    assert offsets(harness) == {("east", 0): 5}

    # To latest: the new records are skipped.
    produce(bootstrap, topic, [Record(value=f"w{i}".encode(), timestamp_ms=base + 10_000 + i) for i in range(3)])
    assert cli(harness, "offsets", "reset", "--to", "latest", "--reason", "poison range", "--yes") == 0
    assert "reset 1 partition(s) to latest (recorded as run 4): 0 offsets read again, 3 skipped" in (
        capsys.readouterr().out
    )
    assert harness.face().run().status == "empty"
    assert landed_offsets(harness) == [0, 1, 2, 3, 4]


def test_reset_to_a_timestamp_or_an_offset_plans_the_next_run_from_there(
    kafka_clusters: dict[str, ClusterEndpoint], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bootstrap = kafka_clusters["east"].bootstrap_servers
    harness = PipelineHarness(tmp_path, clusters={"east": bootstrap}, starting_offsets="latest")
    topic = unique_name("orders")
    create_topic(bootstrap, topic)
    harness.set_streams({"orders": {"east": [topic]}})
    base = int(time.time() * 1000) - 60_000
    produce(bootstrap, topic, [Record(value=f"v{i}".encode(), timestamp_ms=base + i * 1000) for i in range(5)])
    assert harness.face().run().status == "empty", "starting at latest: nothing read, offset 5 committed"

    # To a timestamp: the first offset at or after it (record 3 has base + 3 s).
    assert cli(harness, "offsets", "reset", "--to", f"timestamp:{base + 2500}", "--reason", "replay", "--yes") == 0
    capsys.readouterr()
    ((start, stop),) = [(s.start_offset, s.stop_offset) for s in harness.face().plan().read_splits]
    assert (start, stop) == (3, 5)

    # To an offset; one outside the broker's range is refused, naming it, and changes nothing.
    assert cli(harness, "offsets", "reset", "--to", "offset:9", "--reason", "typo", "--yes") == 1
    assert f"east/{topic}[0]: offset 9 is outside [0, 5]" in capsys.readouterr().err
    assert cli(harness, "offsets", "reset", "--to", "offset:1", "--reason", "from one", "--yes") == 0
    plan = harness.face().plan()
    assert [(s.start_offset, s.stop_offset) for s in plan.read_splits] == [(1, 5)]
    assert harness.runner().store.load().backfilled == {
        TopicPartition(cluster_id="east", topic=topic, partition=0): 5
    }, "offsets 1..4 were read before: the next run checks them against the sink"


def test_reset_places_the_kept_offset_of_a_cluster_the_stream_no_longer_lists(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    east, west = (kafka_clusters[c].bootstrap_servers for c in ("east", "west"))
    harness = PipelineHarness(tmp_path, clusters={"east": east, "west": west}, spark=lambda: spark)
    topic = unique_name("orders")
    create_topic(east, topic)
    create_topic(west, topic)
    harness.set_streams({"orders": {"east": [topic], "west": [topic]}})
    produce(west, topic, [Record(value=f"west-before-{i}".encode()) for i in range(2)])
    assert harness.face().run().records == 2
    # Failover: west leaves the stream; its offset is kept. Mirrored records reach west meanwhile.
    harness.set_streams({"orders": {"east": [topic]}})
    assert harness.face().run().status == "empty"
    produce(west, topic, [Record(value=f"west-stale-{i}".encode()) for i in range(2)])
    switched = int(time.time() * 1000)
    time.sleep(0.01)
    produce(west, topic, [Record(value=f"west-after-{i}".encode()) for i in range(2)])

    assert cli(harness, "offsets", "reset", "--to", "earliest", "--reason", "x", "--json") == 0
    assert json.loads(capsys.readouterr().out)["changes"] == [], "a removed cluster is reset only when named"
    assert cli(harness, "offsets", "reset", "--cluster", "west", "--to", f"timestamp:{switched}", "--reason",
               "fail back to west at the switch time", "--yes") == 0  # fmt: skip
    assert "west" in capsys.readouterr().out
    state = harness.runner().store.load()
    kept = state.partitions[TopicPartition(cluster_id="west", topic=topic, partition=0)]
    assert (kept.status, kept.next_offset) == ("removed", 4)

    harness.set_streams({"orders": {"east": [topic], "west": [topic]}})
    assert harness.face().run().records == 2
    assert sorted(v for c, *_, v in harness.sink_rows() if c == "west") == [
        b"west-after-0",
        b"west-after-1",
        b"west-before-0",
        b"west-before-1",
    ]


def test_reset_is_refused_while_a_run_holds_the_lock(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bootstrap = kafka_clusters["east"].bootstrap_servers
    harness = PipelineHarness(tmp_path, clusters={"east": bootstrap}, spark=lambda: spark)
    topic = unique_name("orders")
    create_topic(bootstrap, topic)
    harness.set_streams({"orders": {"east": [topic]}})
    produce(bootstrap, topic, [Record(value=b"a")])
    assert harness.face().run().records == 1
    pipeline = harness.face().config

    with try_exclusive_lock(run_lock_path(pipeline.resolved_state_path, pipeline.id)) as taken:
        assert taken
        assert cli(harness, "offsets", "reset", "--to", "earliest", "--reason", "r", "--yes", "--json") == 1

    error = json.loads(capsys.readouterr().err)["error"]
    assert (error["type"], error["retriable"]) == ("RunInProgressError", True)
    assert offsets(harness) == {("east", 0): 1}
