"""Another process writing a pipeline's Delta table while a run appends to it, on the real log of a local table.

delta-spark's local log store checks that ``<version>.json`` is absent, then renames its commit onto it; two
processes committing the same version can both pass the check, and the later rename replaces the earlier entry.
:func:`replace_last_commit` makes that happen to the entry a run just wrote: a real foreign commit (delta-rs's
OPTIMIZE, or an ALTER when there is nothing to compact) planned on the version before the run's, then its entry
moved over the run's, as the losing rename would.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from deltalake import DeltaTable

from dynamic_kafka.sink import incremental
from dynamic_kafka.storage import TableRef

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path


def replace_last_commit(table: Path) -> str:
    """Replaces the table's latest log entry with a foreign writer's commit planned on the version before it;
    returns the foreign commit's operation.
    """
    ours = DeltaTable(str(table)).version()
    assert ours > 0, "the table's first version cannot be raced this way"
    DeltaTable(str(table), version=ours - 1).optimize.compact()
    operation = "OPTIMIZE"
    if DeltaTable(str(table)).version() == ours:  # nothing to compact: a user's ALTER TABLE instead
        DeltaTable(str(table), version=ours - 1).alter.set_table_properties(
            {"delta.logRetentionDuration": "interval 30 days"}
        )
        operation = "SET TBLPROPERTIES"
    log = table / "_delta_log"
    theirs = f"{ours + 1:020d}"
    assert DeltaTable(str(table)).version() == ours + 1
    os.replace(log / f"{theirs}.json", log / f"{ours:020d}.json")
    # The entry's checksums (delta-spark's .crc, Hadoop's hidden .json.crc) described the replaced commit.
    for stale in (f"{ours:020d}.crc", f".{ours:020d}.crc.crc", f".{ours:020d}.json.crc", f".{theirs}.json.crc"):
        (log / stale).unlink(missing_ok=True)
    assert DeltaTable(str(table)).version() == ours
    return operation


def race_appends(monkeypatch: Any, table: Path, *, times: int = 1) -> list[str]:
    """Makes the next ``times`` appends of a run to ``table`` lose their log entry to a foreign commit right
    after they landed; returns (filled as they happen) the foreign operations.
    """
    real = incremental.append_idempotent
    operations: list[str] = []

    def racing(rows: Any, target: Any, *args: Any, **kwargs: Any) -> None:
        real(rows, target, *args, **kwargs)
        if len(operations) < times and _is(target, table):
            operations.append(replace_last_commit(table))

    monkeypatch.setattr(incremental, "append_idempotent", racing)
    return operations


def fail_after_appends(monkeypatch: Any, table: Path, error: Callable[[], Exception]) -> list[int]:
    """Makes the next append of a run to ``table`` raise ``error()`` after it committed (an answer lost on the way
    back, a post-commit step failing); returns (filled when it happens) the version it committed.
    """
    real = incremental.append_idempotent
    raised: list[int] = []

    def failing(rows: Any, target: Any, *args: Any, **kwargs: Any) -> None:
        real(rows, target, *args, **kwargs)
        if not raised and _is(target, table):
            raised.append(DeltaTable(str(table)).version())
            raise error()

    monkeypatch.setattr(incremental, "append_idempotent", failing)
    return raised


def _is(target: Any, table: Path) -> bool:
    location = TableRef.of(target).location
    return location.is_local and location.local_path.resolve() == table.resolve()
