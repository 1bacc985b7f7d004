"""The local Spark Connect server's pre-shared token: where it is kept and how a client on this machine finds it.

Every server folder keeps its token in ``token`` (mode 0600), generated on the folder's first start and kept
across restarts (clients holding it keep working). The token reaches the server through its environment
(:data:`TOKEN_ENV`), never its command line, which every user of the machine can read. At each start, this
machine's cache records which folder serves the port (``<cache>/spark-connect-ports/<port>``, a path, no secret),
so a client given only ``sc://127.0.0.1:PORT`` finds the token (:func:`local_token`), whatever folder the server
runs from (the demo's, a benchmark's, a test session's).

Separate from :mod:`~dynamic_kafka.local_spark_connect.server` because clients
(:mod:`dynamic_kafka.spark.remote`) read it, and the server module builds on the Spark session module.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import secrets
from pathlib import Path

from dynamic_kafka._toolchain.cache import cache_dir

TOKEN_ENV = "SPARK_CONNECT_AUTHENTICATE_TOKEN"  # noqa: S105 (the variable's name, not a token)
"""The server's pre-shared token, as Spark Connect reads it from its environment (pyspark's client reads the
same variable when it is given no token)."""
TOKEN_FILE = "token"  # noqa: S105 (the file's name, not a token)
_STATE_FILE = "server.json"


def server_token(base: Path) -> str:
    """The token of the server folder ``base``: the one it keeps, else a new one written readable by its owner
    only (never world-readable, not even for a moment: the file is created with mode 0600).
    """
    path = base / TOKEN_FILE
    with contextlib.suppress(FileNotFoundError):
        token = path.read_text(encoding="utf-8").strip()
        if token:
            path.chmod(0o600)
            return token
    token = secrets.token_urlsafe(32)
    partial = base / f".{TOKEN_FILE}.{os.getpid()}.tmp"
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as out:
        out.write(token + "\n")
    partial.replace(path)
    return token


def record_port(base: Path, port: int) -> None:
    """Records in this machine's cache that the server of folder ``base`` listens on ``port``."""
    folder = _ports_dir()
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f".{port}.{os.getpid()}.tmp"
    partial.write_text(f"{base}\n", encoding="utf-8")
    partial.replace(folder / str(port))


def local_token(host: str, port: int) -> str | None:
    """The token of the local server listening on ``port``, when ``host`` is this machine's loopback and a server
    was started on that port from this machine's cache; else None.

    The recorded folder must still record a server on that port, so a port taken over by a server of another
    folder is not given this one's token.
    """
    if not is_loopback(host):
        return None
    try:
        base = Path((_ports_dir() / str(port)).read_text(encoding="utf-8").strip())
        if json.loads((base / _STATE_FILE).read_text(encoding="utf-8")).get("port") != port:
            return None
        return (base / TOKEN_FILE).read_text(encoding="utf-8").strip() or None
    except (OSError, ValueError):
        return None


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address, IPv6 possibly in brackets) is this machine's loopback."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to any interface
        return False


def _ports_dir() -> Path:
    return cache_dir() / "spark-connect-ports"
