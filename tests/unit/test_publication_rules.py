"""Publications, pure parts: how rows become records, transactions of whole versions, where a run starts, and the
config's checks (offline, as ``check`` runs them)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pytest
import yaml

from dynamic_kafka.errors import PublicationError
from dynamic_kafka.operations.check import check_project
from dynamic_kafka.publish.config import PublicationConfig
from dynamic_kafka.publish.protocol import Move, Place, VersionChange, batches, plan_start
from dynamic_kafka.publish.records import plain_encoders, to_records

if TYPE_CHECKING:
    from pathlib import Path


def test_a_row_becomes_a_keyed_json_record_with_its_origin_and_timestamp() -> None:
    config = PublicationConfig.model_validate(
        {
            "id": "out",
            "table": "/lake/t",
            "stream": "s",
            "key": {"format": "string", "column": "k"},
            "timestamp_column": "ts",
        }
    )
    row = {"k": 7, "amount": b"\x01", "ts": datetime(2026, 1, 1, tzinfo=UTC)}
    (record,) = to_records(config, [row], 3, plain_encoders(config))
    assert record.key == b"7"
    assert record.value == b'{"k":7,"amount":"AQ==","ts":"2026-01-01T00:00:00+00:00"}'
    assert record.timestamp_ms == 1767225600000
    assert record.headers == (("dynamic-kafka.table", b"/lake/t"), ("dynamic-kafka.version", b"3"))


def test_a_column_the_config_names_but_the_table_lacks_is_refused_naming_both() -> None:
    config = PublicationConfig.model_validate(
        {"id": "out", "table": "/lake/t", "stream": "s", "value": {"format": "bytes", "column": "payload"}}
    )
    with pytest.raises(PublicationError) as raised:
        to_records(config, [{"body": b"x"}], 4, plain_encoders(config))
    assert "payload" in str(raised.value)
    assert "body" in str(raised.value)
    assert (raised.value.publication_id, raised.value.version) == ("out", 4)


def test_transactions_hold_whole_versions_up_to_the_row_limit() -> None:
    changes = [VersionChange(version=v, rows=n) for v, n in enumerate([2, 0, 3, 9, 1])]
    assert [[c.version for c in b] for b in batches(changes, 5)] == [[0, 1, 2], [3], [4]]


def test_a_run_starts_at_its_own_progress_or_after_what_the_previous_cluster_got() -> None:
    east, west = Place("east", "t"), Place("west", "t")
    first = plan_start(east, [], None, None, 4)
    assert first.next_version == 4
    assert first.move == Move(move_seq=0, cluster_id="east", topic="t", start_version=4)
    moves = [first.move]
    assert plan_start(east, moves, 9, None, 4) == (9, None)
    assert plan_start(east, moves, None, None, 4) == (4, None)  # a move recorded, then a crash before any commit
    moved = plan_start(west, moves, None, 9, 0)
    assert moved == (9, Move(move_seq=1, cluster_id="west", topic="t", start_version=9))


def test_check_refuses_a_transaction_timeout_above_the_brokers_default_maximum(tmp_path: Path) -> None:
    (tmp_path / "metadata.yaml").write_text("clusters: {}\nstreams: {}\n")
    config = {
        "metadata_service": {"type": "file", "path": "metadata.yaml"},
        "publications": [{"id": "out", "table": "t", "stream": "s", "transaction_timeout_ms": 3_600_000}],
    }
    (tmp_path / "dynamic_kafka.yaml").write_text(yaml.safe_dump(config))
    report = check_project(tmp_path / "dynamic_kafka.yaml")
    assert [p.location for p in report.problems] == ["publications[0].transaction_timeout_ms"]
    assert "900000" in report.problems[0].message


def test_a_version_that_removed_rows_is_refused_and_a_compaction_publishes_nothing(tmp_path: Path) -> None:
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    from dynamic_kafka.publish.source import DeltaVersionSource

    for ids in ([1, 2], [3]):
        write_deltalake(str(tmp_path), pa.table({"id": pa.array(ids, pa.int64())}), mode="append")
    DeltaTable(str(tmp_path)).optimize.compact()
    source = DeltaVersionSource(PublicationConfig(id="out", table=str(tmp_path), stream="s"))
    assert [(c.version, c.rows) for c in source.changes(0, 2)] == [(0, 2), (1, 1), (2, 0)]
    assert sorted(r.value or b"" for r in source.records(1)) == [b'{"id":3}']

    DeltaTable(str(tmp_path)).delete("id = 1")
    with pytest.raises(PublicationError) as raised:
        source.changes(3, 3)
    assert raised.value.version == 3
    assert "DELETE" in str(raised.value)


def test_a_change_data_feed_table_is_published_by_its_changes_with_the_change_type_in_a_header(
    tmp_path: Path,
) -> None:
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    from dynamic_kafka.publish.source import DeltaVersionSource

    rows = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "v": ["a", "b", "c"]})
    write_deltalake(str(tmp_path), rows, configuration={"delta.enableChangeDataFeed": "true"})
    DeltaTable(str(tmp_path)).update(predicate="id = 2", updates={"v": "'B'"})
    DeltaTable(str(tmp_path)).delete("id = 3")
    config = PublicationConfig(id="out", table=str(tmp_path), stream="s", key={"format": "string", "column": "id"})
    source = DeltaVersionSource(config)
    assert [(c.version, c.rows) for c in source.changes(0, 2)] == [(0, 3), (1, 1), (2, 1)]

    def published(version: int) -> list[tuple[bytes | None, bytes | None, bytes]]:
        return sorted((r.key, r.value, dict(r.headers)["dynamic-kafka.change"]) for r in source.records(version))

    assert published(0) == [(b"1", b'{"id":1,"v":"a"}', b"insert"), (b"2", b'{"id":2,"v":"b"}', b"insert"),
                            (b"3", b'{"id":3,"v":"c"}', b"insert")]  # fmt: skip
    assert published(1) == [(b"2", b'{"id":2,"v":"B"}', b"update_postimage")]
    assert published(2) == [(b"3", b'{"id":3,"v":"c"}', b"delete")]
    with_preimages = DeltaVersionSource(config.model_copy(update={"change_types": ("update_preimage",)}))
    assert [(c.version, c.rows) for c in with_preimages.changes(1, 2)] == [(1, 1), (2, 0)]
    assert [dict(r.headers)["dynamic-kafka.version"] for r in with_preimages.records(1)] == [b"1"]


def test_the_dry_run_text_names_where_which_versions_and_the_first_records() -> None:
    from dynamic_kafka.cli.publish import format_plan
    from dynamic_kafka.publish.publisher import PublicationPlan

    where = {"publication_id": "out", "table": "/lake/t", "stream_id": "s", "cluster_id": "west", "topic": "t2"}
    versions = (VersionChange(version=3, rows=2), VersionChange(version=4, rows=0))
    sample = ({"key": "k", "value": '{"id":1}', "timestamp_ms": None},)
    plan = PublicationPlan.model_validate(
        {
            **where,
            "next_version": 3,
            "latest_version": 4,
            "versions": versions,
            "transactions": 1,
            "moves_to_cluster": True,
            "sample": sample,
        }
    )
    assert format_plan(plan).splitlines() == [
        "publication out: /lake/t -> stream s on west/t2, moving the writes there",
        "  would publish versions 3..4: 2 rows in 1 transaction(s)",
        "  version 3: 2 rows",
        "  version 4: 0 rows",
        '  record: {"key": "k", "value": "{\\"id\\":1}", "timestamp_ms": null}',
    ]


def test_check_refuses_a_publication_stream_that_is_unknown_or_not_one_topic_on_one_cluster(tmp_path: Path) -> None:
    metadata = {
        "clusters": {"east": {"bootstrap_servers": "e:9092"}, "west": {"bootstrap_servers": "w:9092"}},
        "streams": {"one": {"east": ["t"]}, "two": {"east": ["t"], "west": ["t2"]}},
    }
    (tmp_path / "metadata.yaml").write_text(yaml.safe_dump(metadata))
    config = {
        "metadata_service": {"type": "file", "path": "metadata.yaml"},
        "publications": [
            {"id": stream, "table": f"t-{stream}", "stream": stream} for stream in ("one", "two", "three")
        ],
    }
    (tmp_path / "dynamic_kafka.yaml").write_text(yaml.safe_dump(config))
    report = check_project(tmp_path / "dynamic_kafka.yaml")
    assert [(p.location, p.message) for p in report.problems] == [
        (
            "publications[1].stream",
            "stream 'two' is east: t; west: t2; a publication writes to one topic on one cluster: give it a stream "
            "of its own",
        ),
        ("publications[2].stream", "unknown stream 'three'; the metadata file defines: one, two"),
    ]


def test_a_pending_plan_is_read_back_from_the_progress_metadata_and_only_from_a_plan_entry() -> None:
    from dynamic_kafka.publish.slices import Slice, SlicePlan, plan_of

    plan = SlicePlan(slices=(Slice(5, 7), Slice(8, 8), Slice(9, 12)))
    assert plan_of(json.dumps({"table": "t", "version": 4, "plan": plan.encode()})) == plan
    assert (plan.start, plan.next_version) == (5, 13)
    # A commit of the one-transaction path, an older or foreign metadata, none at all: no plan pending.
    for metadata in ('{"table": "t", "version": 4}', "zombie", "", '["plan"]'):
        assert plan_of(metadata) is None
