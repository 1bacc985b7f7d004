"""An exclusive advisory file lock shared by processes (several test workers, a CLI next to a test session).

A flock belongs to the open file description: every process holding a copy of the descriptor holds the lock. The
descriptor is therefore close-on-exec (Python's default, PEP 446, asserted here), so a child started while the lock
is held (spark-submit and its JVM, any subprocess) never inherits it: when the locking process dies, the lock goes
with it, even while a hung child lives on.
"""

from __future__ import annotations

import contextlib
import fcntl
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path
import os


@contextlib.contextmanager
def exclusive_lock(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``lock_path`` (created, with its folder, if missing) until the block ends."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("a") as handle:
        os.set_inheritable(handle.fileno(), False)
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def try_exclusive_lock(lock_path: Path) -> Iterator[bool]:
    """Take an exclusive lock on ``lock_path`` (created, with its folder, if missing) without waiting.

    Yields whether the lock was taken; it is held until the block ends, and the OS releases it when the process
    dies, even by SIGKILL.
    """
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("a") as handle:
        os.set_inheritable(handle.fileno(), False)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
