"""What cannot get better by waiting fails at once and is not retriable (so Dagster does not retry it either): a
missing metadata file, a refused connection; and health asks its questions at once, not one timeout after another.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import TYPE_CHECKING, Any

import pytest

from devtools.testing.clusters import distinct_free_ports
from dynamic_kafka import Pipeline
from dynamic_kafka.cli.main import main
from dynamic_kafka.errors import ClusterUnreachableError, MetadataServiceError
from dynamic_kafka.kafka import snapshot
from dynamic_kafka.kafka.client import KafkaAdmin
from dynamic_kafka.metadata.file import FileMetadataService
from dynamic_kafka.metadata.models import ClusterMetadata

if TYPE_CHECKING:
    from pathlib import Path

    from dynamic_kafka.model.snapshots import BrokerSnapshot


def test_a_missing_metadata_file_is_not_retriable(tmp_path: Path) -> None:
    with pytest.raises(MetadataServiceError) as raised:
        FileMetadataService(tmp_path / "gone.yaml").get_all_streams()

    assert raised.value.retriable is False


def test_plan_with_a_missing_metadata_file_fails_at_the_first_attempt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "dynamic_kafka.yaml"
    config.write_text(
        "metadata_service: {type: file, path: gone.yaml}\n"
        "pipelines: [{id: p, streams: [orders], sink: {path: data/orders}, "
        "metadata_retries: {attempts: 3, backoff_seconds: 5}}]\n"
    )

    with caplog.at_level(logging.WARNING):
        assert main(["plan", "--json", "--config", str(config), "--pipeline", "p"]) == 1

    error = json.loads(capsys.readouterr().err)["error"]
    assert (error["type"], error["retriable"]) == ("MetadataServiceError", False)
    assert "gone.yaml' does not exist" in error["message"]
    assert not [r for r in caplog.records if "retrying" in r.getMessage()]


def test_a_refused_connection_fails_at_once_and_is_not_retriable() -> None:
    (port,) = distinct_free_ports(1)
    cluster = ClusterMetadata(cluster_id="east", bootstrap_servers=f"127.0.0.1:{port}")

    # The deadline is far: an error before it that says "refused" is one that did not wait for it.
    with KafkaAdmin(cluster, timeout_s=60) as admin, pytest.raises(ClusterUnreachableError) as raised:
        admin.describe_topics(["orders"])

    assert raised.value.retriable is False
    assert f"brokers 127.0.0.1:{port} refused the connection" in str(raised.value)


def test_health_asks_the_brokers_its_three_questions_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Each question waits until all three are asked: asked one after the other, the first would wait in vain.
    asked = threading.Barrier(3, timeout=30)
    real = snapshot.take_broker_snapshot

    def together(requests: Any, **options: Any) -> BrokerSnapshot:
        asked.wait()
        return real([], **options)

    monkeypatch.setattr("dynamic_kafka.operations.status.take_broker_snapshot", together)
    monkeypatch.setattr("dynamic_kafka.operations.health.take_broker_snapshot", together)
    (tmp_path / "metadata.yaml").write_text('{clusters: {east: {bootstrap_servers: "127.0.0.1:1"}}, streams: {}}')
    config = tmp_path / "dynamic_kafka.yaml"
    config.write_text(
        "metadata_service: {type: file, path: metadata.yaml}\n"
        "pipelines: [{id: p, stream_pattern: '.*', sink: {path: data/p}}]\n"
    )

    report = Pipeline.from_config(config, "p").health()

    assert report.never_ran is True
    assert not asked.broken


def test_dagster_turns_an_os_error_into_a_failure_it_does_not_retry() -> None:
    dagster = pytest.importorskip("dagster")
    from dynamic_kafka.dagster.errors import dagster_errors

    with pytest.raises(dagster.Failure) as raised, dagster_errors("p"):
        raise FileNotFoundError(2, "No such file or directory", "/proc/dynamic-kafka")

    assert raised.value.metadata["error"].value == "HostError"
    assert raised.value.metadata["path"].value == "/proc/dynamic-kafka"
    assert raised.value.allow_retries is False


def test_health_warns_once_about_a_cluster_that_refuses_connections(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Three questions reach the same dead cluster; the operator needs to read that once (the report names it too).
    (tmp_path / "metadata.yaml").write_text(
        '{clusters: {east: {bootstrap_servers: "127.0.0.1:1"}}, streams: {orders: {east: [orders]}}}'
    )
    config = tmp_path / "dynamic_kafka.yaml"
    config.write_text(
        "metadata_service: {type: file, path: metadata.yaml}\n"
        "pipelines: [{id: p, streams: [orders], sink: {path: data/p}}]\n"
    )

    with caplog.at_level(logging.WARNING):
        report = Pipeline.from_config(config, "p").health()

    assert not report.verdict("lag").passed
    skipped = [r for r in caplog.records if "cluster 'east' skipped" in r.getMessage()]
    assert len(skipped) == 1, [r.getMessage() for r in skipped]
