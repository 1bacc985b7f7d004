"""Who runs a planned run (or a backfill), and for how long: the owner and its lease, kept in the state.

A run writes its plan ahead with an owner (host, boot id, pid, pid namespace and a random token) and a lease
expiry, and renews the lease while it runs (:class:`LeaseKeeper`, a background thread); a backfill holds a lease of
its own the same way (a ``backfill`` row of the state, see ``StateStore.record_backfill``). Another process that
finds the run planned treats it as crashed (and recovers it) only when

* the lease has expired (the owner stopped renewing: it died, hangs, or lost the state), or
* the owner is provably gone: same machine and boot (the boot id: two machines may share a hostname, and every
  machine's initial pid namespace has the same inode number), same pid namespace, and no process with its pid.

The local run lock (one host) comes first; the lease is what stops a second *host* from recovering a run that is
alive. Leases compare wall clocks of different hosts: their skew must stay well below the lease length.
A renewal that fails is retried while the lease lasts (a commit of another process moving the state's version, a
state store briefly unreachable); the holder checks its lease right before it writes the sink
(:meth:`LeaseKeeper.check`), so a run that lost it stops there. Correctness never depends on the lease alone:
every state write is still made against the exact version read, and the sink write is idempotent per run, so a
run taken over after a false expiry cannot land twice; the lease keeps processes from doing (and failing) the same
work twice.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Literal

from dynamic_kafka.errors import DynamicKafkaError, LeaseLostError
from dynamic_kafka.state.owner import RunOwner

if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import datetime, timedelta

    from dynamic_kafka.model.plan import Plan
    from dynamic_kafka.state.store import StateStore

logger = logging.getLogger(__name__)

__all__ = ["LeaseKeeper", "RunOwner"]

_ELSEWHERE: Literal["elsewhere"] = "elsewhere"


class LeaseKeeper:
    """Renews a planned run's lease (or a backfill's) in the background, and tells the holder which state version
    to commit against.

    Every renewal is a state commit (against the version the previous write returned), so the holder's own commit
    must expect the keeper's latest version: call :meth:`stop` first, which waits for a renewal in flight.

    A renewal that fails is retried (every ``retry`` at most) while the lease lasts: when another process's commit
    moved the state's version and the state still names this owner, the renewal is made again at the new version;
    when the state could not be written or read, it is tried again later. The lease is lost for good when the state
    names another owner (the run was taken over, committed or abandoned) or when the last renewed lease ran out.

    Args:
        store: the pipeline's state store.
        plan: the planned run; None for the backfill lease (``StateStore.renew_backfill_lease``).
        owner: this process.
        lease: how long a lease lasts.
        version: the state version the holder's last write returned (the one that took the lease).
        clock: returns "now" (UTC).
        every: time between renewals (default: a third of ``lease``).
        retry: time between attempts after a failed renewal (default: a tenth of ``every``, at least 0.1 s).
    """

    def __init__(
        self,
        store: StateStore,
        plan: Plan | None,
        owner: RunOwner,
        lease: timedelta,
        version: int,
        clock: Callable[[], datetime],
        every: timedelta | None = None,
        retry: timedelta | None = None,
    ) -> None:
        self._store = store
        self._plan = plan
        self._owner = owner
        self._lease = lease
        self._every = every or lease / 3
        self._retry = max((retry or self._every / 10).total_seconds(), 0.1)
        self._clock = clock
        self._version = version
        # The lease taken just before the keeper was made ends a little earlier: the holder checks it anyway.
        self._held_until = clock() + lease
        self._lost: DynamicKafkaError | None = None
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._what = "the backfill" if plan is None else f"run {plan.run_seq}"
        self._thread = threading.Thread(
            target=self._loop,
            name=f"dynamic-kafka-lease-{store.pipeline_id}-{'backfill' if plan is None else plan.run_seq}",
            daemon=True,
        )

    def start(self) -> LeaseKeeper:
        """Start renewing the lease in the background; return the keeper."""
        self._thread.start()
        return self

    def _loop(self) -> None:
        wait = self._every.total_seconds()
        while not self._stopped.wait(wait):
            with self._lock:
                if self._stopped.is_set():
                    return
                renewed = self._renew()
                if self._lost is not None:
                    return
            wait = self._every.total_seconds() if renewed else self._retry

    def _renew(self) -> bool:
        """One renewal (made again at once when a commit of another process moved the version); False when it
        failed and is to be retried. Sets ``_lost`` when the lease is lost for good.
        """
        for _ in range(3):
            until = self._clock() + self._lease
            try:
                self._version = self._commit(until)
            except DynamicKafkaError as e:
                failure = e
            else:
                self._held_until = until
                logger.debug(
                    "pipeline %s: lease of %s renewed (state version %d)",
                    self._store.pipeline_id,
                    self._what,
                    self._version,
                )
                return True
            if self._still_held(failure) is None:
                return False
        return False

    def _commit(self, until: datetime) -> int:
        if self._plan is None:
            return self._store.renew_backfill_lease(
                owner=self._owner.text(), lease_expires_at=until, expected_version=self._version
            )
        return self._store.lease(
            self._plan, owner=self._owner.text(), lease_expires_at=until, expected_version=self._version
        )

    def _still_held(self, failure: DynamicKafkaError) -> int | None:
        """After a failed renewal: the state's latest version when it still names this owner and moved (renew
        again at once); None to retry later, or when the lease is lost (``_lost`` is set).
        """
        try:
            version = self._holding_version()
        except DynamicKafkaError as e:
            version, failure = None, e
        if version == _ELSEWHERE:
            logger.warning(
                "pipeline %s: %s lost its lease (the state names another owner now): %s",
                self._store.pipeline_id,
                self._what,
                failure,
            )
            self._lost = failure
            return None
        if isinstance(version, int) and version != self._version:
            logger.info(
                "pipeline %s: lease of %s: the state moved to version %d under it; renewing there",
                self._store.pipeline_id,
                self._what,
                version,
            )
            self._version = version
            return version
        if self._clock() >= self._held_until:
            self._lost = self._expired(failure)
            logger.warning("pipeline %s: %s", self._store.pipeline_id, self._lost)
            return None
        logger.warning(
            "pipeline %s: lease of %s not renewed, retrying while it lasts (until %s): %s",
            self._store.pipeline_id,
            self._what,
            self._held_until.isoformat(),
            failure,
        )
        return None

    def _holding_version(self) -> int | Literal["elsewhere"] | None:
        """The state's latest version if it names this owner for the lease, ``"elsewhere"`` when it names another
        holder (or no longer holds the planned run), None when the state table cannot be found.
        """
        state = self._store.load()
        if state.table_version is None:
            return None
        if self._plan is None:
            held = state.backfill_owner == self._owner.text()
        else:
            head = state.last_run
            held = (
                head is not None
                and head.status == "planned"
                and head.run_seq == self._plan.run_seq
                and head.owner == self._owner.text()
            )
        return state.table_version if held else _ELSEWHERE

    def _expired(self, cause: DynamicKafkaError | None) -> LeaseLostError:
        why = f" (the last renewal failed: {cause})" if cause is not None else ""
        return LeaseLostError(
            f"{self._what} of pipeline {self._store.pipeline_id!r} lost its lease: it was not renewed before it "
            f"ran out at {self._held_until.isoformat()}{why}; another process may take it over, so it stops "
            "before writing the sink.",
            hint="Nothing more is written by this process. Check that the state table at "
            f"{self._store.path} is reachable; the next run recovers the planned run (a backfill can be run again: "
            "its MERGE inserts only what the sink lacks).",
        )

    def check(self) -> None:
        """Raise unless the lease is still held: call right before writing the sink.

        Reads the state once (a takeover since the last renewal is seen at once).

        Raises:
            LeaseLostError: the lease ran out without renewal, or the state names another owner now (retriable).
            DynamicKafkaError: the state cannot be read to tell.
        """
        with self._lock:
            if self._lost is not None:
                raise self._lost
            if self._clock() >= self._held_until:
                self._lost = self._expired(None)
                raise self._lost
            if self._holding_version() == _ELSEWHERE:
                self._lost = LeaseLostError(
                    f"{self._what} of pipeline {self._store.pipeline_id!r} lost its lease: the state at "
                    f"{self._store.path} names another owner now (it was taken over, committed or abandoned), so "
                    "it stops before writing the sink.",
                    hint="Nothing more is written by this process; whoever holds the lease now finishes the work.",
                )
                raise self._lost

    def stop(self, *, quietly: bool = False) -> int:
        """Stops renewing (waiting for a renewal in flight) and returns the state version to commit against.

        Args:
            quietly: do not raise a lost lease (the holder is failing anyway).

        Raises:
            DynamicKafkaError: the lease was lost (a renewal found another owner, or the lease ran out); the holder
                must not commit.
        """
        with self._lock:
            self._stopped.set()
        if self._thread.is_alive():
            self._thread.join()
        if self._lost is not None and not quietly:
            raise self._lost
        return self._version
