"""Operating-system helpers for the local brokers: ports, detached processes, liveness and log tails.

A broker is identified by its pid *and* a marker in its command line (the path of its server.properties), so a pid
reused by an unrelated process after a reboot never counts as a running broker.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

_POLL_S = 0.1
# Brokers started by this process stay our children until they exit; holding their Popen objects lets us reap
# them (no zombies, no ResourceWarning) when a test session stops the brokers it started.
_children: dict[int, subprocess.Popen[bytes]] = {}


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Return True if nothing listens on (or holds) ``host:port``.

    SO_REUSEADDR mirrors what the JVM sets on its server sockets, so a port left in TIME_WAIT by a stopped broker
    counts as free, as it is for the broker.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """Return a port the kernel says is free now (another process may still take it before it is used)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
    return port


def accepts_connections(port: int, host: str = "127.0.0.1") -> bool:
    """Return True if a TCP connection to ``host:port`` succeeds now."""
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def spawn_detached(argv: list[str], *, log_file: Path, cwd: Path, env: dict[str, str] | None = None) -> int:
    """Start ``argv`` in a new session with stdout and stderr appended to ``log_file``; return its pid.

    The new session keeps the process alive when the caller's terminal or process group goes away. ``env``
    defaults to this process's environment.
    """
    with log_file.open("ab") as log:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    _children[proc.pid] = proc
    return proc.pid


def is_alive(pid: int, marker: str) -> bool:
    """Return True if process ``pid`` runs and its command line contains ``marker``."""
    child = _children.get(pid)
    if child is not None:
        return child.poll() is None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return False
    except OSError:
        # No procfs (macOS): fall back to "some process has this pid".
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return marker.encode() in cmdline


def terminate(pid: int, marker: str, *, timeout_s: float) -> bool:
    """Stop a process: SIGTERM, wait up to ``timeout_s``, then SIGKILL.

    Returns:
        True if the process exited on SIGTERM, False if it had to be killed.
    """
    if not is_alive(pid, marker):
        return True
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if wait_for_exit(pid, marker, timeout_s=timeout_s):
        return True
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    wait_for_exit(pid, marker, timeout_s=10.0)
    return False


def wait_until_closed(port: int, *, timeout_s: float, host: str = "127.0.0.1") -> bool:
    """Return True once ``host:port`` refuses connections, False if it still accepts them after ``timeout_s``.

    A process leaves procfs' command line before the kernel closes its sockets, so "gone" by :func:`is_alive` is
    not yet "its port is free".
    """
    return _wait_while(lambda: accepts_connections(port, host), timeout_s)


def wait_for_exit(pid: int, marker: str, *, timeout_s: float) -> bool:
    """Return True once the process is gone, False if it still runs after ``timeout_s``."""
    return _wait_while(lambda: is_alive(pid, marker), timeout_s)


def _wait_while(holds: Callable[[], bool], timeout_s: float) -> bool:
    """Poll ``holds`` until it is False (True) or ``timeout_s`` has passed with it still True (False)."""
    deadline = time.monotonic() + timeout_s
    while holds():
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL_S)
    return True


def exit_code(pid: int) -> int | None:
    """Return the exit code of a child started by :func:`spawn_detached` that has exited, else None."""
    child = _children.get(pid)
    return child.returncode if child is not None else None


def tail(path: Path, lines: int = 30) -> str:
    """Return the last ``lines`` lines of a text file, or a note if it does not exist."""
    try:
        with path.open(errors="replace") as handle:
            return "".join(deque(handle, maxlen=lines)).rstrip("\n")
    except FileNotFoundError:
        return f"(no log at {path})"
