"""Large publication runs in slices, model-based: the real :func:`publish_run` (the one-transaction path with its
guard against a pending plan, the sliced path, the hand-over of a pending plan before a move) and the real
:func:`run_slice` of every task, against a simulated transactional log of two clusters.

The nemesis: runs killed at every crash point of both paths, a slice task killed inside its transaction and
retried (as Spark retries a failed task) or not (the run dies with it), slices committing in any order, a crashed
task's open transaction committed later (a zombie, refused once a newer attempt of its slice fenced it), a task of
an earlier plan starting late, and moves of the write cluster there and back.

The simulated log keeps Kafka's rules the protocol rests on: records, the progress offset and its metadata (the
plan) become visible together at commit; opening a producer of a transactional id bumps its epoch, and an older
epoch can no longer commit; a killed producer's transaction stays open.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule

from dynamic_kafka.faults import acting_at
from dynamic_kafka.publish.protocol import Place
from dynamic_kafka.publish.slices import Slice, SlicePlan, publish_run, run_slice
from tests.model.test_publication_protocol import (
    MODEL_SETTINGS,
    Crash,
    FencedError,
    SimLedger,
    SimSource,
    WriteClusterRules,
    every_row_once,
    every_row_published,
)
from tests.model.test_publication_protocol import SimSession as ProtocolSession

if TYPE_CHECKING:
    from collections.abc import Sequence

pytestmark = pytest.mark.model

DRIVER_POINTS = (
    "publish_before_transaction",
    "publish_in_transaction",
    "publish_after_commit",
    "publish_slices_committed",
)
TOPICS = {"east": "out", "west": "out-v2"}
RUN = ""  # the suffix of the run's own producer and progress; a slice's is its first version


class SimSession(ProtocolSession):
    """A producer of the run (``suffix`` empty) or of a slice on one cluster, of the epoch it got at opening; it
    sends as the one-transaction path's simulated producer does, and keeps its progress under its own key.
    """

    def __init__(self, log: SimLog, place: Place, suffix: str) -> None:
        self.sliced = log
        self.place = place
        self.key = (place, suffix)
        log.epochs[self.key] = log.epochs.get(self.key, 0) + 1
        self.epoch = log.epochs[self.key]
        self.open_records: list[bytes] | None = None

    def progress(self) -> int | None:
        return self.sliced.progress.get(self.key)

    def pending(self) -> SlicePlan | None:
        return self.sliced.plans.get(self.place)

    def _commit(self, next_version: int, plan: SlicePlan | None) -> None:
        if self.sliced.epochs[self.key] != self.epoch:
            raise FencedError(self.key)
        assert self.open_records is not None
        self.sliced.visible.setdefault(self.place, []).extend(self.open_records)
        self.sliced.progress[self.key] = next_version
        if self.key[1] == RUN:
            self.sliced.plans[self.place] = plan
        self.open_records = None

    def commit(self, next_version: int) -> None:
        self._commit(next_version, None)

    def record(self, plan: SlicePlan) -> None:
        self._commit(plan.start, plan)


class SimLog:
    """Two clusters' committed records, progress offsets (with the run's plan) and each transactional id's epoch."""

    def __init__(self) -> None:
        self.epochs: dict[tuple[Place, str], int] = {}
        self.progress: dict[tuple[Place, str], int] = {}
        self.plans: dict[Place, SlicePlan | None] = {}
        self.visible: dict[Place, list[bytes]] = {}
        self.opened: list[SimSession] = []

    def _open(self, place: Place, suffix: str) -> SimSession:
        self.opened.append(SimSession(self, place, suffix))
        return self.opened[-1]

    def open(self, place: Place) -> SimSession:
        return self._open(place, RUN)

    def open_planned(self, place: Place) -> SimSession:
        return self._open(place, RUN)

    def open_slice(self, place: Place, first: int) -> SimSession:
        return self._open(place, str(first))

    def peek(self, place: Place) -> int | None:
        return self.progress.get((place, RUN))


class SimRunner:
    """Spark in the model: every slice a task, in the given order; the task at position ``crash_task`` (counted
    over the run's tasks) is killed inside its transaction, then retried when ``retry``, else the run dies.
    """

    def __init__(self, machine: SliceMachine, *, crash_task: int | None, retry: bool, reverse: bool) -> None:
        self.machine = machine
        self.crash_task = crash_task
        self.retry = retry
        self.reverse = reverse
        self.tasks = 0

    def _kill_one(self) -> None:
        self.tasks += 1
        if self.tasks - 1 == self.crash_task:
            raise Crash

    def run(self, place: Place, slices: Sequence[Slice]) -> list[int]:
        sent = {}
        m = self.machine
        for piece in reversed(slices) if self.reverse else slices:
            m.started.append((place, piece))
            try:
                with acting_at("publish_slice_in_transaction", self._kill_one):
                    sent[piece] = run_slice(place, piece, m.source, m.log)
            except Crash:
                if not self.retry:
                    raise
                sent[piece] = run_slice(place, piece, m.source, m.log)
        return [sent[p] for p in slices]


class SliceMachine(WriteClusterRules):
    def __init__(self) -> None:
        super().__init__()
        self.log = SimLog()
        self.source = SimSource()
        self.ledger = SimLedger()
        self.cluster = "east"
        self.zombies: list[SimSession] = []
        self.started: list[tuple[Place, Slice]] = []

    def _run(self, *, large: bool, crash_at: str | None, runner: SimRunner, max_rows: int) -> None:
        place = Place(self.cluster, TOPICS[self.cluster])
        self.log.opened = []

        def crash() -> None:
            raise Crash

        try:
            with acting_at(crash_at, crash) if crash_at else contextlib.nullcontext():
                publish_run(
                    place,
                    self.source,
                    self.log,
                    self.ledger,
                    lambda: runner,
                    large=large,
                    starting_version=0,
                    max_rows_per_transaction=max_rows,
                )
        except Crash:
            pass
        finally:
            # Every transaction left open (a killed run's, a killed task's) may still try to commit.
            self.zombies += [s for s in self.log.opened if s.open_records]

    @rule(rows=st.integers(0, 3))
    def append(self, rows: int) -> None:
        self.source.rows.append(rows)

    @rule(
        large=st.booleans(),
        crash_at=st.sampled_from((None, *DRIVER_POINTS)),
        crash_task=st.none() | st.integers(0, 3),
        retry=st.booleans(),
        reverse=st.booleans(),
        max_rows=st.integers(1, 4),
    )
    def run(
        self, large: bool, crash_at: str | None, crash_task: int | None, retry: bool, reverse: bool, max_rows: int
    ) -> None:
        runner = SimRunner(self, crash_task=crash_task, retry=retry, reverse=reverse)
        self._run(large=large, crash_at=crash_at, runner=runner, max_rows=max_rows)

    @rule(data=st.data())
    def late_task(self, data: st.DataObject) -> None:
        """A task of an earlier plan starts only now (a speculative or a lost-and-rescheduled attempt)."""
        if not self.started:
            return
        place, piece = self.started[data.draw(st.integers(0, len(self.started) - 1))]
        with contextlib.suppress(FencedError):
            run_slice(place, piece, self.source, self.log)

    @invariant()
    def every_row_once(self) -> None:
        # Slices commit in any order: the versions visible are not always a prefix until the run's end.
        every_row_once(self.log.visible.values(), self.source)

    def teardown(self) -> None:
        # Clean runs at the end publish everything, wherever the writes are now: a small one (which goes on in
        # slices when a plan is pending), then a large one.
        for large in (False, True):
            runner = SimRunner(self, crash_task=None, retry=False, reverse=False)
            self._run(large=large, crash_at=None, runner=runner, max_rows=4)
            self.every_row_once()
        every_row_published(self.log.visible.values(), self.source)


def test_large_runs_in_slices_publish_every_row_once_across_killed_tasks_retries_zombies_and_moves() -> None:
    # More examples than the one-transaction model: a slip shows only after a crash with some slices committed
    # and a later move or run, which takes longer to draw.
    SliceMachine.TestCase.settings = settings(MODEL_SETTINGS, max_examples=600)
    SliceMachine.TestCase().runTest()
