"""Column types as a data engineer writes them (Spark SQL's names): ``bigint``, ``array<string>``,
``struct<order: int, placed_on: string>``, for the sink's column schema that Dagster's asset page shows.

delta-rs names Delta's types (``long``, ``integer``); its Arrow view prints ``arro3.core.DataType<Int64>``.
"""

from __future__ import annotations

from typing import Any

# Delta's primitive names that Spark SQL spells differently; the rest (string, binary, boolean, float, double,
# date, timestamp, timestamp_ntz, decimal(p,s)) are the same in both.
_SPARK_NAMES = {"long": "bigint", "integer": "int", "short": "smallint", "byte": "tinyint"}


def spark_type_name(delta_type: Any) -> str:
    """The Spark SQL name of a delta-rs type (``PrimitiveType``, ``StructType``, ``ArrayType`` or ``MapType``).

    Example:
        >>> from deltalake.schema import ArrayType, Field, PrimitiveType, StructType
        >>> spark_type_name(StructType([Field("order", PrimitiveType("integer")), Field("tags", ArrayType(
        ...     PrimitiveType("string")))]))
        'struct<order: int, tags: array<string>>'
    """
    kind: str = delta_type.type
    if kind == "struct":
        return "struct<" + ", ".join(f"{f.name}: {spark_type_name(f.type)}" for f in delta_type.fields) + ">"
    if kind == "array":
        return f"array<{spark_type_name(delta_type.element_type)}>"
    if kind == "map":
        return f"map<{spark_type_name(delta_type.key_type)}, {spark_type_name(delta_type.value_type)}>"
    return _SPARK_NAMES.get(kind, kind)
