"""Bootstrap archives whose values do not all decode (issue 35, rows 13, 6 and 5), on the real broker, Spark and
Delta: archive rows (no Kafka coordinates) land in the dead-letter table under ``on_decode_error: dead_letter``,
exactly once across a crash and its recovery, an abandon and the re-bootstrap after it, and a replay; and the
archive stream's decode inputs are pinned in the plan like a Kafka stream's.

The kill is simulated in this process (an exception no ``except Exception`` catches, raised at a crash point; the
clock then jumps past the killed run's lease), so a crash costs no new JVM.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from devtools.testing.kafka import Record, create_topic, produce, unique_name
from dynamic_kafka.cli.main import main
from dynamic_kafka.errors import ConfigError
from dynamic_kafka.faults import acting_at
from dynamic_kafka.protocol import run as runner_module
from dynamic_kafka.sink import incremental as incremental_module
from tests.support.clock import past_the_planned_runs_lease
from tests.support.metadata_changes import harness

if TYPE_CHECKING:
    from pathlib import Path

    from devtools.local_kafka import ClusterEndpoint
    from devtools.testing.pipeline import PipelineHarness

pytestmark = pytest.mark.integration

UNTIL = datetime(2026, 1, 1, tzinfo=UTC)
UNTIL_MS = int(UNTIL.timestamp() * 1000)
GOOD = [json.dumps({"id": n}).encode() for n in range(20)]
# Undecodable under json_strict (a field the schema lacks); decodable once `note` joins the schema.
BAD = [json.dumps({"id": n, "note": "x"}).encode() for n in range(20, 23)]
KAFKA = [json.dumps({"id": n}).encode() for n in range(100, 110)]


class Killed(BaseException):
    """A simulated ``kill -9`` at a crash point."""


class SimulatedCrashError(BaseException):
    """Raised at a fault point: the operation stops there, as a killed process would (a BaseException, which the
    CLI's last-line handler of every Exception lets through)."""


def crash() -> None:
    raise SimulatedCrashError


def run_killed_at(h: PipelineHarness, point: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs the pipeline, killed at ``point``; afterwards the clock is past the killed run's lease."""

    def die(name: str) -> None:
        if name == point:
            raise Killed(name)

    for module in (incremental_module, runner_module):
        monkeypatch.setattr(module, "crash_point", die)
    with pytest.raises(Killed):
        h.runner().run()
    monkeypatch.undo()
    past_the_planned_runs_lease(monkeypatch, h.runner().store)


def archived(folder: Path) -> None:
    """One Parquet file: the good and the bad values, all older than `until`, interleaved."""
    folder.mkdir()
    values = [*GOOD[:10], *BAD, *GOOD[10:]]
    times = [datetime.fromtimestamp((UNTIL_MS - 100_000 + i * 1000) / 1000, tz=UTC) for i in range(len(values))]
    table = pa.table({"payload": values, "event_time": pa.array(times, type=pa.timestamp("ms", tz="UTC"))})
    pq.write_table(table, folder / "part-0.parquet")


def bootstrapped(
    tmp_path: Path, clusters: dict[str, ClusterEndpoint], spark: Any, kafka: list[bytes], **pipeline: Any
) -> PipelineHarness:
    """A json pipeline (strict, dead letters) over a new topic holding ``kafka`` after `until`, with the archive."""
    east = clusters["east"].bootstrap_servers
    topic = unique_name("history")
    create_topic(east, topic, 1)
    produce(east, topic, [Record(value=v, timestamp_ms=UNTIL_MS + i) for i, v in enumerate(kafka)])
    archived(tmp_path / "archive")
    settings: dict[str, Any] = {
        "value": {"format": "json", "schema": "id INT"},
        "json_strict": True,
        "on_decode_error": "dead_letter",
        "bootstrap": {
            "path": str(tmp_path / "archive"),
            "format": "parquet",
            "until": UNTIL.isoformat(),
            "columns": {"value": "payload", "timestamp": "event_time"},
        },
    }
    h = harness(tmp_path, clusters, spark, **{**settings, **pipeline})
    h.set_streams({"orders": {"east": [topic]}})
    return h


def rows(table: Path, *columns: str) -> list[tuple[Any, ...]]:
    """The table's rows as tuples of ``columns``, sorted, duplicates kept; empty when there is no table."""
    try:
        found = DeltaTable(str(table)).to_pyarrow_table(columns=list(columns))
    except TableNotFoundError:
        return []
    return sorted(zip(*(found.column(c).to_pylist() for c in columns), strict=True), key=repr)


def sink_ids(h: PipelineHarness) -> list[int]:
    return sorted(value["id"] for (value,) in rows(h.sink_path, "value"))


def dead_letter_values(h: PipelineHarness) -> list[tuple[Any, ...]]:
    """Each dead letter as (cluster, stream, topic, offset, raw value)."""
    return rows(
        h.sink_path.with_name(f"{h.sink_path.name}_dead_letter"), "cluster", "stream", "topic", "offset", "value"
    )


ARCHIVE_DEAD = sorted([("archive", "orders", None, None, v) for v in BAD], key=repr)


def test_archive_values_that_do_not_decode_land_as_dead_letters_once_across_a_crash_and_its_recovery(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = bootstrapped(tmp_path, kafka_clusters, spark, KAFKA)

    run_killed_at(h, "after_dead_letter", monkeypatch)
    assert dead_letter_values(h) == ARCHIVE_DEAD  # committed before the sink, which the crash stopped
    assert sink_ids(h) == []

    recovered = h.face().run()
    assert recovered.recovered_run_seq == 1
    assert sink_ids(h) == sorted([*range(20), *range(100, 110)])
    assert dead_letter_values(h) == ARCHIVE_DEAD
    assert h.face().run().status == "empty"
    assert sink_ids(h) == sorted([*range(20), *range(100, 110)])
    assert dead_letter_values(h) == ARCHIVE_DEAD


def test_the_archive_streams_decode_inputs_are_pinned_when_kafka_has_no_range_of_it(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    strict = {"orders": {"format": "json", "schema": "id INT"}}
    h = bootstrapped(tmp_path, kafka_clusters, spark, [], value={"format": "bytes"}, formats=strict)
    run_killed_at(h, "after_dead_letter", monkeypatch)
    assert dead_letter_values(h) == ARCHIVE_DEAD

    # The schema that decodes the dead letters too: the recovery would land them in the sink as well.
    h.configure(formats={"orders": {"format": "json", "schema": "id INT, note STRING"}})
    with pytest.raises(ConfigError, match="the value format of stream 'orders'"):
        h.face().run()
    assert sink_ids(h) == []

    h.configure(formats=strict)
    assert h.face().run().recovered_run_seq == 1
    assert sink_ids(h) == list(range(20))
    assert dead_letter_values(h) == ARCHIVE_DEAD


def test_an_abandoned_bootstrap_runs_archive_dead_letters_land_once_through_the_rebootstrap_and_a_replay(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = bootstrapped(tmp_path, kafka_clusters, spark, KAFKA)
    run_killed_at(h, "after_dead_letter", monkeypatch)
    assert dead_letter_values(h) == ARCHIVE_DEAD

    h.face().abandon(1, "the archive is landed again")
    again = h.runner().run()
    assert (again.run_seq, again.bootstrap_records, again.dead_letters) == (2, 20, 0)
    assert sink_ids(h) == sorted([*range(20), *range(100, 110)])
    assert dead_letter_values(h) == ARCHIVE_DEAD  # final behind run 1's fence, not appended again
    assert h.runner().run().status == "empty"
    assert sink_ids(h) == sorted([*range(20), *range(100, 110)])

    # The decode setting fixed: the archive's dead letters replay into the sink once, though the replay dies
    # between its sink write and its dead-letter update and runs again.
    h.configure(value={"format": "json", "schema": "id INT, note STRING"})
    with acting_at("replay_after_sink", crash), pytest.raises(SimulatedCrashError):
        main(["dead-letters", "replay", "--yes", "--config", str(h.config_path), "--pipeline", "p"])
    assert sink_ids(h) == sorted([*range(23), *range(100, 110)])
    assert dead_letter_values(h) == ARCHIVE_DEAD
    assert main(["dead-letters", "replay", "--yes", "--config", str(h.config_path), "--pipeline", "p"]) == 0
    assert sink_ids(h) == sorted([*range(23), *range(100, 110)])
    assert dead_letter_values(h) == []
