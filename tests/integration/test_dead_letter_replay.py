"""``dead-letters replay`` on real brokers, Spark and Delta: a JSON pipeline dead-letters records its schema does
not take; once the config is fixed, a replay lands the ones that decode now in the sink exactly once, also when a
replay crashes between its sink write and its dead-letter update and is replayed again; what still does not decode
stays, with its error; a replay is recorded in the run history and refused beside a run; a replay past
``max_run_seconds`` is cancelled, records nothing, and the next replay finishes its work.
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
from dynamic_kafka.decoding.formats import VALUE_NOT_JSON
from dynamic_kafka.errors import RunTimeoutError
from dynamic_kafka.faults import acting_at
from dynamic_kafka.model.summary import RunSummary
from dynamic_kafka.operations.replay import replay_dead_letters
from dynamic_kafka.protocol.guard import run_lock_path
from dynamic_kafka.spark.deadline import RunDeadline

if TYPE_CHECKING:
    from pathlib import Path

    from devtools.local_kafka import ClusterEndpoint

pytestmark = pytest.mark.integration


def cli(harness: PipelineHarness, *args: str) -> int:
    return main([*args, "--config", str(harness.config_path), "--pipeline", "p"])


def landed(harness: PipelineHarness) -> list[tuple[int, Any]]:
    """(offset, value.id) of every sink row, sorted, duplicates kept."""
    rows = DeltaTable(str(harness.sink_path)).to_pyarrow_table(columns=["offset", "value"]).to_pylist()
    return sorted((r["offset"], r["value"]["id"]) for r in rows)


def dead_letters(harness: PipelineHarness) -> list[tuple[int, str]]:
    """(offset, error) of every dead letter, sorted."""
    table = harness.face().config.dead_letter_table
    rows = DeltaTable(table.delta_rs_uri).to_pyarrow_table(columns=["offset", "error"]).to_pylist()
    return sorted((r["offset"], r["error"]) for r in rows)


class CrashError(BaseException):
    """The replay's process dying between its two writes: a BaseException, which the CLI's last-line handler
    (every Exception becomes an error message) lets through, as a kill would not stop there either."""


def crash() -> None:
    raise CrashError


def test_replay_lands_what_decodes_now_once_even_after_a_crash_in_the_middle(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bootstrap = kafka_clusters["east"].bootstrap_servers
    harness = PipelineHarness(
        tmp_path,
        clusters={"east": bootstrap},
        spark=lambda: spark,
        value={"format": "json", "schema": "id INT"},
        json_strict=True,
        on_decode_error="dead_letter",
    )
    topic = unique_name("orders")
    create_topic(bootstrap, topic)
    harness.set_streams({"orders": {"east": [topic]}})
    values = [b'{"id": 1}', b'{"id": 2, "note": "a"}', b'{"id": 3, "note": "b"}', b"not json"]
    produce(bootstrap, topic, [Record(value=v) for v in values])
    first = harness.runner().run()
    assert (first.records, first.dead_letters) == (4, 3)
    assert landed(harness) == [(0, 1)]

    # The schema is fixed: the field the producers added joins it.
    harness.configure(value={"format": "json", "schema": "id INT, note STRING"})
    assert cli(harness, "dead-letters", "replay", "--json") == 0
    counted = json.loads(capsys.readouterr().out)
    assert (counted["dead_letters"], counted["applied"]) == (3, False)
    assert (counted["replay"]["replayed"], counted["replay"]["still_undecodable"]) == (2, 1)
    assert len(dead_letters(harness)) == 3, "counting writes nothing"

    # A crash after the sink write, before the dead-letter table's update: the records are in both tables.
    with acting_at("replay_after_sink", crash), pytest.raises(CrashError):
        cli(harness, "dead-letters", "replay", "--yes")
    capsys.readouterr()
    assert landed(harness) == [(0, 1), (1, 2), (2, 3)]
    assert [offset for offset, _ in dead_letters(harness)] == [1, 2, 3]

    # Replayed again: nothing lands twice, the landed ones leave the dead-letter table, the rest keeps its error.
    assert cli(harness, "dead-letters", "replay", "--yes") == 0
    out = capsys.readouterr().out
    assert "3 dead letter(s) in all decoded again under the current config" in out
    assert "replayed 0 into the sink (replay 2)" in out
    assert "2 were in the sink already (an interrupted replay): removed, not landed twice" in out
    assert "1 still do not decode: kept, with their new error" in out
    assert landed(harness) == [(0, 1), (1, 2), (2, 3)]
    assert dead_letters(harness) == [(3, VALUE_NOT_JSON)]
    (record, *_) = harness.runner().store.run_history(limit=1)
    summary = RunSummary.model_validate_json(record.summary_json or "")
    assert (summary.status, summary.replay and summary.replay.already_landed) == ("replayed", 2)

    # A third replay, and the next run, land nothing again.
    assert cli(harness, "dead-letters", "replay", "--yes", "--json") == 0
    again = json.loads(capsys.readouterr().out)["replay"]
    assert (again["replayed"], again["already_landed"], again["still_undecodable"]) == (0, 0, 1)
    produce(bootstrap, topic, [Record(value=b'{"id": 4, "note": "c"}')])
    assert harness.runner().run().records == 1
    assert landed(harness) == [(0, 1), (1, 2), (2, 3), (4, 4)]

    # Never beside a run: refused while the run lock is held.
    pipeline = harness.face().config
    with try_exclusive_lock(run_lock_path(pipeline.resolved_state_path, pipeline.id)) as taken:
        assert taken
        assert cli(harness, "dead-letters", "replay", "--yes", "--json") == 1
    assert json.loads(capsys.readouterr().err)["error"]["type"] == "RunInProgressError"


def test_a_replay_past_max_run_seconds_is_cancelled_records_nothing_and_the_next_replay_finishes_it(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bootstrap = kafka_clusters["east"].bootstrap_servers
    harness = PipelineHarness(
        tmp_path,
        clusters={"east": bootstrap},
        spark=lambda: spark,
        value={"format": "json", "schema": "id INT"},
        json_strict=True,
        on_decode_error="dead_letter",
    )
    topic = unique_name("orders")
    create_topic(bootstrap, topic)
    harness.set_streams({"orders": {"east": [topic]}})
    produce(bootstrap, topic, [Record(value=v) for v in (b'{"id": 1}', b'{"id": 2, "note": "a"}')])
    assert harness.runner().run().dead_letters == 1
    harness.configure(value={"format": "json", "schema": "id INT, note STRING"}, max_run_seconds=1)
    monkeypatch.setattr(RunDeadline, "_RECANCEL_SECONDS", 3600.0)  # one cancellation: wherever it lands

    # Slow between its two writes (or already past its deadline in a Spark job): it stops there, retriably. Real
    # time: max_run_seconds is a timer thread that cancels the Spark job in flight, not a clock a test could move.
    with acting_at("replay_after_sink", lambda: time.sleep(1.2)), pytest.raises(RunTimeoutError) as caught:
        replay_dead_letters(harness.runner().context, run_seq=None, yes=True)

    assert caught.value.retriable
    assert "the dead-letter replay of pipeline 'p' exceeded max_run_seconds (1s)" in str(caught.value)
    store = harness.runner().store
    assert store.load().backfill_owner is None  # its lease was given up
    assert store.load().next_run_seq == 2  # nothing recorded in the history
    assert [offset for offset, _ in dead_letters(harness)] == [1]  # its dead-letter update did not happen

    harness.configure(max_run_seconds=600)
    report = replay_dead_letters(harness.runner().context, run_seq=None, yes=True)
    assert report.replay.replayed + report.replay.already_landed == 1
    assert landed(harness) == [(0, 1), (1, 2)]
    assert dead_letters(harness) == []
    assert spark.range(3).count() == 3  # the shared session is still usable
