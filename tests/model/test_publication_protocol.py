"""The publication's progress protocol, model-based: the real :func:`run_publication` (with its real start planning
and batching) against a simulated transactional log of two clusters, through appends to the table, runs killed at
every crash point, crashed runs that come back and try to commit (zombies), and moves of the write cluster there
and back.

The simulated log keeps Kafka's rules that the protocol rests on: records and the progress offset become visible
together at commit; opening a producer of a transactional id bumps its epoch, and a producer of an older epoch can
no longer commit; a killed producer's open transaction stays open (it is not aborted by the kill).

After every step: no record is visible twice (on one cluster or across clusters), and the versions visible
anywhere are a prefix of the table's versions, each with all its rows.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from dynamic_kafka.faults import acting_at
from dynamic_kafka.publish.protocol import (
    Move,
    OutgoingRecord,
    Place,
    VersionChange,
    run_publication,
)

if TYPE_CHECKING:
    from collections.abc import Iterable

pytestmark = pytest.mark.model

POINTS = ("publish_before_transaction", "publish_in_transaction", "publish_after_commit")
TOPICS = {"east": "out", "west": "out-v2"}


class FencedError(Exception):
    """The simulated broker refused a commit: a newer producer of the transactional id exists."""


class Crash(BaseException):
    """kill -9 at a crash point: nothing after it runs (not even an abort)."""


class SimSession:
    """A producer of the publication on one cluster, of the epoch it got at opening."""

    def __init__(self, log: SimLog, place: Place) -> None:
        self.log = log
        self.place = place
        log.epochs[place.cluster_id] = log.epochs.get(place.cluster_id, 0) + 1
        self.epoch = log.epochs[place.cluster_id]
        self.open_records: list[bytes] | None = None

    def progress(self) -> int | None:
        return self.log.progress.get(self.place)

    def begin(self) -> None:
        self.open_records = []

    def send(self, records: Iterable[OutgoingRecord]) -> int:
        assert self.open_records is not None
        values = [r.value or b"" for r in records]
        self.open_records += values
        return len(values)

    def commit(self, next_version: int) -> None:
        if self.log.epochs[self.place.cluster_id] != self.epoch:
            raise FencedError(self.place)
        assert self.open_records is not None
        self.log.visible.setdefault(self.place, []).extend(self.open_records)
        self.log.progress[self.place] = next_version
        self.open_records = None

    def close(self) -> None:
        """Nothing: an open transaction stays open until a newer producer fences it."""


class SimLog:
    """Two clusters' committed records and progress, and each transactional id's epoch."""

    def __init__(self) -> None:
        self.epochs: dict[str, int] = {}
        self.progress: dict[Place, int] = {}
        self.visible: dict[Place, list[bytes]] = {}

    def open(self, place: Place) -> SimSession:
        return SimSession(self, place)

    def peek(self, place: Place) -> int | None:
        return self.progress.get(place)


class SimSource:
    """An append-only table: version v added ``rows[v]`` rows, valued ``v:i``."""

    def __init__(self) -> None:
        self.rows: list[int] = []

    def latest_version(self) -> int | None:
        return len(self.rows) - 1 if self.rows else None

    def changes(self, start: int, stop: int) -> list[VersionChange]:
        return [VersionChange(version=v, rows=self.rows[v]) for v in range(start, stop + 1)]

    def records(self, version: int) -> list[OutgoingRecord]:
        return [OutgoingRecord(None, f"{version}:{i}".encode(), None, ()) for i in range(self.rows[version])]


class SimLedger:
    def __init__(self) -> None:
        self.recorded: list[Move] = []

    def moves(self) -> list[Move]:
        return list(self.recorded)

    def append(self, move: Move) -> None:
        self.recorded.append(move)


def zombie_commits(zombie: SimSession) -> None:
    """A crashed producer's open transaction tries to commit the progress after the last version it sent."""
    sent = [int(v.split(b":")[0]) for v in zombie.open_records or []]
    next_version = (max(sent) + 1) if sent else (zombie.progress() or 0)
    with contextlib.suppress(FencedError):
        zombie.commit(next_version)


def every_row_once(visible: Iterable[list[bytes]], source: SimSource) -> set[int]:
    """Assert no row is visible twice and every visible version whole; return the visible versions."""
    everything = [v for values in visible for v in values]
    twice = [v for v, n in Counter(everything).items() if n > 1]
    assert not twice, f"published twice: {twice}"
    versions = {int(v.split(b":")[0]) for v in everything}
    for version in versions:
        rows = {v for v in everything if v.startswith(f"{version}:".encode())}
        assert len(rows) == source.rows[version], f"version {version} published in part"
    return versions


def every_row_published(visible: Iterable[list[bytes]], source: SimSource) -> None:
    """Assert every row of the table is visible."""
    everything = {v for values in visible for v in values}
    assert everything == {f"{v}:{i}".encode() for v, n in enumerate(source.rows) for i in range(n)}


MODEL_SETTINGS = settings(
    max_examples=150, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


class WriteClusterRules(RuleBasedStateMachine):
    """The rules both publication models share: the writes move to another cluster, and a zombie commits late."""

    cluster: str
    zombies: list[SimSession]

    @rule(cluster=st.sampled_from(sorted(TOPICS)))
    def move(self, cluster: str) -> None:
        self.cluster = cluster

    @rule(data=st.data())
    def zombie_commits(self, data: st.DataObject) -> None:
        if not self.zombies:
            return
        zombie_commits(self.zombies.pop(data.draw(st.integers(0, len(self.zombies) - 1))))


class PublicationMachine(WriteClusterRules):
    def __init__(self) -> None:
        super().__init__()
        self.log = SimLog()
        self.source = SimSource()
        self.ledger = SimLedger()
        self.cluster = "east"
        self.zombies: list[SimSession] = []

    def _run(self, crash_at: str | None, max_rows: int) -> None:
        place = Place(self.cluster, TOPICS[self.cluster])
        opened: list[SimSession] = []
        real_open = self.log.open

        def open_and_keep(p: Place) -> SimSession:
            opened.append(real_open(p))
            return opened[-1]

        def crash() -> None:
            raise Crash

        self.log.open = open_and_keep  # type: ignore[method-assign]
        try:
            if crash_at is None:
                run_publication(
                    place, self.source, self.log, self.ledger, starting_version=0, max_rows_per_transaction=max_rows
                )
            else:
                with acting_at(crash_at, crash):
                    run_publication(
                        place, self.source, self.log, self.ledger, starting_version=0, max_rows_per_transaction=max_rows
                    )
        except Crash:
            self.zombies += [s for s in opened if s.open_records is not None]
        finally:
            del self.log.open

    @rule(rows=st.integers(0, 3))
    def append(self, rows: int) -> None:
        self.source.rows.append(rows)

    @rule(crash_at=st.sampled_from((None, *POINTS)), max_rows=st.integers(1, 4))
    def run(self, crash_at: str | None, max_rows: int) -> None:
        self._run(crash_at, max_rows)

    @invariant()
    def every_row_once_and_no_version_skipped(self) -> None:
        versions = every_row_once(self.log.visible.values(), self.source)
        with_rows = [v for v in range(len(self.source.rows)) if self.source.rows[v]]
        published = sorted(v for v in with_rows if v in versions)
        assert published == with_rows[: len(published)], f"a version was skipped: {published} of {with_rows}"

    def teardown(self) -> None:
        # A clean run at the end publishes everything, wherever the writes are now.
        self._run(None, 4)
        self.every_row_once_and_no_version_skipped()
        every_row_published(self.log.visible.values(), self.source)


def test_the_publication_protocol_publishes_every_row_once_across_crashes_zombies_and_moves() -> None:
    PublicationMachine.TestCase.settings = MODEL_SETTINGS
    PublicationMachine.TestCase().runTest()
