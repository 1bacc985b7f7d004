"""The ``metrics`` section: off by default, its labels checked, and a push to a receiver that is down (or behind a
reference that does not resolve) is a warning naming the endpoint, never an error; what a run's samples show."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pytest
from pydantic import ValidationError

from dynamic_kafka._toolchain.process import free_port
from dynamic_kafka.config.models import MetricsConfig, ProjectConfig
from dynamic_kafka.model.snapshots import PartitionState, StateSnapshot
from dynamic_kafka.model.summary import GroupCommit, RunSummary
from dynamic_kafka.operations.monitoring import Sample, push_metrics, run_samples

if TYPE_CHECKING:
    from collections.abc import Mapping

    from dynamic_kafka.model.snapshots import PartitionStatus

_SAMPLES = [Sample("run_records", "Records.", 5)]


def _config(**given: object) -> MetricsConfig:
    return MetricsConfig.model_validate({"pushgateway": f"http://127.0.0.1:{free_port()}", **given})


def test_metrics_are_off_unless_configured() -> None:
    project = ProjectConfig.model_validate({"metadata_service": {"type": "file", "path": "m.yaml"}})
    assert project.metrics is None


@pytest.mark.parametrize(
    ("labels", "says"),
    [({"pipeline": "x"}, "carry already"), ({"env-name": "x"}, "not a Prometheus label"), ({"__x": "y"}, "leading")],
)
def test_a_grouping_label_the_metrics_carry_or_prometheus_refuses_is_refused(
    labels: Mapping[str, str], says: str
) -> None:
    with pytest.raises(ValidationError, match=says):
        _config(labels=labels)


def test_a_receiver_that_is_down_is_a_warning_naming_it_without_credentials(caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()  # nothing listens there
    config = MetricsConfig(pushgateway=f"http://ops:hunter2@127.0.0.1:{port}/gateway", timeout_seconds=2)

    with caplog.at_level(logging.WARNING, logger="dynamic_kafka.operations.monitoring"):
        assert push_metrics(config, "orders", "run", _SAMPLES) is False

    [warning] = [r.getMessage() for r in caplog.records]
    assert f"not pushed to http://127.0.0.1:{port}/gateway" in warning
    assert "hunter2" not in warning


def test_a_password_reference_that_does_not_resolve_is_a_warning_naming_the_reference(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DK_TEST_UNSET_PUSH_PASSWORD", raising=False)
    config = _config(username="ops", password="${env:DK_TEST_UNSET_PUSH_PASSWORD}")

    with caplog.at_level(logging.WARNING, logger="dynamic_kafka.operations.monitoring"):
        assert push_metrics(config, "orders", "health", _SAMPLES) is False

    [warning] = [r.getMessage() for r in caplog.records]
    assert "DK_TEST_UNSET_PUSH_PASSWORD" in warning
    assert config.shown_endpoint in warning


def test_a_runs_samples_show_its_active_partitions_and_each_clusters_group_commit() -> None:
    def row(partition: int, status: PartitionStatus) -> PartitionState:
        return PartitionState(cluster_id="east", topic="orders", partition=partition, next_offset=7, status=status)

    state = StateSnapshot(pipeline_id="p", partitions={r.key: r for r in (row(0, "active"), row(1, "removed"))})
    commits = (
        GroupCommit(cluster_id="east", group="g", committed=True),
        GroupCommit(cluster_id="west", group="g", committed=False, error="coordinator not available"),
    )
    summary = RunSummary(pipeline_id="p", run_seq=3, status="committed", group_commits=commits)

    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for s in run_samples(summary, state, finished_at=datetime.now(UTC))
    }

    assert [k for k in samples if k[0] == "partition_committed_offset"] == [
        ("partition_committed_offset", (("cluster_id", "east"), ("partition", "0"), ("topic", "orders")))
    ]
    assert samples[("commits_succeeded", (("cluster_id", "west"),))] == 0
    assert samples[("commits_failed", (("cluster_id", "west"),))] == 1
    assert samples[("commits_failed", (("cluster_id", "east"),))] == 0
    assert "event_time_lag_seconds" not in {name for name, _ in samples}  # nothing read: no event time
