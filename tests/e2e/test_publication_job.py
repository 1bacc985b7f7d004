"""A publication in Dagster: its asset downstream of the published table, materialized by the job ``<id>_publish``
through Dagster's executor on the session's real brokers, reporting what each run published."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pytest
from dagster import AssetKey, DagsterEventType, Failure
from deltalake import write_deltalake

from dynamic_kafka.dagster.errors import to_dagster
from dynamic_kafka.errors import PublicationError
from tests.support.e2e import create_topic, unique_topic

if TYPE_CHECKING:
    from dagster import DagsterInstance

    from devtools.local_kafka import ClusterEndpoint
    from tests.support.e2e import Project

pytestmark = pytest.mark.e2e


def append(project: Project, ids: list[int]) -> None:
    write_deltalake(str(project.root / "data" / "curated"), pa.table({"id": pa.array(ids, pa.int64())}), mode="append")


def test_the_publish_job_materializes_the_publication_and_reports_records_transactions_and_next_version(
    project: Project, instance: DagsterInstance, kafka_clusters: dict[str, ClusterEndpoint]
) -> None:
    topic = unique_topic("published")
    create_topic(kafka_clusters["east"].bootstrap_servers, topic, 3)
    project.write_metadata({"out": {"east": [topic]}})
    project.publications.append({"id": "out", "table": "data/curated", "stream": "out", "kafka_timeout_seconds": 20})
    project.write_config()
    append(project, [1, 2, 3])
    defs = project.definitions()
    asset = defs.resolve_assets_def(AssetKey(["dynamic_kafka", "out_publication"]))
    assert set(asset.dependency_keys) == {AssetKey(["dynamic_kafka", "out_table"])}
    job = defs.resolve_job_def("out_publish")

    def materialized() -> dict[str, object]:
        result = job.execute_in_process(instance=instance, resources=project.resources())
        assert result.success
        (event,) = [e for e in result.all_events if e.event_type == DagsterEventType.ASSET_MATERIALIZATION]
        materialization = event.event_specific_data.materialization  # type: ignore[union-attr]
        assert materialization.asset_key == AssetKey(["dynamic_kafka", "out_publication"])
        return {k: v.value for k, v in materialization.metadata.items()}

    first = materialized()
    assert (first["records"], first["transactions"], first["next_version"], first["moved"]) == (3, 1, 1, True)
    append(project, [4, 5])
    second = materialized()
    assert (second["records"], second["first_version"], second["next_version"], second["cluster"]) == (2, 1, 2, "east")


def test_a_publication_of_a_pipelines_sink_is_downstream_of_the_sink_asset(project: Project) -> None:
    project.write_metadata({"orders": {"east": ["orders"]}, "out": {"east": ["out"]}})
    project.add_pipeline("orders", ["orders"])
    project.publications.append({"id": "orders-out", "table": "data/orders", "stream": "out"})
    project.write_config()
    defs = project.definitions()
    asset = defs.resolve_assets_def(AssetKey(["dynamic_kafka", "orders-out_publication"]))
    assert set(asset.dependency_keys) == {AssetKey(["dynamic_kafka", "orders"])}
    assert defs.resolve_job_def("orders_out_publish").tags["dynamic_kafka/publication"] == "orders-out"
    # A failed step says which publication failed, not which pipeline.
    error = PublicationError("no registry", publication_id="orders-out", table="data/orders", stream_id="out")
    failure = to_dagster(error, None)
    assert isinstance(failure, Failure)
    assert (failure.description or "").startswith("publication 'orders-out' of data/orders to stream 'out'")
    assert "pipeline_id" not in failure.metadata
