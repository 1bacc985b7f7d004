"""Text for people: tables whose columns are as wide as their widest cell (what the values' ``text`` show)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence


def table(
    columns: Sequence[str], rows: Iterable[Sequence[object]], *, indent: str = "  ", header: bool = True
) -> list[str]:
    r"""The lines of a table: a header row (unless not ``header``), then one line per row. A column's name starting
    with ``>`` is right-aligned (numbers), without it left-aligned; the last column is not padded (no trailing
    blanks).

    Example:
        >>> print("\n".join(table(["topic", ">part", "status"], [("orders", 0, "ok"), ("payments-eu", 11, "reset")])))
          topic        part  status
          orders          0  ok
          payments-eu    11  reset
    """
    headers = [c.removeprefix(">") for c in columns]
    right = [c.startswith(">") for c in columns]
    cells = [headers, *([str(v) for v in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for row in cells:
        shown = [
            cell.rjust(width) if is_right else cell.ljust(width)
            for cell, width, is_right in zip(row, widths, right, strict=True)
        ]
        lines.append((indent + "  ".join(shown)).rstrip())
    return lines
