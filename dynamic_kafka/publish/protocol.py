"""The publication's progress protocol: which table versions a run publishes, and on which cluster.

Invariants (docs/decisions/0063-publications.md):

- A cluster's progress is the *next* table version to publish there, committed as a consumer-group offset inside
  the Kafka transaction that holds the records of the versions before it: records and progress become visible
  together, or neither does.
- A run opens its transactional producer (fencing older producers of the same publication and cluster) *before*
  it reads the progress, so what it reads includes every commit a fenced producer made.
- A transaction holds whole versions, in order; versions are published in order, each once per cluster.
- A move of the write cluster is recorded (write-ahead) before the first transaction on the new cluster, starting
  after the last version the previous cluster got, read after fencing that cluster too.

The Kafka and Delta sides are behind small interfaces (:class:`TransactionalLog`, :class:`VersionSource`,
:class:`MoveLedger`), so the model test drives this very code against a simulated transactional log.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, NamedTuple, Protocol

from pydantic import Field

from dynamic_kafka.faults import CrashPoint, crash_point
from dynamic_kafka.frozen import FrozenModel

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

logger = logging.getLogger(__name__)


class OutgoingRecord(NamedTuple):
    """One record to send: key and value bytes, timestamp (epoch ms, None: the producer's time) and headers."""

    key: bytes | None
    value: bytes | None
    timestamp_ms: int | None
    headers: tuple[tuple[str, bytes], ...]


class VersionChange(FrozenModel):
    """A table version to publish and how many rows it added (0: it changed no data, e.g. a compaction)."""

    version: int = Field(ge=0)
    rows: int = Field(ge=0)


class Place(NamedTuple):
    """Where a publication writes: a topic of a cluster (its partition 0 holds the progress)."""

    cluster_id: str
    topic: str


class Move(FrozenModel):
    """The publication's writes moved to ``topic`` of ``cluster_id``, starting at table version ``start_version``."""

    move_seq: int = Field(ge=0)
    cluster_id: str
    topic: str
    start_version: int = Field(ge=0)

    @property
    def place(self) -> Place:
        """Where the move went."""
        return Place(self.cluster_id, self.topic)


class VersionSource(Protocol):
    """The published table, as versions that added rows."""

    def latest_version(self) -> int | None:
        """The table's newest version; None while it does not exist."""

    def changes(self, start: int, stop: int) -> list[VersionChange]:
        """Every version in ``[start, stop]`` with the rows it added (0 for one that changed no data), in order;
        a version that is not an append raises.
        """

    def records(self, version: int) -> Iterable[OutgoingRecord]:
        """The records of the rows ``version`` added."""


class Session(Protocol):
    """One cluster's transactional producer, its older producers fenced."""

    def progress(self) -> int | None:
        """The next version to publish on this cluster, as committed; None before the first commit."""

    def begin(self) -> None:
        """Start a transaction."""

    def send(self, records: Iterable[OutgoingRecord]) -> int:
        """Send records in the open transaction; return how many."""

    def commit(self, next_version: int) -> None:
        """Commit the open transaction with the progress ``next_version`` (raises when fenced)."""

    def close(self) -> None:
        """Release the producer (an open transaction is aborted by the broker at its timeout at the latest)."""


class TransactionalLog(Protocol):
    """The clusters, as places that hold records and progress transactionally."""

    def open(self, place: Place) -> Session:
        """The cluster's producer of this publication, after fencing every older one."""

    def peek(self, place: Place) -> int | None:
        """The cluster's committed progress, read without fencing anything (dry runs, status)."""


class MoveLedger(Protocol):
    """The durable list of write-cluster moves."""

    def moves(self) -> list[Move]:
        """Every move, in order."""

    def append(self, move: Move) -> None:
        """Record a move durably."""


class Start(NamedTuple):
    """Where a run starts on its write cluster, and the move to record first (None: no move)."""

    next_version: int
    move: Move | None


def plan_start(
    place: Place,
    moves: Sequence[Move],
    own: int | None,
    previous: int | None,
    starting_version: int,
) -> Start:
    """The next version to publish at ``place``, given its own committed progress ``own``, the progress
    ``previous`` of the last move's place when that is another one (read after fencing it), and the moves so far.

    Example:
        >>> east = Move(move_seq=0, cluster_id="east", topic="t", start_version=0)
        >>> plan_start(Place("west", "t"), [east], None, 7, 0).move
        Move(move_seq=1, cluster_id='west', topic='t', start_version=7)
    """
    last = moves[-1] if moves else None
    if last is None:
        start = own if own is not None else starting_version
        return Start(start, Move(move_seq=0, cluster_id=place.cluster_id, topic=place.topic, start_version=start))
    if last.place == place:
        return Start(max(own or 0, last.start_version), None)
    # The previous place's commits all came after its move: without any, nothing was published since then. A
    # place used before holds an older progress of its own: every move since started at or after it, as the
    # hand-over fenced that place before reading it.
    start = max(previous if previous is not None else 0, last.start_version)
    move = Move(move_seq=last.move_seq + 1, cluster_id=place.cluster_id, topic=place.topic, start_version=start)
    return Start(start, move)


def batches(changes: Sequence[VersionChange], max_rows: int) -> list[list[VersionChange]]:
    """Consecutive versions grouped into transactions of at most ``max_rows`` rows, never splitting a version (one
    larger than ``max_rows`` is a transaction alone).

    Example:
        >>> [[c.version for c in b] for b in batches([VersionChange(version=v, rows=2) for v in range(5)], 4)]
        [[0, 1], [2, 3], [4]]
    """
    grouped: list[list[VersionChange]] = []
    rows = 0
    for change in changes:
        if grouped and rows + change.rows <= max_rows:
            grouped[-1].append(change)
            rows += change.rows
        else:
            grouped.append([change])
            rows = change.rows
    return grouped


class PublicationOutcome(FrozenModel):
    """What one run published."""

    cluster_id: str
    topic: str
    first_version: int = Field(description="The first version this run would publish (the start).")
    next_version: int = Field(description="The cluster's progress after the run.")
    transactions: int
    records: int
    moved: bool = Field(description="Whether the run moved the writes to this cluster.")


def previous_progress(log: TransactionalLog, place: Place, moves: Sequence[Move]) -> int | None:
    """The last move's place's progress when it is not ``place``, read after fencing its producers (so no
    zombie there commits after the hand-over); None when there is no other place to hand over from.
    """
    if not moves or moves[-1].place == place:
        return None
    session = log.open(moves[-1].place)
    try:
        return session.progress()
    finally:
        session.close()


def start_run(
    place: Place,
    session: Session,
    source: VersionSource,
    log: TransactionalLog,
    ledger: MoveLedger,
    *,
    starting_version: int,
    max_rows: int,
) -> tuple[Start, list[list[VersionChange]]]:
    """A run's start, its producer opened (fencing the older ones): read the progress, record a move first if the
    write cluster changed, and group the versions up to the table's version now into transactions.
    """
    moves = ledger.moves()
    previous = previous_progress(log, place, moves)
    start = plan_start(place, moves, session.progress(), previous, starting_version)
    if start.move is not None:
        ledger.append(start.move)
        logger.info("publication writes moved to %s from version %d", place, start.next_version)
    latest = source.latest_version()
    changes = source.changes(start.next_version, latest) if latest is not None else []
    return start, batches(changes, max_rows)


def run_publication(
    place: Place,
    source: VersionSource,
    log: TransactionalLog,
    ledger: MoveLedger,
    *,
    starting_version: int,
    max_rows_per_transaction: int,
) -> PublicationOutcome:
    """One run: fence, read the progress, record a move if the write cluster changed, then publish every version
    up to the table's version now, in transactions that commit the progress with the records.

    Crash points (``DYNAMIC_KAFKA_FAULT``): ``publish_before_transaction``, ``publish_in_transaction`` (records
    sent, not committed) and ``publish_after_commit``.
    """
    session = log.open(place)
    try:
        start, groups = start_run(
            place, session, source, log, ledger, starting_version=starting_version, max_rows=max_rows_per_transaction
        )
        sent = 0
        for group in groups:
            crash_point(CrashPoint.PUBLISH_BEFORE_TRANSACTION)
            session.begin()
            for change in group:
                sent += session.send(source.records(change.version))
            crash_point(CrashPoint.PUBLISH_IN_TRANSACTION)
            session.commit(group[-1].version + 1)
            crash_point(CrashPoint.PUBLISH_AFTER_COMMIT)
        return PublicationOutcome(
            cluster_id=place.cluster_id,
            topic=place.topic,
            first_version=start.next_version,
            next_version=groups[-1][-1].version + 1 if groups else start.next_version,
            transactions=len(groups),
            records=sent,
            moved=start.move is not None,
        )
    finally:
        session.close()
