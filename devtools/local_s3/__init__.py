"""A real local S3 API server for demos, tests and benchmarks: moto's standalone server on 127.0.0.1.

It speaks the S3 HTTP API (path-style addressing; conditional ``If-None-Match: *`` puts honoured), accepts only
requests signed with the access key it makes at start (:meth:`LocalS3Server.credentials`), runs detached
and survives the process that started it, and keeps its objects in memory until it stops.

Example:
    >>> from devtools.local_s3 import start_server, stop_server
    >>> server = start_server(port=19000, buckets=["lake"])  # doctest: +SKIP
    >>> server.environment()["AWS_ENDPOINT_URL"]  # doctest: +SKIP
    'http://127.0.0.1:19000'
    >>> stop_server(purge=True)  # doctest: +SKIP
"""

from devtools.local_s3.models import (
    LOCAL_REGION,
    LocalS3Credentials,
    LocalS3Server,
    LocalS3Status,
)
from devtools.local_s3.server import (
    DEFAULT_PORT,
    create_bucket,
    resolve_base_dir,
    server_status,
    start_server,
    stop_server,
)

__all__ = [
    "DEFAULT_PORT",
    "LOCAL_REGION",
    "LocalS3Credentials",
    "LocalS3Server",
    "LocalS3Status",
    "create_bucket",
    "resolve_base_dir",
    "server_status",
    "start_server",
    "stop_server",
]
