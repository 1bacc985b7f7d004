"""``python -m devtools local-postgres up|down|status``: a local PostgreSQL server (e.g. for Dagster's storage).

The password is generated at the first ``up`` into ``<base dir>/password`` (0600). It is printed only by
``--json`` (inside the connection URL), never logged, never on a command line.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

from devtools.cli._service import service_commands
from devtools.local_postgres import (
    LocalPostgres,
    postgres_status,
    resolve_base_dir,
    start_postgres,
    stop_postgres,
)

if TYPE_CHECKING:
    import argparse


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``local-postgres`` group to the top-level subparsers."""
    commands = service_commands(
        subparsers,
        "local-postgres",
        help_text="start, stop and show a local PostgreSQL server (Debian's packages, 127.0.0.1)",
        description="A PostgreSQL server on 127.0.0.1 for Dagster's run, event and schedule storage.",
        base_dir_help="folder of the server (default: $DYNAMIC_KAFKA_LOCAL_POSTGRES_DIR, else ./.local-postgres)",
        up_help="initialize (first time) and start the server",
        down_help="stop the server, keeping its data unless --purge",
        status_help="running or stopped, and where",
    )
    up, down, status = commands.up, commands.down, commands.status
    up.add_argument("--port", type=int, default=None, help="TCP port (default: the last one, else 15432)")
    up.add_argument("--json", action="store_true", help="print the connection details, URL with password")
    up.set_defaults(handler=_up)

    down.add_argument("--purge", action="store_true", help="also delete the data, password and log")
    down.set_defaults(handler=_down)

    status.add_argument("--json", action="store_true", help="print the connection details, URL with password")
    status.set_defaults(handler=_status)


def _details(server: LocalPostgres, running: bool) -> dict[str, object]:
    return {
        "running": running,
        "url": server.url(),
        "host": server.host,
        "port": server.port,
        "user": server.user,
        "database": server.database,
        "password_file": str(server.password_file),
    }


def _up(args: argparse.Namespace) -> int:
    logging.getLogger("devtools.local_postgres").setLevel(logging.INFO)
    server = start_postgres(base_dir=args.base_dir, port=args.port)
    if args.json:
        print(json.dumps(_details(server, True), indent=2))
    else:
        print(f"running\t{server.url(with_password=False)}\tpassword in {server.password_file}")
    return 0


def _down(args: argparse.Namespace) -> int:
    stopped = stop_postgres(base_dir=args.base_dir, purge=args.purge)
    where = resolve_base_dir(args.base_dir)
    state = "stopped" if stopped else "not running"
    print(f"{state}\t{where}{' (data deleted)' if args.purge else ''}")
    return 0


def _status(args: argparse.Namespace) -> int:
    status = postgres_status(args.base_dir)
    if status is None:
        if args.json:
            print(json.dumps({"running": False}))
        else:
            print(f"no local PostgreSQL under {resolve_base_dir(args.base_dir)}")
        return 0
    if args.json:
        print(json.dumps(_details(status.server, status.running), indent=2))
        return 0
    state = "running" if status.running else "stopped"
    print(f"{state}\t{status.server.url(with_password=False)}\tpassword in {status.server.password_file}")
    return 0
