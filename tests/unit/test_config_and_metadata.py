"""Config parsing, metadata files, subscribers and redaction: bad input fails fast with a clear message."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pytest

from dynamic_kafka.config.loader import load_project_config
from dynamic_kafka.errors import ClusterUnreachableError, ConfigError, MetadataServiceError, UnknownStreamError
from dynamic_kafka.initializers import CommittedOffsets, TimestampOffsets
from dynamic_kafka.metadata.file import FileMetadataService
from dynamic_kafka.metadata.memory import InMemoryMetadataService
from dynamic_kafka.metadata.models import ClusterMetadata, KafkaStream, metadata_fingerprint
from dynamic_kafka.metadata.patterns import expand_patterns
from dynamic_kafka.metadata.snapshot import MetadataSnapshot
from dynamic_kafka.metadata.subscriber import StreamIdSubscriber, StreamPatternSubscriber
from dynamic_kafka.secrets import resolve_properties

if TYPE_CHECKING:
    from pathlib import Path

METADATA = """
clusters:
  east: {bootstrap_servers: "127.0.0.1:19092", starting_offsets: latest}
  west:
    bootstrap_servers: "127.0.0.1:29092"
    properties: {sasl.password: "${env:WEST_PW}", enable.ssl.certificate.verification: "false"}
streams:
  orders: {east: [orders], west: [orders-v2]}
  orders-eu: {west: [eu]}
  old-orders: {east: [legacy]}
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def project(tmp_path: Path, pipeline_yaml: str) -> Path:
    return write(
        tmp_path,
        "dynamic_kafka.yaml",
        f"metadata_service: {{type: file, path: metadata.yaml}}\npipelines:\n{pipeline_yaml}",
    )


class TestProjectConfig:
    def test_valid_config_resolves_relative_paths_and_short_forms(self, tmp_path: Path) -> None:
        path = project(
            tmp_path,
            "  - id: orders\n    streams: [orders]\n    sink: {path: data/orders}\n"
            "    starting_offsets: {committed: {group_id: g, reset: latest}}\n"
            "    stopping_offsets: {timestamp: '2026-01-01T00:00:00Z'}\n",
        )
        config = load_project_config(path)
        p = config.pipeline("orders")
        assert p.sink.path.local_path == tmp_path / "data/orders"
        assert p.resolved_state_path.local_path == tmp_path / "data/orders_state"
        assert p.starting_offsets == CommittedOffsets(group_id="g", reset="latest")
        assert p.stopping_offsets == TimestampOffsets(timestamp_ms=1767225600000)
        assert config.metadata_service.path == tmp_path / "metadata.yaml"  # type: ignore[union-attr]

    @pytest.mark.parametrize(
        ("pipeline_yaml", "expected"),
        [
            (
                "  - id: o\n    streams: [a]\n    sink: {path: s}\n    colour: red\n",
                r"pipelines\[0\]\.colour: unknown key",
            ),
            ("  - id: o\n    streams: [a]\n    sink: {path: s}\n    on_data_loss: ignore\n", r"on_data_loss"),
            ("  - id: o\n    stream_pattern: '(['\n    sink: {path: s}\n", r"invalid regular expression"),
            ("  - id: o\n    sink: {path: s}\n", r"exactly one of `streams`"),
            (
                "  - id: o\n    streams: [a]\n    sink: {path: s}\n"
                "    starting_offsets: {specific: {offsets: {t: {0: -1}}}}\n",
                r"offsets\.t\[0\]: must be at least 0 \(got -1\)",
            ),
            ("  - id: o\n    streams: [a]\n    sink: {path: s}\n    max_records_per_run: 0\n", r"max_records_per_run"),
            ("  - id: o\n    streams: [a]\n", r"pipelines\[0\]\.sink: required key is missing"),
            (
                "  - id: o\n    streams: [a]\n    sink: {path: s}\n"
                "    orchestration: {backfill: {start: 'first of may'}}\n",
                r"pipelines\[0\]\.orchestration\.backfill\.start: .*not an ISO-8601 timestamp",
            ),
            (
                "  - id: o\n    streams: [a]\n    sink: {path: s}\n    orchestration: {backfill: {start: 2026}}\n",
                r"pipelines\[0\]\.orchestration\.backfill\.start: .*not an ISO-8601 timestamp",
            ),
            (  # the floor: max_run_seconds (default 4 hours) plus an hour
                "  - id: o\n    streams: [a]\n    sink: {path: s}\n    maintenance: {vacuum_retention_hours: 4}\n",
                r"maintenance\.vacuum_retention_hours: a vacuum retention of 4 hours is below the floor of 5 hours.*"
                r"give 5 or more",
            ),
        ],
    )
    def test_invalid_configs_name_file_and_key(self, tmp_path: Path, pipeline_yaml: str, expected: str) -> None:
        path = project(tmp_path, pipeline_yaml)
        with pytest.raises(ConfigError, match=expected) as info:
            load_project_config(path)
        assert str(path) in str(info.value)

    @pytest.mark.parametrize(
        ("start", "expected"),
        [
            ("2026-01-01T00:00:00Z", datetime(2026, 1, 1, tzinfo=UTC)),
            ("2026-01-01T02:00:00+02:00", datetime(2026, 1, 1, tzinfo=UTC)),
            ("2026-01-01", datetime(2026, 1, 1, tzinfo=UTC)),  # no offset: UTC
        ],
    )
    def test_backfill_start_is_aware_utc_at_load(self, tmp_path: Path, start: str, expected: datetime) -> None:
        path = project(
            tmp_path,
            f"  - id: o\n    streams: [a]\n    sink: {{path: s}}\n"
            f"    orchestration: {{backfill: {{start: '{start}'}}}}\n",
        )
        backfill = load_project_config(path).pipeline("o").orchestration.backfill
        assert backfill is not None
        assert backfill.start == expected
        assert backfill.start.tzinfo is UTC

    def test_consumer_group_commits_are_on_by_default_and_null_turns_them_off(self, tmp_path: Path) -> None:
        path = project(
            tmp_path,
            "  - {id: a, streams: [x], sink: {path: a}}\n"
            "  - {id: b, streams: [x], sink: {path: b}, consumer_group: team.b}\n"
            "  - {id: c, streams: [x], sink: {path: c}, consumer_group: null}\n",
        )
        config = load_project_config(path)
        assert [config.pipeline(i).consumer_group for i in "abc"] == ["dynamic-kafka.a", "team.b", None]

    def test_malformed_yaml_names_line(self, tmp_path: Path) -> None:
        path = write(tmp_path, "bad.yaml", "pipelines:\n  - id: [unclosed\n")
        with pytest.raises(ConfigError, match=r"bad\.yaml: malformed YAML at line \d+"):
            load_project_config(path)

    def test_missing_file_and_unknown_pipeline(self, tmp_path: Path) -> None:
        with pytest.raises(ConfigError, match="cannot read the file"):
            load_project_config(tmp_path / "nope.yaml")
        path = project(tmp_path, "  - id: orders\n    streams: [orders]\n    sink: {path: s}\n")
        with pytest.raises(ConfigError, match="no pipeline 'x'; configured pipelines: orders"):
            load_project_config(path).pipeline("x")


class TestMetadataFile:
    def test_streams_and_overrides(self, tmp_path: Path) -> None:
        service = FileMetadataService(write(tmp_path, "metadata.yaml", METADATA))
        orders = service.describe_streams(["orders", "nope"])
        assert list(orders) == ["orders"]
        assert orders["orders"].clusters["east"].topics == frozenset({"orders"})
        assert orders["orders"].clusters["east"].starting_offsets is not None
        assert orders["orders"].clusters["west"].properties["enable.ssl.certificate.verification"] == "false"
        assert service.is_cluster_active("west")
        assert not service.is_cluster_active("north")

    def test_reread_on_every_call(self, tmp_path: Path) -> None:
        path = write(tmp_path, "metadata.yaml", METADATA)
        service = FileMetadataService(path)
        assert "east" in service.describe_streams(["orders"])["orders"].clusters
        path.write_text(METADATA.replace("orders: {east: [orders], west: [orders-v2]}", "orders: {west: [orders-v2]}"))
        assert list(service.describe_streams(["orders"])["orders"].clusters) == ["west"]
        assert service.describe_cluster("east") is not None

    def test_undefined_cluster_is_a_config_error(self, tmp_path: Path) -> None:
        path = write(tmp_path, "m.yaml", "clusters: {east: {bootstrap_servers: 'a:1'}}\nstreams: {s: {north: [t]}}\n")
        with pytest.raises(ConfigError, match="uses cluster 'north', which is not defined under `clusters`"):
            FileMetadataService(path).get_all_streams()


class TestPatternsAndPartitionSets:
    """Issue 27 item 2: a placement may be a topic pattern and/or topics with partition sets."""

    def test_pattern_and_partition_sets_parse_into_the_cluster_metadata(self, tmp_path: Path) -> None:
        text = (
            "clusters: {east: {bootstrap_servers: 'a:1'}, west: {bootstrap_servers: 'b:1'}}\n"
            "streams:\n"
            "  orders:\n"
            "    east: {pattern: 'orders-.*'}\n"
            "    west: {topics: {orders: [0, 2], audit: null}}\n"
            "  plain: {east: [plain]}\n"
        )
        streams = FileMetadataService(write(tmp_path, "m.yaml", text)).describe_streams(["orders", "plain"])
        east, west = streams["orders"].clusters["east"], streams["orders"].clusters["west"]
        assert (east.topic_pattern, east.topics, east.partitions) == ("orders-.*", frozenset(), {})
        assert west.topics == frozenset({"orders", "audit"})
        assert west.partitions == {"orders": frozenset({0, 2})}
        assert streams["plain"].clusters["east"].topic_pattern is None

    @pytest.mark.parametrize(
        ("placement", "expected"),
        [
            (
                "{pattern: 'orders-(.*'}",
                "streams.orders.east.pattern: invalid regular expression 'orders-(.*'",
            ),
            ("{topics: {orders: []}}", "topic(s) orders list no partitions; list some, or write null to read all"),
            ("{topics: {orders: [-1]}}", "streams.orders.east.topics"),
            ("{}", "stream 'orders' lists no topics on cluster 'east'"),
            ("{pattern: 'o.*', partitions: [1]}", "partitions"),
        ],
    )
    def test_bad_placements_name_the_key(self, tmp_path: Path, placement: str, expected: str) -> None:
        path = write(
            tmp_path,
            "m.yaml",
            f"clusters: {{east: {{bootstrap_servers: 'a:1'}}}}\nstreams: {{orders: {{east: {placement}}}}}\n",
        )
        with pytest.raises(ConfigError) as info:
            FileMetadataService(path).get_all_streams()
        assert expected in str(info.value)
        assert "m.yaml" in str(info.value)

    def test_expansion_adds_matching_topics_and_changes_the_fingerprint(self) -> None:
        east = ClusterMetadata(
            cluster_id="east", bootstrap_servers="a:1", topics=frozenset({"x"}), topic_pattern="orders-.*"
        )
        west = ClusterMetadata(cluster_id="west", bootstrap_servers="b:1", topics=frozenset({"w"}))
        snapshot = MetadataSnapshot(
            streams={"orders": KafkaStream(stream_id="orders", clusters={"east": east, "west": west})},
            fingerprint=metadata_fingerprint([]),
        )
        listed: list[str] = []

        def list_topics(cluster: ClusterMetadata) -> list[str]:
            listed.append(cluster.cluster_id)
            return ["orders-eu", "orders-us", "old-orders-eu", "orders"]

        expanded = expand_patterns(snapshot, list_topics, skip_unreachable=False)
        assert expanded.topics() == {
            ("east", "orders-eu"): ("orders",),
            ("east", "orders-us"): ("orders",),
            ("east", "x"): ("orders",),
            ("west", "w"): ("orders",),
        }
        assert listed == ["east"]  # only clusters with a pattern are listed
        fewer = expand_patterns(snapshot, lambda c: ["orders-eu"], skip_unreachable=False)
        assert fewer.fingerprint != expanded.fingerprint

    def test_an_unreachable_patterned_cluster_fails_or_is_recorded_when_skipped(self) -> None:
        east = ClusterMetadata(cluster_id="east", bootstrap_servers="a:1", topic_pattern="orders-.*")
        snapshot = MetadataSnapshot(streams={"orders": KafkaStream(stream_id="orders", clusters={"east": east})})

        def down(cluster: ClusterMetadata) -> list[str]:
            raise ClusterUnreachableError("listing topics: timed out", cluster_id=cluster.cluster_id)

        with pytest.raises(ClusterUnreachableError, match="timed out"):
            expand_patterns(snapshot, down, skip_unreachable=False)
        skipped = expand_patterns(snapshot, down, skip_unreachable=True)
        assert list(skipped.unresolved) == ["east"]
        assert "timed out" in skipped.unresolved["east"]


class TestSubscribers:
    def test_ids_and_full_match_regex(self, tmp_path: Path) -> None:
        service = FileMetadataService(write(tmp_path, "metadata.yaml", METADATA))
        assert set(StreamPatternSubscriber("orders.*").subscribe(service)) == {"orders", "orders-eu"}
        assert set(StreamPatternSubscriber("orders").subscribe(service)) == {"orders"}
        assert StreamPatternSubscriber("nothing-.*").subscribe(service) == {}
        with pytest.raises(UnknownStreamError, match=r"unknown stream id.*ordres.*knows: old-orders, orders") as info:
            StreamIdSubscriber(["ordres"]).subscribe(service)
        assert info.value.stream_ids == ["ordres"]

    def test_in_memory_service_failure_switch(self) -> None:
        s = KafkaStream(stream_id="a", clusters={"c": ClusterMetadata(cluster_id="c", bootstrap_servers="x:1")})
        service = InMemoryMetadataService([s])
        service.fail_next(2)
        for _ in range(2):
            with pytest.raises(MetadataServiceError):
                service.get_all_streams()
        assert service.get_all_streams() == {s}


class TestSecrets:
    def test_secret_reference_is_resolved_only_on_demand_and_never_shown(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("WEST_PW", "s3cret-value")
        secret_file = write(tmp_path, "pw", "file-secret\n")
        cluster = ClusterMetadata(
            cluster_id="west",
            bootstrap_servers="w:1",
            properties={"sasl.password": "${env:WEST_PW}", "ssl.key.password": f"${{file:{secret_file}}}"},
        )
        assert "s3cret-value" not in repr(cluster) + str(cluster) + cluster.model_dump_json()
        assert cluster.client_properties() == {"sasl.password": "s3cret-value", "ssl.key.password": "file-secret"}
        literal = ClusterMetadata(cluster_id="c", bootstrap_servers="x:1", properties={"sasl.password": "hunter2"})
        assert "hunter2" not in repr(literal) + str(literal)

    def test_unset_variable_names_reference_not_value(self) -> None:
        with pytest.raises(ConfigError, match="environment variable 'NOPE_PW' is not set"):
            resolve_properties({"sasl.password": "${env:NOPE_PW}"}, cluster_id="c")
