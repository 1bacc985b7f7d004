"""A local PostgreSQL server (Debian's packages) for Dagster's storage in demos, tests and development.

Example:
    >>> from devtools.local_postgres import start_postgres, stop_postgres
    >>> server = start_postgres(port=15432)  # doctest: +SKIP
    >>> server.url(with_password=False)  # doctest: +SKIP
    'postgresql://dynamic_kafka@127.0.0.1:15432/dagster'
    >>> stop_postgres(purge=True)  # doctest: +SKIP
    True
"""

from devtools.local_postgres.server import (
    DEFAULT_DATABASE,
    DEFAULT_PORT,
    DEFAULT_USER,
    LocalPostgres,
    PostgresStatus,
    find_bin_dir,
    is_running,
    postgres_status,
    resolve_base_dir,
    start_postgres,
    stop_postgres,
)

__all__ = [
    "DEFAULT_DATABASE",
    "DEFAULT_PORT",
    "DEFAULT_USER",
    "LocalPostgres",
    "PostgresStatus",
    "find_bin_dir",
    "is_running",
    "postgres_status",
    "resolve_base_dir",
    "start_postgres",
    "stop_postgres",
]
