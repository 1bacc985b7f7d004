"""The partitioned backfill job over three hourly partitions, with records of known timestamps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

from tests.support.e2e import Landed, Project, Record, create_topic, produce, sink_rows, unique_topic

if TYPE_CHECKING:
    from dagster import DagsterInstance, Definitions, ExecuteInProcessResult

pytestmark = pytest.mark.e2e

PARTITION_FORMAT = "%Y-%m-%d-%H:%M"
H = timedelta(hours=1)
M = timedelta(minutes=1)
MS = timedelta(milliseconds=1)


def rec(partition: int, value: str, moment: datetime) -> Record:
    return Record(partition, value, timestamp_ms=int(moment.timestamp() * 1000))


def materialized(result: ExecuteInProcessResult) -> dict[str, Any]:
    (event,) = result.get_asset_materialization_events()
    return {k: v.value for k, v in event.materialization.metadata.items()}


class Clicks:
    """A pipeline "clicks" over a 2-partition topic on east and a 1-partition topic on west, with hourly backfill
    partitions; ``hour`` is the first of the three hours the tests backfill (five hours ago)."""

    def __init__(self, project: Project) -> None:
        self.project = project
        self.east, self.west = project.clusters["east"], project.clusters["west"]
        self.east_topic, self.west_topic = unique_topic("clicks-east"), unique_topic("clicks-west")
        create_topic(self.east, self.east_topic, partitions=2)
        create_topic(self.west, self.west_topic, partitions=1)
        project.write_metadata({"clicks": {"east": [self.east_topic], "west": [self.west_topic]}})
        self.hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - 5 * H
        start = (self.hour - 24 * H).isoformat()
        project.add_pipeline(
            "clicks", ["clicks"], orchestration={"backfill": {"start": start, "granularity": "hourly"}}
        )
        defs: Definitions = project.definitions()
        self.incremental = defs.resolve_job_def("clicks_incremental")
        self.backfill = defs.resolve_job_def("clicks_backfill")
        self.keys = [(self.hour + i * H).strftime(PARTITION_FORMAT) for i in range(3)]

    def produce(self, east: list[Record], west: list[Record]) -> list[Landed]:
        return produce("east", self.east, self.east_topic, east) + produce("west", self.west, self.west_topic, west)

    def rows(self) -> list[Landed]:
        return sorted(sink_rows(self.project.sink_path("clicks")))


# One test, one topic pair, because every job execution costs seconds: the backfills around incremental runs, an
# out-of-order record inside a window's offsets, and the incremental run after the backfills.
def test_backfills_land_exactly_their_windows_records_once_around_incremental_runs(
    project: Project, kafka_clusters: Any, spark: Any, instance: DagsterInstance
) -> None:
    clicks = Clicks(project)
    hour = clicks.hour
    # An incremental run lands the first records of hour 0 and some of the hour before the window.
    early = clicks.produce(
        east=[rec(0, "a-before-1", hour - H + 30 * M), rec(0, "a-h0-1", hour + 10 * M), rec(1, "a-h0-2", hour + 5 * M)],
        west=[rec(0, "a-before-2", hour - H + 50 * M), rec(0, "a-h0-3", hour + 40 * M)],
    )
    assert clicks.incremental.execute_in_process(instance=instance).success
    assert clicks.rows() == sorted(early)
    # Later records: the rest of hour 0, hours 1 and 2 (on both window edges), records after the window, and one
    # out of order: its offset is inside hour 0's offset range, its timestamp before the window.
    late = clicks.produce(
        east=[
            rec(0, "b-h0", hour + 50 * M),
            rec(0, "b-out-of-order", hour - 30 * M),
            rec(0, "b-h1-1", hour + H + 5 * M),
            rec(0, "b-h2-1", hour + 2 * H + 10 * M),
            rec(0, "b-after-1", hour + 3 * H + M),
            rec(1, "b-h1-2", hour + H + 30 * M),
            rec(1, "b-h2-2", hour + 3 * H - MS),
        ],
        west=[rec(0, "b-h2-3", hour + 2 * H), rec(0, "b-after-2", hour + 3 * H)],
    )
    window = [r for r in late if r.value.startswith(("b-h0", "b-h1", "b-h2"))]

    results = [clicks.backfill.execute_in_process(partition_key=key, instance=instance) for key in clicks.keys]

    assert all(r.success for r in results)
    assert clicks.rows() == sorted(early + window)
    meta = materialized(results[1])
    assert meta["partition"] == clicks.keys[1]
    assert (meta["window_start"], meta["window_end"]) == ((hour + H).timestamp(), (hour + 2 * H).timestamp())
    assert meta["records"] == 2
    assert "run_seq" not in meta

    again = clicks.backfill.execute_in_process(partition_key=clicks.keys[1], instance=instance)

    assert again.success
    assert clicks.rows() == sorted(early + window)

    # The backfills moved no incremental offset: this run reads every late record, lands those no backfill landed
    # and none twice.
    assert clicks.incremental.execute_in_process(instance=instance).success
    assert clicks.rows() == sorted(early + late)
