"""An exclusive advisory file lock shared by processes (several test workers, a CLI next to a test session)."""

from __future__ import annotations

import contextlib
import fcntl
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


@contextlib.contextmanager
def exclusive_lock(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``lock_path`` (created, with its folder, if missing) until the block ends."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("a") as handle:
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
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
