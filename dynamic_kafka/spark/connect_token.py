"""Where a Spark Connect client's pre-shared token comes from, besides the project's ``spark.token``.

A client finds a server's token through documented means only: ``spark.token`` (a secret reference), a ``token``
parameter of the ``spark.remote`` URL, or ``$SPARK_CONNECT_AUTHENTICATE_TOKEN`` (the variable Spark's own
``start-connect-server.sh`` and pyspark's client read). It reads no file another tool keeps.
"""

from __future__ import annotations

import ipaddress

TOKEN_ENV = "SPARK_CONNECT_AUTHENTICATE_TOKEN"  # noqa: S105 (the variable's name, not a token)
"""The server's pre-shared token, as Spark Connect reads it from its environment (pyspark's client reads the
same variable when it is given no token)."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address, IPv6 possibly in brackets) is this machine's loopback."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to any interface
        return False
