"""Reading a sink's log entries: whose commit a version holds, and who won a conflict. Real Delta tables written
by delta-rs on local disk (the delta-spark commitInfo forms are the ones its log entries carry); no JVM."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pyarrow as pa
from deltalake import CommitProperties, Transaction, write_deltalake

from dynamic_kafka.sink.commits import COMMIT_ID_KEY, Commit, read_commit, recent_foreign_commits, user_metadata
from dynamic_kafka.sink.tables import conflicting_writer, run_commit
from dynamic_kafka.storage import TableRef

if TYPE_CHECKING:
    from pathlib import Path


def _append(path: Path, rows: list[int], *, txn: tuple[str, int] | None = None, commit_id: str | None = None) -> None:
    write_deltalake(
        str(path),
        pa.table({"offset": pa.array(rows, pa.int64())}),
        mode="append",
        commit_properties=CommitProperties(
            app_transactions=[Transaction(app_id=txn[0], version=txn[1])] if txn else None,
            custom_metadata={COMMIT_ID_KEY: commit_id} if commit_id else None,
        ),
    )


def test_the_commit_of_a_run_is_found_with_its_id_and_counts_and_foreign_commits_are_named(tmp_path: Path) -> None:
    table = TableRef.of(tmp_path / "sink")
    _append(tmp_path / "sink", [1, 2], txn=("orders", 1), commit_id="first")
    _append(tmp_path / "sink", [3, 4, 5], txn=("orders", 2), commit_id="second")
    _append(tmp_path / "sink", [6])  # a foreign writer: no commit id

    found = run_commit(table, "orders", 2)

    assert found is not None
    assert (found.version, found.commit_id, found.added_records, found.txns) == (1, "second", 3, (("orders", 2),))
    assert run_commit(table, "orders", 3) is None
    assert run_commit(table, "billing", 1) is None
    foreign = recent_foreign_commits(table, 2)
    assert [c.version for c in foreign] == [2]
    assert foreign[0].describe().startswith("version 2 (WRITE by delta-rs")
    assert read_commit(table, 9) is None


def test_a_delta_spark_commit_carries_the_id_in_its_user_metadata() -> None:
    spark_info = {"operation": "WRITE", "engineInfo": "Apache-Spark/4.1.3 Delta-Lake/4.4.0"}
    ours = Commit(version=4, info={**spark_info, "userMetadata": user_metadata("abc")}, txns=(), added_records=0)
    users = Commit(version=5, info={**spark_info, "userMetadata": "nightly cleanup"}, txns=(), added_records=0)

    assert ours.commit_id == "abc"
    assert users.commit_id is None
    assert users.describe() == "version 5 (WRITE by Apache-Spark/4.1.3 Delta-Lake/4.4.0)"


def test_a_delta_spark_conflict_names_the_commit_that_won() -> None:
    winner = {"version": 12, "operation": "OPTIMIZE", "engineInfo": "Apache-Spark/4.1.3 Delta-Lake/4.4.0"}
    text = (
        "[DELTA_CONCURRENT_DELETE_READ] ConcurrentDeleteReadException: This transaction attempted to read one or "
        f"more files that were deleted by a concurrent update.\nConflicting commit: {json.dumps(winner)}\nRefer to ..."
    )

    assert conflicting_writer(text) == "version 12 (OPTIMIZE by Apache-Spark/4.1.3 Delta-Lake/4.4.0)"
    assert conflicting_writer("Conflicting commit: not json") is None
    assert conflicting_writer("some other failure") is None
