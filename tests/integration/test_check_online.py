"""``check --online`` on real brokers: what the files alone cannot tell (a topic that does not exist, a cluster that
does not answer) joins the offline report; a missing topic fails the run by default, and ``on_topic_missing: warn``
makes it a note.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from devtools.testing.clusters import distinct_free_ports
from devtools.testing.kafka import create_topic, unique_name
from devtools.testing.pipeline import PipelineHarness
from dynamic_kafka.cli.main import main

if TYPE_CHECKING:
    from pathlib import Path

    from devtools.local_kafka import ClusterEndpoint

pytestmark = pytest.mark.integration


def online_check(harness: PipelineHarness, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code = main(["check", "--online", "--json", "--config", str(harness.config_path)])
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert code == (0 if report["ok"] else 3)
    return report


@pytest.fixture
def harness(kafka_clusters: dict[str, ClusterEndpoint], tmp_path: Path) -> PipelineHarness:
    bootstrap = kafka_clusters["east"].bootstrap_servers
    harness = PipelineHarness(tmp_path, clusters={"east": bootstrap})
    topic = unique_name("orders")
    create_topic(bootstrap, topic)
    harness.set_streams({"orders": {"east": [topic, f"{topic}-never-created"]}})
    harness.configure(kafka_timeout_seconds=3)
    return harness


def test_a_missing_topic_is_a_problem_of_check_online_and_fails_plan(
    harness: PipelineHarness, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", "--json", "--config", str(harness.config_path)]) == 0  # offline: the files are fine
    capsys.readouterr()

    report = online_check(harness, capsys)

    [problem] = report["problems"]
    assert problem["location"] == "pipelines[0]"
    assert "-never-created' on cluster 'east'" in problem["message"]
    assert "on_topic_missing: warn" in problem["message"]
    assert main(["plan", "--config", str(harness.config_path), "--pipeline", "p"]) == 1
    assert "TopicMissingError" not in capsys.readouterr().err


def test_on_topic_missing_warn_makes_it_a_note(harness: PipelineHarness, capsys: pytest.CaptureFixture[str]) -> None:
    harness.configure(on_topic_missing="warn", kafka_timeout_seconds=3)

    report = online_check(harness, capsys)

    assert report["ok"] is True
    assert any("-never-created' is listed in the metadata but does not exist" in n for n in report["notes"])


def test_an_unreachable_cluster_is_a_problem_naming_it(
    harness: PipelineHarness, capsys: pytest.CaptureFixture[str]
) -> None:
    (nobody,) = distinct_free_ports(1)
    harness.set_cluster("west", bootstrap_servers=f"127.0.0.1:{nobody}")
    harness.set_streams({"orders": {"west": ["orders"]}})

    report = online_check(harness, capsys)

    [problem] = report["problems"]
    assert problem["location"] == "pipelines[0]"
    assert "cluster 'west'" in problem["message"]
