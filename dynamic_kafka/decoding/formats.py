"""The key and the ``value`` column of the bytes, string and json formats as Spark column expressions (no Python
UDFs, nothing collected).

Invariants:

- A record is either decoded or marked undecodable with an error text; it never vanishes and is never silently
  altered. In particular invalid UTF-8 is *not* turned into U+FFFD replacement characters: ``string`` (and
  ``json``, which must be UTF-8 per RFC 8259) values and ``string`` keys are checked with Spark's
  ``is_valid_utf8`` first.
- ``json`` values are parsed with ``from_json`` into one ``value`` struct column with the pipeline's
  ``value.schema`` (kept nested rather than flattened, so a JSON field named like a Kafka column, e.g.
  ``topic`` or ``offset``, cannot collide; select ``value.*`` to flatten). A value is undecodable when it is not
  valid UTF-8, when ``from_json`` returns null for it (e.g. an empty value), or when Spark's corrupt-record marker
  is set (not JSON, not an object, or a field whose value does not fit its type, e.g. ``"x"`` for an INT: then the
  reason names the top-level field and its type). Fields
  missing from the JSON become nulls. By default (lenient, as Spark's ``from_json``) JSON fields absent from the
  schema are ignored and text after the first JSON object is ignored (Spark's parser stops there). With
  ``json_strict: true`` such a value is undecodable instead (dead-lettered, or the run fails under
  ``on_decode_error: fail``): a field of an object (top level or a nested STRUCT field) that the schema does not
  name, matched case-sensitively as ``from_json`` matches, or anything but whitespace after the JSON value.
  Objects inside arrays and maps are not checked for unknown fields.
- A null key or value (a tombstone) is decodable and stays null.

:meth:`dynamic_kafka.decoding.prepared.PreparedDecoding.decode` composes these columns with the registry formats'
(:mod:`dynamic_kafka.decoding.registry_formats`) into one frame.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dynamic_kafka.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructField, StructType

    from dynamic_kafka.config.models import PipelineConfig, ValueFormatConfig

KEY_NOT_UTF8 = "key is not valid UTF-8"
VALUE_NOT_UTF8 = "value is not valid UTF-8"
VALUE_NOT_JSON = "value is not a JSON object (malformed JSON, an array, a scalar or empty)"
VALUE_TRAILING_DATA = "value has data after the JSON object (json_strict)"
VALUE_UNKNOWN_FIELDS = "value has fields not in value_schema (json_strict)"
VALUE_EXPRESSION_NULL = "value_expression gave null for a non-null value"

_CORRUPT_FIELD = "_dk_corrupt_record"
EXPRESSION_VALUE = "_dk_expression_value"
"""The column ``value.expression``'s result is computed into while the record's own ``key`` and ``value`` are still
named so (the sink leaves ``_dk_`` columns out)."""


def value_type_mismatch(field: str, data_type: str) -> str:
    """The dead-letter reason of a JSON object whose top-level ``field`` does not fit its ``value.schema`` type
    (Spark's simple string, e.g. ``int`` or ``struct<a:int>``).

    Example:
        >>> value_type_mismatch("id", "int")
        "value field 'id' does not fit its type int in value_schema"
    """
    return f"value field {field!r} does not fit its type {data_type} in value_schema"


def can_fail(pipeline: PipelineConfig) -> bool:
    """Whether any record can be undecodable under this pipeline's formats (``bytes`` never fails)."""
    formats = (pipeline.value, *pipeline.formats.values())
    return any(f.format != "bytes" for f in formats) or pipeline.key.format != "bytes"


def json_schema(value_schema: str) -> StructType:
    """Parses the pipeline's ``value.schema`` (Spark DDL) into a struct type. Needs a Spark session.

    Raises:
        ConfigError: the DDL does not parse or is not a struct; the message says what Spark said.
    """
    from pyspark.errors import PySparkException
    from pyspark.sql.types import DataType, StructType

    try:
        parsed = DataType.fromDDL(value_schema)
    except PySparkException as e:
        first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(
            f"value schema {value_schema!r} is not a valid Spark DDL schema: {first_line}",
            hint="Write it like 'id BIGINT, name STRING, tags ARRAY<STRING>'.",
        ) from e
    if not isinstance(parsed, StructType):
        raise ConfigError(
            f"value schema {value_schema!r} is a {parsed.simpleString()}, not a list of fields.",
            hint="JSON values must be objects; write the schema as 'field TYPE, ...'.",
        )
    return parsed


def value_column(
    raw_value: Column, fmt: ValueFormatConfig, *, strict: bool = False
) -> tuple[Column, list[tuple[Column, str]]]:
    """The ``value`` column of a bytes/string/json/expression format and its ``(is-bad, reason)`` checks, in order.
    An expression's result must already be in :data:`EXPRESSION_VALUE` (:func:`with_expression_value`).

    Raises:
        ConfigError: ``value.schema`` is invalid (json).
    """
    from pyspark.sql import functions as sf

    if fmt.format == "bytes":
        return raw_value, []
    if fmt.format == "expression":
        result = sf.col(EXPRESSION_VALUE)
        return result, [(raw_value.isNotNull() & result.isNull(), VALUE_EXPRESSION_NULL)]
    text, utf8_bad = utf8_text(raw_value)
    if fmt.format == "string":
        return text, [(utf8_bad, VALUE_NOT_UTF8)]
    assert fmt.schema_ddl is not None  # guaranteed by ValueFormatConfig's validator
    schema = json_schema(fmt.schema_ddl)
    field = _CORRUPT_FIELD
    while field in schema.fieldNames():
        field = "_" + field
    parsed = sf.from_json(
        text,
        schema.add(field, "string"),
        {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": field},
    )
    json_bad = text.isNotNull() & (parsed.isNull() | parsed.getField(field).isNotNull())
    # Which field of an object does not fit: each parsed alone. Behind json_bad, so only bad records pay for it.
    is_object = sf.json_object_keys(text).isNotNull()
    mismatches = [
        (
            json_bad & is_object & _corrupt_alone(text, f, field),
            value_type_mismatch(f.name, f.dataType.simpleString()),
        )
        for f in schema.fields
        if f.name != field  # StructType.add above added the marker to `schema` itself
    ]
    trailing_bad, unknown_bad = sf.lit(False), sf.lit(False)
    if strict:
        trailing_bad = text.isNotNull() & ~_single_value(text)
        unknown_bad = text.isNotNull() & _unknown_fields(text, schema)
    checks = [
        (utf8_bad, VALUE_NOT_UTF8),
        *mismatches,
        (json_bad, VALUE_NOT_JSON),
        (trailing_bad, VALUE_TRAILING_DATA),
        (unknown_bad, VALUE_UNKNOWN_FIELDS),
    ]
    return sf.when(~(json_bad | trailing_bad | unknown_bad), parsed.dropFields(field)), checks


def with_expression_value(frame: DataFrame, fmt: ValueFormatConfig) -> DataFrame:
    """``frame`` with ``value.expression``'s result as :data:`EXPRESSION_VALUE` (unchanged for other formats).

    Evaluated in the same projection as every other column, so it is part of the run's one read: nothing is read
    twice and a record it cannot turn into a value is routed like any undecodable one.
    """
    from pyspark.sql import functions as sf

    if fmt.expression is None:
        return frame
    return frame.withColumn(EXPRESSION_VALUE, sf.expr(fmt.expression))


def _corrupt_alone(text: Column, struct_field: StructField, corrupt: str) -> Column:
    """Whether ``text`` parsed with a schema of ``struct_field`` alone is marked corrupt: that field's value does
    not fit its type.
    """
    from pyspark.sql import functions as sf
    from pyspark.sql.types import StructType

    alone = StructType([struct_field]).add(corrupt, "string")
    parsed = sf.from_json(text, alone, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": corrupt})
    return parsed.isNull() | parsed.getField(corrupt).isNotNull()


def utf8_text(raw: Column) -> tuple[Column, Column]:
    """``(decoded text, is-invalid flag)`` for a binary column; null stays null and is valid."""
    from pyspark.sql import functions as sf

    invalid = raw.isNotNull() & ~sf.is_valid_utf8(raw)
    return sf.when(~invalid, raw.cast("string")), invalid


def _single_value(text: Column) -> Column:
    """Whether ``text`` is exactly one JSON value (whitespace around it allowed).

    Spark's JSON functions stop after the first value and ignore the rest, so the text is parsed inside two
    wrappers: ``[text]`` must be an array of exactly one element, and ``{"v":text,"e":1}`` an object. Whatever
    follows the first value breaks one of them: another value or garbage breaks both; a ``]`` that closes the
    array wrapper early breaks the object wrapper, and ``,...}`` that closes the object wrapper early breaks the
    array wrapper (or makes it longer than one element).
    """
    from pyspark.sql import functions as sf

    as_array = sf.json_array_length(sf.concat(sf.lit("["), text, sf.lit("]")))
    as_object = sf.json_object_keys(sf.concat(sf.lit('{"v":'), text, sf.lit(',"e":1}')))
    return sf.coalesce((as_array == 1) & as_object.isNotNull(), sf.lit(False))


def _unknown_fields(text: Column, schema: StructType) -> Column:
    """Whether the JSON object ``text`` (or an object in one of its STRUCT fields, recursively) has a field the
    schema does not name. Null or absent objects have none.
    """
    from pyspark.sql import functions as sf
    from pyspark.sql.types import StructType

    names = (
        sf.array(*[sf.lit(n) for n in schema.fieldNames()]) if schema.fieldNames() else sf.array().cast("array<string>")
    )
    keys = sf.coalesce(sf.json_object_keys(text), sf.array().cast("array<string>"))
    found = sf.size(sf.array_except(keys, names)) > 0
    for struct_field in schema.fields:
        if isinstance(struct_field.dataType, StructType) and "'" not in struct_field.name:
            nested = sf.get_json_object(text, f"$['{struct_field.name}']")
            found = found | sf.coalesce(_unknown_fields(nested, struct_field.dataType), sf.lit(False))
    return found
