"""``json_strict``: unknown fields and trailing data are dead-lettered instead of silently dropped (issue 11, hole 8).

Decoding is pure Spark column expressions, so a frame built in memory exercises exactly what a run does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dynamic_kafka.config.models import PipelineConfig
from dynamic_kafka.decoding.formats import (
    VALUE_NOT_JSON,
    VALUE_TRAILING_DATA,
    VALUE_UNKNOWN_FIELDS,
    value_type_mismatch,
)
from dynamic_kafka.decoding.prepared import value_column_decoding
from dynamic_kafka.spark.schema import DECODE_ERROR

pytestmark = pytest.mark.integration

VALUES: list[tuple[str, str | None, str | None]] = [
    # (case, value, error under json_strict)
    ("exact", '{"id": 1, "n": {"a": 2}}', None),
    ("missing-field", '{"id": 1}', None),
    ("whitespace-after", '{"id": 1}  \n', None),
    ("tombstone", None, None),
    ("unknown-top-level", '{"id": 1, "amount": 5}', VALUE_UNKNOWN_FIELDS),
    ("unknown-nested", '{"id": 1, "n": {"a": 2, "b": 3}}', VALUE_UNKNOWN_FIELDS),
    ("other-case", '{"ID": 1}', VALUE_UNKNOWN_FIELDS),
    ("second-object", '{"id": 1} {"id": 2}', VALUE_TRAILING_DATA),
    ("garbage-after", '{"id": 1}garbage', VALUE_TRAILING_DATA),
    ("closes-array-wrapper", '{"id": 1}]x', VALUE_TRAILING_DATA),
    ("closes-object-wrapper", '{"id": 1},"e":1}x', VALUE_TRAILING_DATA),
    ("not-json", "nope", VALUE_NOT_JSON),
    ("wrong-type", '{"id": "x"}', value_type_mismatch("id", "int")),
    ("wrong-nested-type", '{"id": 1, "n": {"a": "y"}}', value_type_mismatch("n", "struct<a:int>")),
]
MALFORMED_OR_MISMATCHED = {VALUE_NOT_JSON, value_type_mismatch("id", "int"), value_type_mismatch("n", "struct<a:int>")}


def decoded_errors(spark: Any, strict: bool) -> dict[str, str | None]:
    pipeline = PipelineConfig.model_validate(
        {
            "id": "p",
            "streams": ["s"],
            "sink": {"path": str(Path("/nonexistent/sink"))},
            "value": {"format": "json", "schema": "id INT, n STRUCT<a: INT>"},
            "json_strict": strict,
        }
    )
    frame = spark.createDataFrame(
        [(case, None, None if v is None else bytearray(v.encode())) for case, v, _ in VALUES],
        "case STRING, key BINARY, value BINARY",
    )
    rows = value_column_decoding(pipeline).decode(frame).select("case", DECODE_ERROR, "value").collect()
    for row in rows:
        assert (row["value"] is None) == (row[DECODE_ERROR] is not None or row["case"] == "tombstone")
    return {row["case"]: row[DECODE_ERROR] for row in rows}


def test_json_strict_dead_letters_unknown_fields_and_trailing_data(spark: Any) -> None:
    assert decoded_errors(spark, strict=True) == {case: error for case, _, error in VALUES}


def test_the_default_is_lenient_like_from_json(spark: Any) -> None:
    expected = {case: (error if error in MALFORMED_OR_MISMATCHED else None) for case, _, error in VALUES}
    assert decoded_errors(spark, strict=False) == expected
