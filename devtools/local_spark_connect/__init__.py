"""A real local Spark Connect server for demos, tests and runs that should start no JVM of their own.

The server is pyspark's own Spark Connect service, launched with pyspark's ``spark-submit``, with the Kafka
connector and Delta Lake (SQL extension and catalog) on its classpath from dynamic-kafka's jar cache. It runs
detached on 127.0.0.1 and survives the process that started it.

Example:
    >>> from devtools.local_spark_connect import start_server, stop_server
    >>> server = start_server(port=15002)  # doctest: +SKIP
    >>> server.remote  # doctest: +SKIP
    'sc://127.0.0.1:15002'
    >>> stop_server()  # doctest: +SKIP
"""

from devtools.local_spark_connect.server import (
    DEFAULT_MASTER,
    DEFAULT_PORT,
    ServerInfo,
    ServerStatus,
    refuse_secret_settings,
    resolve_base_dir,
    server_command,
    server_status,
    start_server,
    stop_server,
)

__all__ = [
    "DEFAULT_MASTER",
    "DEFAULT_PORT",
    "ServerInfo",
    "ServerStatus",
    "refuse_secret_settings",
    "resolve_base_dir",
    "server_command",
    "server_status",
    "start_server",
    "stop_server",
]
