"""Fences: an abandoned run's transaction committed with no data, so no late writer of that run lands anything.

A run that is abandoned may still have a writer somewhere: a Spark Connect server finishing the append of a client
that was killed, or an owner whose lease expired while it was paused. Both write with the run's Delta transaction
``(pipeline id, run_seq)``. Before a run is abandoned, its transaction is committed to the sink (and dead-letter
table) by a commit without data, so Delta's idempotent-write rule stops every later writer of it:

- a writer that starts after the fence sees the txn version and skips its write (delta-spark's ``txnAppId`` /
  ``txnVersion`` rule, and the staged append's own check);
- a writer that read the table before the fence and commits after it loses its commit: both delta-spark's and
  delta-rs's conflict checks refuse a commit when a concurrent one recorded a transaction of the same app id.

A fence records a second transaction, app id ``<pipeline>/fence`` at the same version, so recovery, the abandon
command and the writers tell it from landed data by the table's transaction map alone (no history walk; it survives
checkpoints and log cleanup). ``/`` cannot occur in a pipeline id, so it never names a pipeline's runs. Its
``commitInfo`` says why (``dynamicKafkaFence``), for whoever reads the table's history.

A fence is read back after its commit, as a run's append is (:mod:`~dynamic_kafka.sink.commits`): the version
holding the run's transaction must be the fence's own commit (its commit id). When another process's commit
replaced the entry, the table is looked at again: it holds the run's data (``landed``) or nothing of the run (fenced
again).

A table that does not exist yet is created by its fence (a late delta-spark writer's first commit then loses to
it): with the columns every row of it has (the dead-letter table's are all fixed; the sink's ``key``, ``value`` and
decoded fields depend on the formats and join at the first real append, which merges schemas) and the statistics
property dynamic-kafka gives its tables.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Literal

from dynamic_kafka.errors import SparkJobError
from dynamic_kafka.faults import CrashPoint, crash_point
from dynamic_kafka.secrets import mask_secrets
from dynamic_kafka.sink.commits import COMMIT_ID_KEY, new_commit_id
from dynamic_kafka.sink.tables import STATS_PROPERTY, open_delta_rs, run_commit
from dynamic_kafka.spark.schema import DEAD_LETTER_COLUMNS, ERROR, OUTPUT_FIELDS, RUN_SEQ, STATS_COLUMNS
from dynamic_kafka.storage import TableRef

if TYPE_CHECKING:
    import pyarrow as pa
    from deltalake import DeltaTable as DeltaTableRs

    from dynamic_kafka.sink.tables import Table

logger = logging.getLogger(__name__)

FENCE_KEY = "dynamicKafkaFence"
"""The ``commitInfo`` field of a fence commit: the run and why it was abandoned."""

TableKind = Literal["sink", "dead_letter"]
Outcome = Literal["fenced", "landed"]
"""``fenced``: the table holds the run's fence (committed now or before); ``landed``: it holds the run's data
(or a later run's), so it needs no fence."""

_ATTEMPTS = 3
_AGAIN = "The run was not abandoned (it stays planned); abandon it again, or run the pipeline to let its policy decide."


def fence_app_id(pipeline_id: str) -> str:
    """The Delta transaction app id that marks a pipeline's run transaction as a fence."""
    return f"{pipeline_id}/fence"


def is_fence(table: Table, app_id: str, run_seq: int) -> bool:
    """Whether the table's transaction of ``app_id`` is run ``run_seq``'s fence (not its data). JVM-free."""
    opened = open_delta_rs(table, doing=f"reading the Delta log of {TableRef.of(table)}")
    return opened is not None and _txn_of(opened, app_id) == (run_seq, True)


def fence_run(table: Table, kind: TableKind, app_id: str, run_seq: int, reason: str) -> Outcome:
    """Commits the fence of run ``run_seq`` to ``table`` unless the table already holds that run (its data or its
    fence); creates the table when there is none.

    Raises:
        SparkJobError: the table's log could not be read or written, or other writers' commits of this pipeline
            kept winning (retriable: nothing of the fence is visible, or all of it).
        ObjectStoreError: the table's object store cannot be used.
    """
    from deltalake import CommitProperties, DeltaTable, Transaction
    from deltalake.exceptions import CommitFailedError, DeltaError

    ref = TableRef.of(table)
    doing = f"fencing run {run_seq} of {app_id!r} in {ref}"
    commit_id = new_commit_id()
    properties = CommitProperties(
        app_transactions=[Transaction(app_id=app_id, version=run_seq), Transaction(fence_app_id(app_id), run_seq)],
        custom_metadata={FENCE_KEY: json.dumps({"run_seq": run_seq, "abandoned": reason}), COMMIT_ID_KEY: commit_id},
    )
    for _ in range(_ATTEMPTS):
        opened = open_delta_rs(ref, doing=doing)
        try:
            if opened is None:
                DeltaTable.create(
                    ref.delta_rs_uri,
                    _columns(kind),
                    mode="error",
                    configuration={STATS_PROPERTY: STATS_COLUMNS},
                    storage_options=ref.storage_options(),
                    commit_properties=properties,
                )
            else:
                held, fenced = _txn_of(opened, app_id)
                if held is not None and held >= run_seq:
                    return "fenced" if fenced and held == run_seq else "landed"
                # Delta's conflict check refuses this commit if a writer of this app id committed after `opened`.
                opened.create_write_transaction([], mode="append", schema=opened.schema(), commit_properties=properties)
        except CommitFailedError:
            continue  # a writer of this pipeline (or the table's creator) won: look again at what it holds
        except DeltaError as e:
            if opened is None and "already exists" in str(e):
                continue  # created meanwhile: look at what its first commit holds
            raise ref.failure(e, doing) or SparkJobError(f"{doing} failed: {mask_secrets(str(e))}", hint=_AGAIN) from e
        except OSError as e:
            raise ref.failure(e, doing) or SparkJobError(f"{doing} failed: {mask_secrets(str(e))}", hint=_AGAIN) from e
        crash_point(CrashPoint.FENCE_COMMITTED)
        if not _holds_own_commit(ref, app_id, run_seq, commit_id):
            # Another process's commit replaced the fence's log entry (delta-spark's log stores check, then
            # write): look again at what the table holds, and fence again if it holds nothing of the run.
            logger.warning(
                "the fence of run %d of %r in %s was replaced by another commit; looking again", run_seq, app_id, ref
            )
            continue
        logger.warning("run %d of %r fenced in %s (abandoned: %s)", run_seq, app_id, ref, reason)
        return "fenced"
    raise SparkJobError(
        f"{doing}: other writers of the table kept committing first ({_ATTEMPTS} attempts).",
        hint=_AGAIN,
    )


def _holds_own_commit(ref: TableRef, app_id: str, run_seq: int, commit_id: str) -> bool:
    """Whether the version holding the run's transaction is the commit ``commit_id`` made."""
    commit = run_commit(ref, app_id, run_seq)
    return commit is not None and commit.commit_id == commit_id


def _txn_of(opened: DeltaTableRs, app_id: str) -> tuple[int | None, bool]:
    held = opened.transaction_version(app_id)
    return held, held is not None and opened.transaction_version(fence_app_id(app_id)) == held


def _columns(kind: TableKind) -> pa.Schema:
    """The columns every row of a ``kind`` table has, in the order its writer gives them, as Arrow types."""
    import pyarrow as pa

    header = pa.struct([("key", pa.string()), ("value", pa.binary())])
    arrow = {
        "STRING": pa.string(),
        "BINARY": pa.binary(),
        "INT": pa.int32(),
        "BIGINT": pa.int64(),
        "TIMESTAMP": pa.timestamp("us", tz="UTC"),
        "ARRAY<STRUCT<key: STRING, value: BINARY>>": pa.list_(header),
    }
    types = {name: arrow[ddl] for name, ddl in OUTPUT_FIELDS} | {ERROR: pa.string(), RUN_SEQ: pa.int64()}
    if kind == "dead_letter":
        names = list(DEAD_LETTER_COLUMNS)
    else:  # the sink's key and value are typed by its formats: they join at its first real append
        names = [name for name, _ in OUTPUT_FIELDS if name not in ("key", "value")] + [RUN_SEQ]
    return pa.schema([(name, types[name]) for name in names])
