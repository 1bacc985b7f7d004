"""Who runs a planned run, and for how long: the run's owner and its lease, kept in the state's head row.

A run writes its plan ahead with an owner (host, pid, pid namespace and a random token) and a lease expiry, and
renews the lease while it runs (:class:`LeaseKeeper`, a background thread). Another process that finds the run
planned treats it as crashed (and recovers it) only when

* the lease has expired (the owner stopped renewing: it died, hangs, or lost the state), or
* the owner is provably gone: same host, same pid namespace, and no process with its pid.

The local run lock (one host) comes first; the lease is what stops a second *host* from recovering a run that is
alive. Leases compare wall clocks of different hosts: their skew must stay well below the lease length.
Correctness never depends on the lease alone: every state write is still made against the exact version read, and
the sink write is idempotent per run, so a run taken over after a false expiry cannot land twice; the lease
keeps processes from doing (and failing) the same work twice.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import socket
import threading
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from dynamic_kafka.errors import DynamicKafkaError

if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import datetime, timedelta

    from dynamic_kafka.plan.model import Plan
    from dynamic_kafka.state.store import StateStore

logger = logging.getLogger(__name__)

_OWNER = re.compile(r"^host=(?P<host>\S*) pid=(?P<pid>\d+) pidns=(?P<pidns>\S*) token=(?P<token>\S+)$")


class RunOwner(BaseModel):
    """The process running a run. Its text form is what the state's head row holds."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str
    pid: int
    pidns: str
    token: str

    @classmethod
    def current(cls) -> RunOwner:
        """This process, with a fresh random token."""
        return cls(host=socket.gethostname(), pid=os.getpid(), pidns=_pid_namespace(), token=secrets.token_hex(8))

    @classmethod
    def parse(cls, text: str | None) -> RunOwner | None:
        """The owner a head row names; None for no owner or an unknown form."""
        match = _OWNER.match(text or "")
        if match is None:
            return None
        return cls(host=match["host"], pid=int(match["pid"]), pidns=match["pidns"], token=match["token"])

    def text(self) -> str:
        """Return the owner as the text stored in the state's head row."""
        return f"host={self.host} pid={self.pid} pidns={self.pidns} token={self.token}"

    def describe(self) -> str:
        """For messages: host and pid (the token is for matching only)."""
        return f"host {self.host} pid {self.pid}"

    def is_gone(self) -> bool:
        """Whether this owner's process provably no longer exists: it ran on this host, in this pid namespace, and
        no process has its pid. False whenever that cannot be told (another host or container).
        """
        if self.host != socket.gethostname() or self.pidns != _pid_namespace() or self.pid == os.getpid():
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid").replace(":", "").replace("[", "").replace("]", "")
    except OSError:
        return "unknown"


class LeaseKeeper:
    """Renews a planned run's lease in the background, and tells the run which state version to commit against.

    Every renewal is a state commit (against the version the previous write returned), so the run's own commit must
    expect the keeper's latest version: call :meth:`stop` first, which waits for a renewal in flight.

    Args:
        store: the pipeline's state store.
        plan: the planned run.
        owner: this process.
        lease: how long a lease lasts.
        version: the state version the run's last write returned.
        clock: returns "now" (UTC).
        every: time between renewals (default: a third of ``lease``).
    """

    def __init__(
        self,
        store: StateStore,
        plan: Plan,
        owner: RunOwner,
        lease: timedelta,
        version: int,
        clock: Callable[[], datetime],
        every: timedelta | None = None,
    ) -> None:
        self._store = store
        self._plan = plan
        self._owner = owner
        self._lease = lease
        self._every = every or lease / 3
        self._clock = clock
        self._version = version
        self._lost: DynamicKafkaError | None = None
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, name=f"dynamic-kafka-lease-{plan.pipeline_id}-{plan.run_seq}", daemon=True
        )

    def start(self) -> LeaseKeeper:
        """Start renewing the lease in the background; return the keeper."""
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stopped.wait(self._every.total_seconds()):
            with self._lock:
                if self._stopped.is_set():
                    return
                try:
                    self._version = self._store.lease(
                        self._plan,
                        owner=self._owner.text(),
                        lease_expires_at=self._clock() + self._lease,
                        expected_version=self._version,
                    )
                    logger.debug("run %d: lease renewed (state version %d)", self._plan.run_seq, self._version)
                except DynamicKafkaError as e:
                    # Lost the state (another process took the run over, or the state is unreachable): stop
                    # renewing; the run's own commit fails against the changed version.
                    logger.warning("run %d: lease not renewed, the run will not commit: %s", self._plan.run_seq, e)
                    self._lost = e
                    return

    def stop(self, *, quietly: bool = False) -> int:
        """Stops renewing (waiting for a renewal in flight) and returns the state version to commit against.

        Args:
            quietly: do not raise a failed renewal (the run is failing anyway).

        Raises:
            DynamicKafkaError: a renewal failed (the run lost its lease); the run must not commit.
        """
        with self._lock:
            self._stopped.set()
        if self._thread.is_alive():
            self._thread.join()
        if self._lost is not None and not quietly:
            raise self._lost
        return self._version
