"""The local Spark Connect server's pre-shared token: where the server keeps it, and the record that lets a client
on this machine find it.

Every server folder keeps its token in ``token`` (mode 0600), generated on the folder's first start and kept
across restarts (clients holding it keep working). The token reaches the server through its environment
(:data:`~dynamic_kafka.spark.connect_token.TOKEN_ENV`), never its command line, which every user of the machine can
read. At each start, :func:`record_port` records which folder serves the port; the library's
:func:`~dynamic_kafka.spark.connect_token.local_token` reads that record (the client side lives in the library,
which never imports this package).
"""

from __future__ import annotations

import contextlib
import os
import secrets
from typing import TYPE_CHECKING

from dynamic_kafka.spark.connect_token import TOKEN_FILE, port_record

if TYPE_CHECKING:
    from pathlib import Path


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
    record = port_record(port)
    record.parent.mkdir(parents=True, exist_ok=True)
    partial = record.with_name(f".{port}.{os.getpid()}.tmp")
    partial.write_text(f"{base}\n", encoding="utf-8")
    partial.replace(record)
