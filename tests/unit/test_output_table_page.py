"""The "What lands in your table" page lists the sink's columns as the code spells them, in their order."""

from __future__ import annotations

import re
from pathlib import Path

from dynamic_kafka.spark.schema import SINK_COLUMNS

PAGE = Path(__file__).parents[2] / "docs" / "output-table.md"


def test_the_page_lists_every_sink_column_in_order() -> None:
    text = PAGE.read_text(encoding="utf-8")
    table = text.split("## The columns", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^\| `([^`]+)` \|", table, flags=re.MULTILINE)
    assert tuple(listed) == SINK_COLUMNS
