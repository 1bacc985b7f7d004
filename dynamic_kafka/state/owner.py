"""Who a run's (or a backfill's) process is, as the state names it, and whether it is provably gone.

The owner's text form (``host=... boot=... pid=... pidns=... token=...``) is what the state's head row (and the
backfill lease) holds; :mod:`dynamic_kafka.state.lease` explains how leases use it.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
import socket
from pathlib import Path
from typing import Literal

from dynamic_kafka.frozen import FrozenModel

OwnerOperation = Literal["backfill", "replay", "maintenance"]
"""What holds the state's writer lease (the backfill lease row): a backfill, a dead-letter replay, a maintenance."""

# ``boot=`` and ``op=`` were added later: owners written by earlier versions have neither (they are never taken for
# gone, and a lease without ``op=`` is a backfill's: nothing else took it then).
_OWNER = re.compile(
    r"^host=(?P<host>\S*)(?: boot=(?P<boot>\S+))? pid=(?P<pid>\d+) pidns=(?P<pidns>\S*) token=(?P<token>\S+)"
    r"(?: op=(?P<op>backfill|replay|maintenance))?$"
)
_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
_MACHINE_ID = Path("/etc/machine-id")
# This application's key for hashing the machine id: fixed, so every process on a machine derives the same owner.
_MACHINE_ID_KEY = b"dynamic-kafka run owner 7d3f0b6e2c9a4e51"


class RunOwner(FrozenModel):
    """The process running a run (or a backfill). Its text form is what the state holds.

    ``boot`` tells machines apart where the hostname cannot: the kernel's boot id (new at every boot, so it also
    tells a rebooted machine from the one that wrote the owner), else a keyed hash of the machine id (prefixed
    ``machine-``; never the id itself). An owner written by an earlier version with the raw machine id never
    matches it, so it is never taken for gone: its lease has to run out.
    None for an owner written by an earlier version, or when this machine has neither.
    """

    host: str
    pid: int
    pidns: str
    token: str
    boot: str | None = None
    operation: OwnerOperation | None = None

    @classmethod
    def current(cls, operation: OwnerOperation | None = None) -> RunOwner:
        """This process, with a fresh random token; ``operation`` says what it holds the writer lease for."""
        return cls(
            host=socket.gethostname(),
            boot=_boot_id(),
            pid=os.getpid(),
            pidns=_pid_namespace(),
            token=secrets.token_hex(8),
            operation=operation,
        )

    @classmethod
    def parse(cls, text: str | None) -> RunOwner | None:
        """The owner a state row names; None for no owner or an unknown form."""
        match = _OWNER.match(text or "")
        if match is None:
            return None
        operation: OwnerOperation | None = match["op"]  # type: ignore[assignment]  # the pattern allows only these
        return cls(
            host=match["host"],
            boot=match["boot"],
            pid=int(match["pid"]),
            pidns=match["pidns"],
            token=match["token"],
            operation=operation,
        )

    def text(self) -> str:
        """Return the owner as the text stored in the state."""
        boot = f" boot={self.boot}" if self.boot else ""
        operation = f" op={self.operation}" if self.operation else ""
        return f"host={self.host}{boot} pid={self.pid} pidns={self.pidns} token={self.token}{operation}"

    def describe(self) -> str:
        """For messages: host and pid (the token is for matching only)."""
        return f"host {self.host} pid {self.pid}"

    def is_gone(self) -> bool:
        """Whether this owner's process provably no longer exists: it ran on this very machine, in this boot and
        this pid namespace, and no process has its pid. False whenever that cannot be told: another machine (even
        one with the same hostname), an owner that names no boot (written by an earlier version), a machine whose
        boot cannot be read, another container.
        """
        here = _boot_id()
        if self.boot is None or here is None or self.boot != here:
            return False
        if self.host != socket.gethostname() or self.pidns != _pid_namespace() or self.pid == os.getpid():
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False


def _boot_id() -> str | None:
    """This machine's current boot (the kernel's boot id), else a keyed hash of its machine id; None when neither
    is readable.

    systemd calls the machine id confidential (machine-id(5)): like its ``sd_id128_get_machine_app_specific``, the
    owner holds an HMAC of it keyed with this application's own key, the same on every read on this machine and
    unrelated to what other applications derive from it.
    """
    for path, hashed in ((_BOOT_ID, False), (_MACHINE_ID, True)):
        try:
            value = path.read_text().strip()
        except OSError:
            continue
        if value and not any(c.isspace() for c in value):
            if not hashed:
                return value
            return "machine-" + hmac.new(_MACHINE_ID_KEY, value.encode(), hashlib.sha256).hexdigest()[:32]
    return None


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid").replace(":", "").replace("[", "").replace("]", "")
    except OSError:
        return "unknown"
