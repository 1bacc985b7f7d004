"""The publication's moves of its write cluster, in a small Delta table (``state_path``), read and appended with
delta-rs.

A move is appended before the first transaction on its cluster (write-ahead); a run that crashes right after it
leaves a move without progress, which the next run reads as "start at ``start_version``". Runs of one publication
are sequential (a concurrent one is fenced in Kafka), so the appends never race: a conflicting append fails, it is
not retried.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pyarrow as pa

from dynamic_kafka.errors import StateError
from dynamic_kafka.publish.protocol import Move
from dynamic_kafka.sink.tables import open_delta_rs, safe_text

if TYPE_CHECKING:
    from dynamic_kafka.storage import TableRef

_SCHEMA = pa.schema(
    [
        pa.field("move_seq", pa.int64(), nullable=False),
        pa.field("cluster_id", pa.string(), nullable=False),
        pa.field("topic", pa.string(), nullable=False),
        pa.field("start_version", pa.int64(), nullable=False),
        pa.field("moved_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)


class DeltaMoveLedger:
    """The moves of one publication, in the Delta table ``table``."""

    def __init__(self, table: TableRef) -> None:
        self.table = table

    def moves(self) -> list[Move]:
        """Every move, by ``move_seq``."""
        opened = open_delta_rs(self.table, doing=f"reading the publication's moves at {self.table}")
        if opened is None:
            return []
        columns = ["move_seq", "cluster_id", "topic", "start_version"]
        rows = pa.table(opened.to_pyarrow_table(columns=columns)).to_pylist()
        return sorted((Move.model_validate(r) for r in rows), key=lambda m: m.move_seq)

    def append(self, move: Move) -> None:
        """Append ``move`` durably (creating the table with the first one).

        Raises:
            StateError: the table could not be written; nothing was published yet on the new cluster.
        """
        from deltalake import write_deltalake
        from deltalake.exceptions import DeltaError

        row = {**move.model_dump(), "moved_at": datetime.now(UTC)}
        try:
            write_deltalake(
                self.table.delta_rs_uri,
                pa.Table.from_pylist([row], schema=_SCHEMA),
                mode="append",
                storage_options=self.table.storage_options(),
            )
        except (DeltaError, OSError, pa.ArrowException) as e:
            raise (
                self.table.failure(e, "recording a move of the publication")
                or StateError(
                    f"recording the publication's move to cluster {move.cluster_id!r} in {self.table} failed: "
                    f"{safe_text(e)}",
                    hint="Nothing was published on the new cluster; run again.",
                )
            ) from e
