"""The operation jobs (``offsets show``, ``offsets reset``, ``dead-letters replay``), executed in process with run
config against real clusters, Spark and Delta: their config schema is the command's flags, a reset without
``apply`` changes nothing, with it the next incremental run reads the new range.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from dynamic_kafka.config.loader import load_project_config
from dynamic_kafka.protocol.context import PipelineContext
from tests.support.e2e import Project, Record, create_topic, produce, sink_rows, unique_topic

if TYPE_CHECKING:
    from dagster import DagsterInstance

pytestmark = pytest.mark.e2e


def test_reset_and_replay_jobs_take_run_config_and_act_through_the_library(
    project: Project, kafka_clusters: Any, spark: Any, instance: DagsterInstance
) -> None:
    east = project.clusters["east"]
    topic = unique_topic("orders")
    create_topic(east, topic, partitions=1)
    project.write_metadata({"orders": {"east": [topic]}})
    project.add_pipeline("orders", ["orders"])
    landed = produce("east", east, topic, [Record(0, f"v{i}") for i in range(3)])
    definitions = project.definitions()
    assert definitions.resolve_job_def("orders_incremental").execute_in_process(instance=instance).success

    reset = definitions.resolve_job_def("orders_offsets_reset")
    fields = reset.run_config_schema.config_type.fields["ops"].config_type.fields
    config_fields = fields["orders_reset_offsets"].config_type.fields["config"].config_type.fields
    assert {"to", "reason", "cluster", "topic", "partition", "apply"} <= set(config_fields)

    shown = definitions.resolve_job_def("orders_offsets_show").execute_in_process(instance=instance)
    (row,) = shown.output_for_node("orders_show_offsets")["partitions"]
    assert (row["next_offset"], row["latest_offset"]) == (3, 3)

    config = {"to": "offset:1", "reason": "rewind after a bad deploy"}
    dry = reset.execute_in_process(instance=instance, run_config={"ops": {"orders_reset_offsets": {"config": config}}})
    assert (dry.output_for_node("orders_reset_offsets")["applied"], current_offset(project)) == (False, 3)
    applied = reset.execute_in_process(
        instance=instance, run_config={"ops": {"orders_reset_offsets": {"config": {**config, "apply": True}}}}
    )
    report = applied.output_for_node("orders_reset_offsets")
    assert (report["applied"], report["read_again"], current_offset(project)) == (True, 2, 1)

    assert definitions.resolve_job_def("orders_incremental").execute_in_process(instance=instance).success
    assert sorted(sink_rows(project.sink_path("orders"))) == sorted(landed), "read again, landed once"
    assert current_offset(project) == 3

    replay = definitions.resolve_job_def("orders_dead_letter_replay").execute_in_process(
        instance=instance, run_config={"ops": {"orders_replay_dead_letters": {"config": {"apply": True}}}}
    )
    assert replay.output_for_node("orders_replay_dead_letters")["dead_letters"] == 0


def current_offset(project: Project) -> int:
    state = PipelineContext(load_project_config(project.config_path), "orders").store.load()
    (partition,) = state.partitions.values()
    return partition.next_offset
