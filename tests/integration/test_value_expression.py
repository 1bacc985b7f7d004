"""``value: {format: expression}``: a user's Spark SQL expression over the record's columns is the value decoder, part
of the run's one read; a non-null value it cannot decode (a null result) is a dead letter with its reason."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from deltalake import DeltaTable

from devtools.testing.kafka import Record, produce
from dynamic_kafka.config.models import PipelineConfig
from dynamic_kafka.decoding.formats import VALUE_EXPRESSION_NULL
from dynamic_kafka.errors import SchemaMismatchError
from dynamic_kafka.sink.schema_check import written_schema
from tests.support.metadata_changes import orders_stream

if TYPE_CHECKING:
    from pathlib import Path

    from devtools.local_kafka import ClusterEndpoint

pytestmark = pytest.mark.integration

# The value as a number, times the number in the record's first header when it has one.
SCALED = (
    "try_cast(cast(value AS STRING) AS INT) "
    "* coalesce(try_cast(cast(try_element_at(headers, 1).value AS STRING) AS INT), 1)"
)


def test_an_expression_decodes_values_with_their_headers_and_a_null_result_is_a_dead_letter(
    kafka_clusters: dict[str, ClusterEndpoint], spark: Any, tmp_path: Path
) -> None:
    h, topics = orders_stream(
        tmp_path / "run", kafka_clusters, spark, {"east": 1}, value={"format": "expression", "expression": SCALED}
    )
    east, topic = kafka_clusters["east"].bootstrap_servers, topics["east"]
    produce(
        east,
        topic,
        [
            Record(b"7"),
            Record(b"5", headers=(("scale", b"10"),)),
            Record(b"x"),  # no number: the expression gives null
            Record(None),  # a tombstone stays null
        ],
    )

    assert h.face().run().records == 4

    landed = DeltaTable(str(h.sink_path)).to_pyarrow_table(columns=["offset", "value"]).to_pylist()
    assert sorted((r["offset"], r["value"]) for r in landed) == [(0, 7), (1, 50), (3, None)]
    dead = DeltaTable(str(tmp_path / "run" / "sink_dead_letter")).to_pyarrow_table().to_pylist()
    assert [(r["offset"], r["value"], r["error"]) for r in dead] == [(2, b"x", VALUE_EXPRESSION_NULL)]


def test_an_expression_that_names_what_a_record_lacks_is_refused_before_anything_is_planned(spark: Any) -> None:
    pipeline = PipelineConfig.model_validate(
        {
            "id": "p",
            "streams": ["s"],
            "sink": {"path": "/nonexistent/sink"},
            "value": {"format": "expression", "expression": "cast(payload AS STRING)"},
        }
    )
    with pytest.raises(SchemaMismatchError, match=r"value expression 'cast\(payload AS STRING\)' is not a Spark SQL"):
        written_schema(spark, pipeline)
