"""The local Spark Connect server's pre-shared token, and how clients of this repository get it.

Every server folder keeps its token in ``token`` (mode 0600), generated on the folder's first start and kept
across restarts (clients holding it keep working). The token reaches the server through its environment
(:data:`~dynamic_kafka.spark.connect_token.TOKEN_ENV`), never its command line, which every user of the machine can
read. A client finds it the documented way only: the process that starts or finds a server exports the token as
``$SPARK_CONNECT_AUTHENTICATE_TOKEN`` to itself and its children (:func:`export_token`), and a token already
there is the one every server it starts uses, so the servers of one test session or demo share it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from typing import TYPE_CHECKING

from dynamic_kafka.spark.connect_token import TOKEN_ENV

TOKEN_FILE = "token"  # noqa: S105 (the file's name, not a token)
"""The file of a server folder that holds its token."""

if TYPE_CHECKING:
    from pathlib import Path


def server_token(base: Path) -> str:
    """The token of the server folder ``base``: ``$SPARK_CONNECT_AUTHENTICATE_TOKEN`` when set, else the one it
    keeps, else a new one; a token it did not keep is written readable by its owner only (never world-readable, not
    even for a moment: the file is created with mode 0600).
    """
    path = base / TOKEN_FILE
    token = os.environ.get(TOKEN_ENV, "")
    with contextlib.suppress(FileNotFoundError):
        kept = path.read_text(encoding="utf-8").strip()
        if kept and kept == (token or kept):
            path.chmod(0o600)
            return kept
    token = token or secrets.token_urlsafe(32)
    partial = base / f".{TOKEN_FILE}.{os.getpid()}.tmp"
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as out:
        out.write(token + "\n")
    partial.replace(path)
    return token


def export_token(base: Path) -> None:
    """Make the token of server folder ``base`` this process's ``$SPARK_CONNECT_AUTHENTICATE_TOKEN`` (and so its
    children's), unless one is set already.
    """
    os.environ.setdefault(TOKEN_ENV, (base / TOKEN_FILE).read_text(encoding="utf-8").strip())
