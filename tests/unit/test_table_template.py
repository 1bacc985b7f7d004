"""A table per stream (issue 27, item 3): the ``{stream}`` template of ``sink.path``, its checks and where each
stream's tables and the pipeline's state go. No I/O beyond a config file.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pytest

from dynamic_kafka.cli.backfill import format_backfill
from dynamic_kafka.config.loader import load_project_config
from dynamic_kafka.config.models import PipelineConfig
from dynamic_kafka.config.table_template import check_stream_id, fill, placeholders, template_root
from dynamic_kafka.errors import ConfigError
from dynamic_kafka.model.plan import Split, TopicPartition
from dynamic_kafka.model.snapshots import PartitionState, StateSnapshot
from dynamic_kafka.model.summary import RunSummary, StreamTable
from dynamic_kafka.plan.tables import pinned_to_tables
from dynamic_kafka.sink.commits import AddedFile, RunFiles
from dynamic_kafka.sink.metrics import WriteResult
from dynamic_kafka.sink.per_stream import combined, known_streams, run_streams
from dynamic_kafka.storage import parse_location
from tests.support.builders import a_split

if TYPE_CHECKING:
    from pathlib import Path


def project(tmp_path: Path, pipeline_yaml: str) -> Path:
    path = tmp_path / "dynamic_kafka.yaml"
    path.write_text(f"metadata_service: {{type: file, path: metadata.yaml}}\npipelines:\n{pipeline_yaml}")
    return path


def split(stream_ids: tuple[str, ...], topic: str = "t") -> Split:
    return a_split(topic=topic, streams=stream_ids, bootstrap="127.0.0.1:9092")


class TestTemplate:
    def test_a_template_names_each_streams_table_and_dead_letter_table_and_one_state_beside_them(
        self, tmp_path: Path
    ) -> None:
        path = project(tmp_path, "  - id: p\n    stream_pattern: 'orders-.*'\n    sink: {path: 'data/{stream}'}\n")
        pipeline = load_project_config(path).pipeline("p")
        assert pipeline.sink.per_stream
        eu = pipeline.for_stream("orders-eu")
        assert eu.sink_table.location.local_path == tmp_path / "data/orders-eu"
        assert eu.dead_letter_table.location.local_path == tmp_path / "data/orders-eu_dead_letter"
        assert eu.resolved_state_path.local_path == tmp_path / "data/_p_state"
        assert pipeline.resolved_state_path == eu.resolved_state_path
        assert not eu.sink.per_stream  # a stream's view is one table

    def test_object_store_templates_and_explicit_dead_letter_templates_fill_per_stream(self) -> None:
        pipeline = PipelineConfig.model_validate(
            {
                "id": "p",
                "stream_pattern": ".*",
                "sink": {"path": "s3://lake/raw/{stream}/v1", "dead_letter_path": "s3://lake/bad/{stream}"},
            }
        )
        us = pipeline.for_stream("us")
        assert (us.sink_table.location.uri, us.dead_letter_table.location.uri) == (
            "s3://lake/raw/us/v1",
            "s3://lake/bad/us",
        )
        assert pipeline.resolved_state_path.uri == "s3://lake/raw/_p_state"
        assert template_root(parse_location("s3://lake/{stream}")).uri == "s3://lake"

    def test_a_plain_path_is_one_table_as_before(self) -> None:
        pipeline = PipelineConfig.model_validate({"id": "p", "streams": ["a"], "sink": {"path": "/d/orders"}})
        assert not pipeline.sink.per_stream
        assert pipeline.for_stream("a") is pipeline
        assert pipeline.resolved_state_path.uri == "/d/orders_state"

    def test_a_one_table_operation_on_a_template_pipeline_is_refused_with_the_way_out(self) -> None:
        pipeline = PipelineConfig.model_validate({"id": "p", "stream_pattern": ".*", "sink": {"path": "/d/{stream}"}})
        with pytest.raises(ConfigError, match="lands a table per stream") as refused:
            _ = pipeline.sink_table
        assert "plain sink.path" in (refused.value.hint or "")
        assert pipeline.tables()["sink"].location.uri == "/d/{stream}"  # where the tables are (bucket checks)

    @pytest.mark.parametrize(
        ("sink", "expected"),
        [
            ("{path: 'data/{streams}'}", r"unknown placeholder \{streams\}; the only placeholder is \{stream\}"),
            ("{path: 'data/{stream_id}'}", r"unknown placeholder \{stream_id\}"),
            ("{path: 'data/{}'}", r"unknown placeholder \{\}"),
            ("{path: 'data/{stream:>10}'}", r"unknown placeholder \{stream:>10\}"),
            ("{path: 'data/{stream'}", r"unmatched brace"),
            ("{path: 'data/stream}'}", r"unmatched brace"),
            (
                "{path: data/orders, dead_letter_path: 'bad/{stream}'}",
                r"dead_letter_path .* has \{stream\} but path .* has not: write \{stream\} in path too",
            ),
            (
                "{path: 'data/{stream}', dead_letter_path: bad/letters}",
                r"gives each stream its own table, so dead_letter_path must too",
            ),
        ],
    )
    def test_bad_templates_are_refused_naming_file_key_and_fix(self, tmp_path: Path, sink: str, expected: str) -> None:
        path = project(tmp_path, f"  - id: p\n    stream_pattern: '.*'\n    sink: {sink}\n")
        with pytest.raises(ConfigError, match=expected) as refused:
            load_project_config(path)
        assert str(path) in str(refused.value)
        assert "pipelines[0].sink" in str(refused.value)

    def test_a_state_path_template_and_a_bootstrap_into_stream_tables_are_refused(self, tmp_path: Path) -> None:
        path = project(
            tmp_path, "  - id: p\n    streams: [a]\n    sink: {path: d/a}\n    state_path: 'd/{stream}_state'\n"
        )
        with pytest.raises(ConfigError, match=r"state_path .* has \{stream\}: a pipeline keeps one state") as refused:
            load_project_config(path)
        assert "or write {stream} in sink.path for a table per stream" in str(refused.value)
        path = project(
            tmp_path,
            "  - id: p\n    streams: [a]\n    sink: {path: 'd/{stream}'}\n"
            "    bootstrap: {path: archive, format: parquet, until: '2026-01-01T00:00:00Z'}\n",
        )
        with pytest.raises(ConfigError, match="bootstrap lands an archive into one table"):
            load_project_config(path)

    def test_a_template_sink_takes_backfill_windows(self, tmp_path: Path) -> None:
        path = project(
            tmp_path,
            "  - id: p\n    stream_pattern: 'orders-.*'\n    sink: {path: 'd/{stream}'}\n"
            "    orchestration: {backfill: {start: '2026-01-01T00:00:00Z', granularity: daily}}\n",
        )
        pipeline = load_project_config(path).pipeline("p")
        assert pipeline.orchestration.backfill is not None
        assert pipeline.sink.per_stream

    def test_listed_streams_that_cannot_name_a_folder_are_refused_when_the_config_is_loaded(
        self, tmp_path: Path
    ) -> None:
        path = project(tmp_path, "  - id: p\n    streams: [eu, 'us/east']\n    sink: {path: 'd/{stream}'}\n")
        with pytest.raises(ConfigError, match=r"stream 'us/east' cannot name a table of sink\.path .*it holds '/'"):
            load_project_config(path)


class TestStreamIds:
    @pytest.mark.parametrize("stream_id", ["orders", "orders-eu", "Orders_2026.v1", "9lives"])
    def test_path_safe_ids_fill_the_template(self, stream_id: str) -> None:
        check_stream_id(stream_id, template="/d/{stream}")
        assert fill(parse_location("/d/{stream}"), stream_id).uri == f"/d/{stream_id}"

    @pytest.mark.parametrize(
        ("stream_id", "why"),
        [
            ("a/b", "it holds '/'"),
            ("a b", "it holds ' '"),
            ("eu:1", "it holds ':'"),
            ("100%", "it holds '%'"),
            ("..", "does not start with a letter or digit"),
            (".hidden", "does not start with a letter or digit"),
            ("_p_state", "does not start with a letter or digit"),
            ("x" * 256, "longer than 255 characters"),
        ],
    )
    def test_ids_a_path_cannot_take_are_refused_naming_the_stream_and_the_fix(self, stream_id: str, why: str) -> None:
        with pytest.raises(ConfigError, match=why) as refused:
            fill(parse_location("s3://lake/{stream}"), stream_id)
        assert repr(stream_id) in str(refused.value)
        assert "Rename the stream" in (refused.value.hint or "")

    def test_placeholders_lists_the_stream_placeholder_only(self) -> None:
        assert placeholders("/d/{stream}/x/{stream}") == ["stream", "stream"]
        assert placeholders("/d/orders") == []


class TestRunTables:
    def test_a_run_writes_the_tables_of_its_splits_first_streams(self) -> None:
        # A topic two subscribed streams share lands in the first one's table, as its `stream` column says.
        splits = [split(("b",), "t1"), split(("a", "b"), "t2"), split(("c",), "t3")]
        assert run_streams(splits) == ["a", "b", "c"]

    def test_the_state_knows_its_partitions_first_streams(self) -> None:
        key = TopicPartition(cluster_id="east", topic="t", partition=0)
        row = PartitionState(
            cluster_id="east", topic="t", partition=0, next_offset=3, stream_ids=("a", "z"), updated_run_seq=1
        )
        assert known_streams(StateSnapshot(pipeline_id="p", partitions={key: row})) == ["a"]

    def test_a_partition_keeps_the_stream_it_landed_under_and_a_new_partition_joins_its_topics_table(self) -> None:
        landed = PartitionState(
            cluster_id="east", topic="t", partition=0, next_offset=3, stream_ids=("b",), updated_run_seq=1
        )
        state = StateSnapshot(pipeline_id="p", partitions={landed.key: landed})
        new_partition = split(("a", "b")).model_copy(update={"partition": 1})
        pinned = pinned_to_tables([split(("a", "b")), new_partition, split(("a", "c"), "t2")], state)
        assert [(s.partition, s.topic, s.stream_ids) for s in pinned] == [
            (0, "t", ("b", "a")),  # a stream sorting first now lists the topic: its table stays b's
            (1, "t", ("b", "a")),
            (0, "t2", ("a", "c")),  # a topic new to the state: the metadata's first stream
        ]

    def test_a_partition_a_backfill_merged_before_any_run_keeps_that_table(self) -> None:
        # Hole 35.16: t's partition 0 was merged into b's table by a backfill (no run has committed t); a stream
        # sorting first now lists t. Partition 0 and a new partition 1 both stay in b's table, which is known.
        merged = TopicPartition(cluster_id="east", topic="t", partition=0)
        state = StateSnapshot(pipeline_id="p", backfilled={merged: 3}, backfill_streams={merged: "b"})
        new_partition = split(("a", "b")).model_copy(update={"partition": 1})
        pinned = pinned_to_tables([split(("a", "b")), new_partition], state)
        assert [(s.partition, s.stream_ids) for s in pinned] == [(0, ("b", "a")), (1, ("b", "a"))]
        assert known_streams(state) == ["b"]

    def test_tables_results_combine_into_the_runs_result(self) -> None:
        one = WriteResult(records=3, bytes=30, per_topic={("east", "t1"): (3, 30)}, sink_records=2, dead_letters=1)
        two = WriteResult(records=1, bytes=5, per_topic={("east", "t2"): (1, 5)}, sink_records=1, dead_letters=0)
        both = combined([one, two])
        assert (both.records, both.bytes, both.sink_records, both.dead_letters) == (4, 35, 3, 1)
        assert both.per_topic == {("east", "t1"): (3, 30), ("east", "t2"): (1, 5)}
        assert not both.already_committed
        again = combined([one.model_copy(update={"already_committed": True})])
        assert again.already_committed

    def test_a_backfill_of_stream_tables_reports_each_table_and_its_version(self) -> None:
        summary = RunSummary(
            pipeline_id="p",
            run_seq=1,
            status="committed",
            records=3,
            stream_tables=(
                StreamTable(stream_id="eu", path="d/eu", records=2, sink_version=4),
                StreamTable(stream_id="us", path="d/us", records=1, sink_version=2),
            ),
        )
        start = datetime(2026, 1, 1, tzinfo=UTC)
        text = format_backfill(summary, start, start + timedelta(hours=1))
        assert "3 records read, 0 rows inserted (every record was in the sink already)" in text
        assert "sink version" not in text
        assert "  stream eu -> d/eu: 2 records (table version 4)" in text.splitlines()
        assert "  stream us -> d/us: 1 records (table version 2)" in text.splitlines()

    def test_the_tables_range_counts_and_landed_files_combine_and_a_table_that_read_nothing_leaves_none(self) -> None:
        # Each table's write counts its own stream's ranges and names the files its commit added; the run's
        # completeness needs them all, so a table found holding the run already (nothing read) leaves it uncounted.
        files_a = RunFiles(table="/d/a", version=3, files=(AddedFile(path="part-0.parquet"),))
        files_b = RunFiles(table="/d/b", version=1, files=(AddedFile(path="part-1.parquet"),))
        one = WriteResult(
            records=2,
            bytes=2,
            sink_records=2,
            dead_letters=0,
            read_per_range={("east", "t1", 0): 2},
            landed_files=(files_a,),
        )
        two = WriteResult(
            records=1,
            bytes=1,
            sink_records=1,
            dead_letters=0,
            read_per_range={("east", "t2", 0): 1},
            landed_files=(files_b,),
        )
        both = combined([one, two])
        assert both.read_per_range == {("east", "t1", 0): 2, ("east", "t2", 0): 1}
        assert both.landed_files == (files_a, files_b)
        found = WriteResult(records=1, bytes=0, sink_records=1, dead_letters=0, already_committed=True)
        assert combined([one, found]).read_per_range is None
