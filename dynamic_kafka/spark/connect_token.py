"""How a client on this machine finds the pre-shared token of a local Spark Connect server.

A local server (the repository's development service, ``python -m devtools spark-connect``) keeps its token in the
``token`` file (mode 0600) of its folder, and at each start records in this machine's cache which folder serves
its port (``<cache>/spark-connect-ports/<port>``, a path, no secret). So a client given only
``sc://127.0.0.1:PORT`` finds the token (:func:`local_token`), whatever folder the server runs from. This module
is the reading side of that record, used by :mod:`dynamic_kafka.spark.remote`; the server writes it through
:func:`port_record`.
"""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

from dynamic_kafka._toolchain.cache import cache_dir

TOKEN_ENV = "SPARK_CONNECT_AUTHENTICATE_TOKEN"  # noqa: S105 (the variable's name, not a token)
"""The server's pre-shared token, as Spark Connect reads it from its environment (pyspark's client reads the
same variable when it is given no token)."""
TOKEN_FILE = "token"  # noqa: S105 (the file's name, not a token)
"""The file of a server folder that holds its token."""
STATE_FILE = "server.json"
"""The file of a server folder that records the server (its ``port`` among others)."""


def port_record(port: int) -> Path:
    """The file of this machine's cache that names the folder of the local server listening on ``port``."""
    return cache_dir() / "spark-connect-ports" / str(port)


def local_token(host: str, port: int) -> str | None:
    """The token of the local server listening on ``port``, when ``host`` is this machine's loopback and a server
    was started on that port from this machine's cache; else None.

    The recorded folder must still record a server on that port, so a port taken over by a server of another
    folder is not given this one's token.
    """
    if not is_loopback(host):
        return None
    try:
        base = Path(port_record(port).read_text(encoding="utf-8").strip())
        if json.loads((base / STATE_FILE).read_text(encoding="utf-8")).get("port") != port:
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
