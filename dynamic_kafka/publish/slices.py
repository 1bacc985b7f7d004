"""Large runs in slices: the versions of a run published by parallel tasks, each in its own Kafka transaction.

Invariants (docs/decisions/0097-publishing-from-executors.md), on top of those of
:mod:`dynamic_kafka.publish.protocol`:

- The run's **plan** (its slices: consecutive whole versions, each at most ``max_rows_per_transaction`` rows or
  one larger version) is committed write-ahead, as the metadata of the cluster's progress offset, by the run's own
  producer (so a fenced older run cannot record one) *before* any task starts; the progress stays at the plan's
  first version.
- A slice has its own transactional id and its own progress group, both named by the slice's first version. Its
  task opens its producer (fencing every older attempt of the slice), reads the slice's progress, and publishes
  the versions after it in one transaction that commits the slice's progress with the records. A retried task,
  or a zombie that comes back, finds the slice done and sends nothing.
- The run's progress moves past the plan only after every slice committed, by the run's producer, which clears
  the plan in the same commit.
- A run that finds a plan pending (a crashed run's, or a zombie's that wrote it before it was fenced) runs that
  very plan first, whatever the config says now, so every version stays in the one slice that may already hold
  it. Before the writes move to another cluster, the previous cluster's pending plan is finished *there*: its
  slices may have committed out of order, and the hand-over needs one progress to start from.

The Kafka and Spark sides are behind :class:`SlicedLog` and :class:`SliceRunner`, so the model test drives this
code against a simulated log, with tasks retried, killed and coming back.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, NamedTuple, Protocol

from pydantic import Field

from dynamic_kafka.faults import CrashPoint, crash_point
from dynamic_kafka.frozen import FrozenModel
from dynamic_kafka.publish.protocol import (
    PublicationOutcome,
    Session,
    TransactionalLog,
    run_publication,
    start_run,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from dynamic_kafka.publish.protocol import MoveLedger, OutgoingRecord, Place, VersionSource

logger = logging.getLogger(__name__)

# A plan travels in an offset commit's metadata, which brokers cap (offset.metadata.max.bytes, 4096 by default).
MAX_SLICES_PER_PLAN = 64


class Slice(NamedTuple):
    """Versions ``first`` to ``last`` of a plan, published by one task in one transaction."""

    first: int
    last: int


class SlicePlan(FrozenModel):
    """A run's slices, in order and consecutive: the first starts at the cluster's progress."""

    slices: tuple[Slice, ...] = Field(min_length=1)

    @property
    def start(self) -> int:
        """The first version of the plan."""
        return self.slices[0].first

    @property
    def next_version(self) -> int:
        """The cluster's progress once every slice committed."""
        return self.slices[-1].last + 1

    def encode(self) -> str:
        """The plan as the compact text kept in the progress metadata (``first-last,...``).

        Example:
            >>> SlicePlan(slices=(Slice(0, 3), Slice(4, 4))).encode()
            '0-3,4-4'
        """
        return ",".join(f"{s.first}-{s.last}" for s in self.slices)

    @classmethod
    def decode(cls, text: str) -> SlicePlan:
        """The plan :meth:`encode` wrote."""
        pairs = (part.split("-") for part in text.split(","))
        return cls(slices=tuple(Slice(int(a), int(b)) for a, b in pairs))


class PlannedSession(Session, Protocol):
    """The run's producer on its cluster, which also keeps the pending plan with the progress."""

    def pending(self) -> SlicePlan | None:
        """The plan committed with the progress and not finished; None when there is none."""

    def record(self, plan: SlicePlan) -> None:
        """Commit, in a transaction without records, the progress ``plan.start`` with the plan (raises when
        fenced).
        """


class SlicedLog(TransactionalLog, Protocol):
    """The clusters, with a producer and a progress per slice."""

    def open_planned(self, place: Place) -> PlannedSession:
        """The run's producer on the cluster, after fencing every older one."""

    def open_slice(self, place: Place, first: int) -> Session:
        """The producer of the slice that starts at version ``first``, after fencing every older attempt of it;
        its progress is the slice's own.
        """


class SliceRunner(Protocol):
    """Runs :func:`run_slice` for every slice of a plan (on Spark's executors, or in the process) and returns the
    records each sent; raises when a slice failed for good.
    """

    def run(self, place: Place, slices: Sequence[Slice]) -> list[int]:
        """Publish each slice; return the records each sent."""


def run_slice(place: Place, piece: Slice, source: VersionSource, log: SlicedLog) -> int:
    """One task: fence the slice's older attempts, skip what the slice committed, publish the rest of its versions
    in one transaction with the slice's progress; return the records sent.

    Crash points: ``publish_slice_in_transaction`` (records sent, not committed).
    """
    session = log.open_slice(place, piece.first)
    try:
        done = session.progress()
        first = piece.first if done is None else max(done, piece.first)
        if first > piece.last:
            return 0
        session.begin()
        sent = 0
        for change in source.changes(first, piece.last):
            if change.rows:
                sent += session.send(source.records(change.version))
        crash_point(CrashPoint.PUBLISH_SLICE_IN_TRANSACTION)
        session.commit(piece.last + 1)
        return sent
    finally:
        session.close()


def _finish(session: PlannedSession, place: Place, plan: SlicePlan, runner: SliceRunner) -> int:
    sent = sum(runner.run(place, plan.slices))
    crash_point(CrashPoint.PUBLISH_SLICES_COMMITTED)
    session.begin()
    session.commit(plan.next_version)
    return sent


def settle_previous(log: SlicedLog, place: Place, ledger: MoveLedger, runner: SliceRunner) -> None:
    """Finish a pending plan on the last move's place when that is not ``place``, before the writes move."""
    moves = ledger.moves()
    if not moves or moves[-1].place == place:
        return
    previous = moves[-1].place
    session = log.open_planned(previous)
    try:
        plan = session.pending()
        if plan is not None:
            logger.info("finishing an interrupted run's %d slice(s) on %s before moving", len(plan.slices), previous)
            _finish(session, previous, plan, runner)
    finally:
        session.close()


def run_sliced_publication(
    place: Place,
    source: VersionSource,
    log: SlicedLog,
    ledger: MoveLedger,
    runner: SliceRunner,
    *,
    starting_version: int,
    max_rows_per_transaction: int,
) -> PublicationOutcome:
    """One large run: finish a pending plan, then plan the versions up to the table's version now in slices,
    record the plan, let ``runner`` publish the slices, and move the progress past them; repeat while more than
    :data:`MAX_SLICES_PER_PLAN` slices are left. Call :func:`settle_previous` first.
    """
    session = log.open_planned(place)
    try:
        sent = transactions = 0
        pending = session.pending()
        if pending is not None:
            logger.info("running an interrupted run's %d slice(s) on %s first", len(pending.slices), place)
            sent += _finish(session, place, pending, runner)
            transactions += len(pending.slices)
        start, groups = start_run(
            place, session, source, log, ledger, starting_version=starting_version, max_rows=max_rows_per_transaction
        )
        for i in range(0, len(groups), MAX_SLICES_PER_PLAN):
            chunk = groups[i : i + MAX_SLICES_PER_PLAN]
            plan = SlicePlan(slices=tuple(Slice(g[0].version, g[-1].version) for g in chunk))
            session.begin()
            session.record(plan)
            sent += _finish(session, place, plan, runner)
            transactions += len(plan.slices)
        return PublicationOutcome(
            cluster_id=place.cluster_id,
            topic=place.topic,
            first_version=pending.start if pending is not None else start.next_version,
            next_version=groups[-1][-1].version + 1 if groups else start.next_version,
            transactions=transactions,
            records=sent,
            moved=start.move is not None,
        )
    finally:
        session.close()


class PlanPendingError(Exception):
    """The driver's one-transaction path found a large run's plan pending on the cluster: the run must go on in
    slices (:func:`run_sliced_publication`), which finishes that plan first.
    """


def plan_of(metadata: str) -> SlicePlan | None:
    """The pending plan in a progress offset's metadata (JSON with a ``plan`` entry), or None."""
    try:
        found = json.loads(metadata) if metadata else {}
    except ValueError:
        return None
    text = found.get("plan") if isinstance(found, dict) else None
    return SlicePlan.decode(text) if text else None


class _GuardedSession:
    """The run's producer as the one-transaction path sees it: its progress is refused while a plan is pending,
    as that path would publish from the progress the versions a slice may already hold.
    """

    def __init__(self, session: PlannedSession) -> None:
        self.session = session

    def progress(self) -> int | None:
        if self.session.pending() is not None:
            raise PlanPendingError
        return self.session.progress()

    def begin(self) -> None:
        self.session.begin()

    def send(self, records: Iterable[OutgoingRecord]) -> int:
        return self.session.send(records)

    def commit(self, next_version: int) -> None:
        self.session.commit(next_version)

    def close(self) -> None:
        self.session.close()


class _GuardedLog:
    def __init__(self, log: SlicedLog) -> None:
        self.log = log

    def open(self, place: Place) -> Session:
        return _GuardedSession(self.log.open_planned(place))

    def peek(self, place: Place) -> int | None:
        return self.log.peek(place)


def publish_run(
    place: Place,
    source: VersionSource,
    log: SlicedLog,
    ledger: MoveLedger,
    runner: Callable[[], SliceRunner],
    *,
    large: bool,
    starting_version: int,
    max_rows_per_transaction: int,
) -> PublicationOutcome:
    """One run: a small one in this process (:func:`~dynamic_kafka.publish.protocol.run_publication`), unless a
    plan is pending; a large one, or one that found a plan pending, in slices by ``runner()``.
    """
    if not large:
        try:
            return run_publication(
                place,
                source,
                _GuardedLog(log),
                ledger,
                starting_version=starting_version,
                max_rows_per_transaction=max_rows_per_transaction,
            )
        except PlanPendingError:
            logger.info("an interrupted large run's plan is pending on %s: going on in slices", place)
    slices = runner()
    settle_previous(log, place, ledger, slices)
    return run_sliced_publication(
        place,
        source,
        log,
        ledger,
        slices,
        starting_version=starting_version,
        max_rows_per_transaction=max_rows_per_transaction,
    )
