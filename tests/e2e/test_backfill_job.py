"""The partitioned backfill job over three hourly partitions, with records of known timestamps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from dagster import DagsterInstance, ExecuteInProcessResult  # noqa: TID251 (e2e tests drive Dagster)
from e2e_support import Landed, Project, Record, create_topic, produce, sink_rows, unique_topic

pytestmark = pytest.mark.e2e

PARTITION_FORMAT = "%Y-%m-%d-%H:%M"
H = timedelta(hours=1)
M = timedelta(minutes=1)


def rec(partition: int, value: str, moment: datetime) -> Record:
    return Record(partition, value, timestamp_ms=int(moment.timestamp() * 1000))


def materialized(result: ExecuteInProcessResult) -> dict[str, Any]:
    (event,) = result.get_asset_materialization_events()
    return {k: v.value for k, v in event.materialization.metadata.items()}


def test_backfill_lands_exactly_the_window_once_whatever_ran_before(
    project: Project, kafka_clusters: Any, spark: Any, instance: DagsterInstance
) -> None:
    east, west = project.clusters["east"], project.clusters["west"]
    east_topic, west_topic = unique_topic("clicks-east"), unique_topic("clicks-west")
    create_topic(east, east_topic, partitions=2)
    create_topic(west, west_topic, partitions=1)
    project.write_metadata({"clicks": {"east": [east_topic], "west": [west_topic]}})
    # The window is hours 0, 1 and 2 starting five hours ago.
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - 5 * H
    project.add_pipeline("clicks", ["clicks"], backfill={"start": (hour - 24 * H).isoformat(), "granularity": "hourly"})
    defs = project.definitions()
    incremental = defs.resolve_job_def("clicks_incremental")
    backfill = defs.resolve_job_def("clicks_backfill")
    keys = [(hour + i * H).strftime(PARTITION_FORMAT) for i in range(3)]
    sink = project.sink_path("clicks")

    def rows() -> list[Landed]:
        return sorted(sink_rows(sink))

    # An incremental run lands hour 0 and the hour before the window.
    early = produce(
        "east",
        east,
        east_topic,
        [rec(0, "a-h0-1", hour + 10 * M), rec(0, "a-before-1", hour - H + 30 * M), rec(1, "a-h0-2", hour + 5 * M)],
    ) + produce("west", west, west_topic, [rec(0, "a-before-2", hour - H + 50 * M), rec(0, "a-h0-3", hour + 40 * M)])
    assert incremental.execute_in_process(instance=instance).success
    assert rows() == sorted(early)

    # Then come hours 1 and 2, late records of hour 0 and of the hour before, and records after the window, with
    # timestamps out of order inside partitions and on both window edges.
    late = produce(
        "east",
        east,
        east_topic,
        [
            rec(0, "b-h1-1", hour + H + 5 * M),
            rec(0, "b-h2-1", hour + 2 * H + 10 * M),
            rec(0, "b-before", hour - H + M),
            rec(0, "b-after-1", hour + 3 * H + M),
            rec(1, "b-h1-2", hour + H + 30 * M),
            rec(1, "b-h0-late", hour + 15 * M),
            rec(1, "b-h2-2", hour + 3 * H - timedelta(milliseconds=1)),
        ],
    ) + produce("west", west, west_topic, [rec(0, "b-h2-3", hour + 2 * H), rec(0, "b-after-0", hour + 3 * H)])
    window = [r for r in late if not r.value.startswith(("b-before", "b-after"))]
    assert len(window) == 6

    results = [backfill.execute_in_process(partition_key=key, instance=instance) for key in keys]

    assert all(r.success for r in results)
    assert rows() == sorted(early + window)
    meta = materialized(results[1])
    assert meta["partition"] == keys[1]
    assert (meta["window_start"], meta["window_end"]) == ((hour + H).timestamp(), (hour + 2 * H).timestamp())
    assert "run_seq" not in meta

    again = backfill.execute_in_process(partition_key=keys[1], instance=instance)

    assert again.success
    assert rows() == sorted(early + window)

    # The backfills did not move the incremental offsets: the next incremental run reads every later record,
    # and the ones the backfills already merged do not land twice.
    caught_up = incremental.execute_in_process(instance=instance)

    assert caught_up.success
    assert materialized(caught_up)["records"] == len(late)
    assert rows() == sorted(early + late)
