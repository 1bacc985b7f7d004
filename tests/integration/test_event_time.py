"""Event time from the payload (``event_time``), on real Kafka, Spark and Delta:

- a run's summary reports the min/max of the expression (not of the Kafka timestamps), names the expression, and
  the health report's event-time lag is measured from it;
- an expression that does not parse, names a missing column or is not a time is a config error naming the
  pipeline and the expression, raised before anything is written (no sink, no planned run);
- a recovery measures with the expression its plan pinned, not the one the config has since;
- a backfill keeps the records whose event time is in the window, reading the offsets of the window widened by
  ``event_time_slack_seconds``: a record whose Kafka timestamp is further from its event time is not read.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest
from deltalake import DeltaTable

from devtools.testing.kafka import Record, create_topic, produce, unique_name
from devtools.testing.pipeline import PipelineHarness
from dynamic_kafka import Pipeline, load_project_config
from dynamic_kafka.errors import ConfigError
from dynamic_kafka.protocol import run as runner_module
from tests.support.clock import past_the_planned_runs_lease

if TYPE_CHECKING:
    from pathlib import Path

    from devtools.local_kafka import ClusterEndpoint

pytestmark = pytest.mark.integration

SCHEMA = "id INT, placed_at TIMESTAMP, shipped_ms BIGINT"


class Killed(BaseException):
    """A simulated ``kill -9`` at a crash point."""


def orders_pipeline(
    kafka_clusters: dict[str, ClusterEndpoint], folder: Path, spark: Any, **settings: Any
) -> tuple[PipelineHarness, str]:
    bootstrap = kafka_clusters["east"].bootstrap_servers
    harness = PipelineHarness(
        folder,
        clusters={"east": bootstrap},
        spark=lambda: spark,
        value={"format": "json", "schema": SCHEMA},
        **settings,
    )
    topic = unique_name("orders")
    create_topic(bootstrap, topic)
    harness.set_streams({"orders": {"east": [topic]}})
    return harness, topic


def order(order_id: int, placed_at: datetime, *, sent_at: datetime | None = None) -> Record:
    value = {"id": order_id, "placed_at": placed_at.isoformat(), "shipped_ms": int(placed_at.timestamp() * 1000)}
    return Record(
        value=json.dumps(value).encode(), timestamp_ms=int(sent_at.timestamp() * 1000) if sent_at is not None else None
    )


def test_a_runs_event_times_come_from_the_expression(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> None:
    harness, topic = orders_pipeline(kafka_clusters, tmp_path, spark, event_time="value.placed_at")
    placed = datetime(2026, 11, 1, 8, 0, tzinfo=UTC)
    produce(
        kafka_clusters["east"].bootstrap_servers,
        topic,
        [order(1, placed), order(2, placed + timedelta(hours=3)), Record(value=b"not json")],
    )

    summary = harness.face().run()

    assert (summary.records, summary.dead_letters) == (3, 1)
    assert (summary.min_event_time, summary.max_event_time) == (placed, placed + timedelta(hours=3))
    assert summary.event_time == "value.placed_at"
    planned = harness.runner().store.run_history(limit=1)[0].plan
    assert planned.event_time == "value.placed_at", "the plan pins the expression it was checked with"
    report = Pipeline(load_project_config(harness.config_path), "p").health()
    assert report.newest_event_time == placed + timedelta(hours=3)
    assert report.event_time_lag_seconds is not None
    assert report.event_time_lag_seconds > 20 * 24 * 3600

    harness.configure(event_time=None)
    produce(kafka_clusters["east"].bootstrap_servers, topic, [order(3, placed)])
    summary = harness.face().run()
    assert summary.event_time is None
    assert summary.min_event_time is not None
    assert summary.min_event_time > datetime.now(UTC) - timedelta(minutes=10), "the Kafka timestamp by default"


def test_a_table_per_stream_runs_event_times_come_from_the_expression(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> None:
    harness, topic = orders_pipeline(
        kafka_clusters, tmp_path, spark, event_time="value.placed_at", sink={"path": "tables/{stream}"}
    )
    placed = datetime(2026, 11, 3, 7, 0, tzinfo=UTC)
    produce(kafka_clusters["east"].bootstrap_servers, topic, [order(1, placed), order(2, placed + timedelta(hours=2))])

    summary = harness.face().run()

    assert [t.stream_id for t in summary.stream_tables] == ["orders"]
    assert (summary.min_event_time, summary.max_event_time) == (placed, placed + timedelta(hours=2))
    assert summary.event_time == "value.placed_at"
    report = Pipeline(load_project_config(harness.config_path), "p").health()
    assert report.newest_event_time == placed + timedelta(hours=2)


@pytest.mark.parametrize(
    ("expression", "said"),
    [
        ("value.placed_on", "cannot be evaluated over the rows it writes"),
        ("to_timestamp(value.placed_at", "cannot be evaluated over the rows it writes"),
        ("value.id", "is a int, not a timestamp"),
    ],
)
def test_an_unusable_expression_is_refused_before_anything_is_written(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path, expression: str, said: str
) -> None:
    harness, topic = orders_pipeline(kafka_clusters, tmp_path, spark, event_time=expression)
    produce(kafka_clusters["east"].bootstrap_servers, topic, [order(1, datetime.now(UTC))])

    with pytest.raises(ConfigError) as raised:
        harness.face().run()

    message = str(raised.value)
    assert f"pipeline 'p': event_time {expression!r} {said}" in message
    assert "timestamp_millis(value.ts_ms)" in (raised.value.hint or "")
    assert not harness.sink_path.exists()
    assert harness.face().status().never_ran, "nothing planned"


def test_a_recovery_measures_with_the_planned_expression(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness, topic = orders_pipeline(kafka_clusters, tmp_path, spark, event_time="value.placed_at")
    placed = datetime(2026, 11, 2, 9, 30, tzinfo=UTC)
    produce(kafka_clusters["east"].bootstrap_servers, topic, [order(1, placed)])

    def die(name: str) -> None:
        if name == "before_read":
            raise Killed(name)

    with monkeypatch.context() as patched:
        patched.setattr(runner_module, "crash_point", die)
        with pytest.raises(Killed):
            harness.runner().run()
    past_the_planned_runs_lease(monkeypatch, harness.runner().store)
    harness.configure(event_time="timestamp_millis(value.shipped_ms + 60000)")

    summary = harness.runner().run()

    assert summary.recovered_run_seq == 1
    recovered = next(r for r in harness.runner().store.run_history(limit=5) if r.run_seq == 1)
    assert recovered.summary_json is not None
    assert json.loads(recovered.summary_json)["event_time"] == "value.placed_at"
    assert json.loads(recovered.summary_json)["min_event_time"].startswith("2026-11-02T09:30:00")


def test_a_backfill_window_filters_on_the_event_time(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> None:
    harness, topic = orders_pipeline(
        kafka_clusters, tmp_path, spark, event_time="value.placed_at", event_time_slack_seconds=1800
    )
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=5)
    end = start + timedelta(hours=1)
    produce(
        kafka_clusters["east"].bootstrap_servers,
        topic,
        [
            order(1, start + timedelta(minutes=5), sent_at=start + timedelta(minutes=10)),  # in, sent late: read
            order(2, end - timedelta(minutes=5), sent_at=end + timedelta(minutes=20)),  # in, sent within the slack
            order(3, end + timedelta(minutes=10), sent_at=end - timedelta(minutes=30)),  # sent in, happened after
            order(4, start - timedelta(minutes=1), sent_at=start + timedelta(minutes=1)),  # sent in, happened before
            order(5, start + timedelta(minutes=30), sent_at=end + timedelta(hours=2)),  # in, beyond the slack
        ],
    )

    summary = Pipeline(load_project_config(harness.config_path), "p", spark=lambda: spark).backfill(start, end)

    values = DeltaTable(str(harness.sink_path)).to_pyarrow_table(columns=["value"]).column("value").to_pylist()
    assert sorted(v["id"] for v in values) == [1, 2], "kept by event time; order 5 was sent beyond the slack"
    assert summary.min_event_time == start + timedelta(minutes=5)
    assert summary.max_event_time == end - timedelta(minutes=5)
