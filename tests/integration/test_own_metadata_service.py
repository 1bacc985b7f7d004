"""A user's own ``KafkaMetadataService`` (the ``python`` factory) on the real "east"/"west" clusters, Spark and Delta:
a class in a module of the user's project that reads its streams from an HTTP endpoint, driven through the CLI and
through the Dagster definitions built from the same config.

The endpoint is a small HTTP server this test starts: what a team's discovery service or config API would be.
"""

from __future__ import annotations

import json
import textwrap
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from dagster import AssetKey, DagsterInstance, SensorResult, build_sensor_context

from devtools.testing.kafka import create_topic, produce, unique_name
from devtools.testing.pipeline import PipelineHarness
from dynamic_kafka.cli.main import main
from dynamic_kafka.dagster.build import build_definitions
from dynamic_kafka.dagster.names import RESOURCE_KEY
from dynamic_kafka.dagster.resources import DynamicKafkaResource
from tests.support.metadata_changes import numbered, positions, rows, sink_streams

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from devtools.local_kafka import ClusterEndpoint

pytestmark = pytest.mark.integration

SINK_ASSET = AssetKey(["dynamic_kafka", "p"])

# The user's module, as a team would write it: every call asks the endpoint, a failure is a MetadataServiceError
# (retried by the runner like the file service's), and only clusters listed under "active" are active.
USER_MODULE = '''
"""Streams from our discovery endpoint."""

import json
import urllib.request

from dynamic_kafka.errors import MetadataServiceError
from dynamic_kafka.metadata.models import ClusterMetadata, KafkaStream
from dynamic_kafka.metadata.service import KafkaMetadataService


class DiscoveryMetadataService(KafkaMetadataService):
    def __init__(self, url: str) -> None:
        self.url = url

    def _document(self) -> dict:
        try:
            with urllib.request.urlopen(self.url, timeout=5) as answer:
                return json.load(answer)
        except OSError as e:
            raise MetadataServiceError(f"discovery endpoint {self.url}: {e}") from e

    def _streams(self) -> dict[str, KafkaStream]:
        document = self._document()
        return {
            sid: KafkaStream(
                stream_id=sid,
                clusters={
                    cid: ClusterMetadata(
                        cluster_id=cid, bootstrap_servers=document["clusters"][cid], topics=frozenset(topics)
                    )
                    for cid, topics in placements.items()
                },
            )
            for sid, placements in document["streams"].items()
        }

    def get_all_streams(self) -> set[KafkaStream]:
        return set(self._streams().values())

    def describe_streams(self, stream_ids):
        streams = self._streams()
        return {sid: streams[sid] for sid in stream_ids if sid in streams}

    def is_cluster_active(self, cluster_id: str) -> bool:
        return cluster_id in self._document()["active"]
'''


class Discovery:
    """The endpoint's document, changed by the test between runs; ``failures`` answers fail with 503 first."""

    def __init__(self) -> None:
        self.document: dict[str, Any] = {"clusters": {}, "streams": {}, "active": []}
        self.failures = 0


@pytest.fixture
def discovery() -> Iterator[tuple[Discovery, str]]:
    state = Discovery()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if state.failures > 0:
                state.failures -= 1
                self.send_error(503, "discovery is restarting")
                return
            body = json.dumps(state.document).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            """Quiet: the test's output is the runs'."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}/streams"
    finally:
        server.shutdown()
        server.server_close()


def run(harness: PipelineHarness, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """``dynamic-kafka run --json`` of the harness's pipeline; its summary."""
    assert main(["run", "--json", "--config", str(harness.config_path), "--pipeline", "p"]) == 0
    summary: dict[str, Any] = json.loads(capsys.readouterr().out)
    return summary


@dataclass
class OwnService:
    """Pipeline "p" of stream "orders" resolved by the user's module: the endpoint lists "orders" on one topic of
    east (2 partitions), both clusters active; ``topic_w`` (1 partition) on west is there for the test to add."""

    harness: PipelineHarness
    endpoint: Discovery
    east: str
    west: str
    topic_e: str
    topic_w: str


@pytest.fixture
def own_service(
    kafka_clusters: dict[str, ClusterEndpoint],
    spark: Any,
    tmp_path: Path,
    discovery: tuple[Discovery, str],
    monkeypatch: pytest.MonkeyPatch,
) -> OwnService:
    endpoint, url = discovery
    east, west = kafka_clusters["east"].bootstrap_servers, kafka_clusters["west"].bootstrap_servers
    topic_e, topic_w = unique_name("orders-e"), unique_name("orders-w")
    create_topic(east, topic_e, 2)
    create_topic(west, topic_w, 1)
    module = unique_name("team_discovery").replace("-", "_")
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(USER_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    harness = PipelineHarness(tmp_path, clusters={}, spark=lambda: spark)
    config = {
        "metadata_service": {
            "type": "python",
            "import_path": f"{module}:DiscoveryMetadataService",
            "args": {"url": url},
        },
        "pipelines": [
            {
                "id": "p",
                "streams": ["orders"],
                "sink": {"path": "sink"},
                "metadata_retries": {"attempts": 3, "backoff_seconds": 0.1, "timeout_seconds": 10},
            }
        ],
    }
    harness.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    endpoint.document = {"clusters": {"east": east, "west": west}, "streams": {"orders": {"east": [topic_e]}}}
    endpoint.document["active"] = ["east", "west"]
    return OwnService(harness, endpoint, east, west, topic_e, topic_w)


def test_a_users_own_service_drives_runs_over_two_clusters_and_its_inactive_cluster_is_not_read(
    own_service: OwnService, capsys: pytest.CaptureFixture[str]
) -> None:
    harness, endpoint = own_service.harness, own_service.endpoint
    east, west, topic_e, topic_w = own_service.east, own_service.west, own_service.topic_e, own_service.topic_w

    expected = rows("east", topic_e, produce(east, topic_e, numbered(range(10), partitions=2)))
    assert run(harness, capsys)["records"] == 10

    # A metadata change: the stream spreads to west. The endpoint is restarting when the run starts: retried.
    endpoint.document["streams"] = {"orders": {"east": [topic_e], "west": [topic_w]}}
    endpoint.failures = 1
    expected += rows("east", topic_e, produce(east, topic_e, numbered(range(10, 15), partitions=2)))
    expected += rows("west", topic_w, produce(west, topic_w, numbered(range(15, 20))))
    assert run(harness, capsys)["records"] == 10
    assert harness.sink_rows() == sorted(expected)

    # east is still listed but inactive: not read, its offsets kept.
    endpoint.document["active"] = ["west"]
    held = rows("east", topic_e, produce(east, topic_e, numbered(range(20, 25), partitions=2)))
    expected += rows("west", topic_w, produce(west, topic_w, numbered(range(25, 30))))
    assert run(harness, capsys)["records"] == 5
    assert harness.sink_rows() == sorted(expected)
    assert positions(harness, "east") == {("east", topic_e, 0): ("removed", 8), ("east", topic_e, 1): ("removed", 7)}

    # Active again: east resumes where it stopped, each record once.
    endpoint.document["active"] = ["east", "west"]
    assert run(harness, capsys)["records"] == 5
    assert harness.sink_rows() == sorted(expected + held)
    assert positions(harness, "east") == {("east", topic_e, 0): ("active", 11), ("east", topic_e, 1): ("active", 9)}


def test_a_users_own_service_drives_the_dagster_job_and_metadata_sensor(own_service: OwnService) -> None:
    harness, endpoint = own_service.harness, own_service.endpoint
    east, west, topic_e, topic_w = own_service.east, own_service.west, own_service.topic_e, own_service.topic_w
    # The definitions a user's code location builds from the same config.
    defs = build_definitions(harness.config_path)
    job, sensor = defs.resolve_job_def("p_incremental"), defs.resolve_sensor_def("p_metadata_sensor")
    cursor: str | None = None

    with DagsterInstance.ephemeral() as instance:

        def tick() -> int:
            """The sensor's run requests of one tick against the endpoint's answer now."""
            nonlocal cursor
            context = build_sensor_context(
                instance=instance, cursor=cursor, resources={RESOURCE_KEY: DynamicKafkaResource()}
            )
            result = sensor(context)
            assert isinstance(result, SensorResult)
            cursor = result.cursor
            return len(result.run_requests or [])

        def materialize() -> dict[str, Any]:
            """The sink asset's materialization metadata of one incremental job run."""
            result = job.execute_in_process(instance=instance)
            assert result.success
            (event,) = [
                e for e in result.get_asset_materialization_events() if e.materialization.asset_key == SINK_ASSET
            ]
            return {k: v.value for k, v in event.materialization.metadata.items()}

        assert tick() == 1  # the first poll: a baseline run
        expected = rows("east", topic_e, produce(east, topic_e, numbered(range(10), partitions=2)))
        assert materialize()["records"] == 10
        assert tick() == 0

        # One change: the stream spreads to west and east, still listed, turns inactive. East is not read.
        endpoint.document["streams"] = {"orders": {"east": [topic_e], "west": [topic_w]}}
        endpoint.document["active"] = ["west"]
        assert tick() == 1
        produce(east, topic_e, numbered(range(10, 15), partitions=2))  # held on east (the CLI test shows the resume)
        expected += rows("west", topic_w, produce(west, topic_w, numbered(range(15, 20))))
        ran = materialize()
        assert (ran["records"], ran["clusters"]) == (5, "west")
        assert sink_streams(harness) == sorted(("orders", c, t, v) for c, t, _, _, v in expected)
        assert harness.sink_rows() == sorted(expected)
        assert positions(harness, "east") == {
            ("east", topic_e, 0): ("removed", 5),
            ("east", topic_e, 1): ("removed", 5),
        }

        # Active again: a change the sensor requests a run for.
        endpoint.document["active"] = ["east", "west"]
        assert tick() == 1
