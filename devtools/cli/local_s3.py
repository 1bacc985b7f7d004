"""``python -m devtools local-s3 up|down|status``: a real local S3 API server (moto) from the command line.

``status --json`` (and ``up --json``) print the endpoint and the environment variables that point AWS tools,
delta-rs and dynamic-kafka at the server; ``--env`` prints them as ``export`` lines for ``eval``.
"""

from __future__ import annotations

import json
import logging
import shlex
from typing import TYPE_CHECKING

from devtools.cli._service import service_commands
from devtools.local_s3 import (
    DEFAULT_PORT,
    LocalS3Server,
    resolve_base_dir,
    server_status,
    start_server,
    stop_server,
)

if TYPE_CHECKING:
    import argparse


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``local-s3`` group to the top-level subparsers."""
    commands = service_commands(
        subparsers,
        "local-s3",
        help_text="start, stop and show a local S3 API server (moto) on 127.0.0.1",
        description="A real S3 HTTP API on 127.0.0.1 (moto's standalone server), path-style addressing, "
        "requests signed with the access key made at `up` only (`status --env` prints it), objects kept in memory "
        "until `down`.",
        base_dir_help="folder of the server's record and log (default: $DYNAMIC_KAFKA_LOCAL_S3_DIR, else ./.local-s3)",
        up_help="start the server (no-op if it runs)",
        down_help="stop the server (its objects are gone)",
        status_help="show whether it runs, its endpoint and env",
    )
    up, down, status = commands.up, commands.down, commands.status
    up.add_argument("--port", type=int, default=None, help=f"port on 127.0.0.1 (default: {DEFAULT_PORT})")
    up.add_argument("--bucket", action="append", default=[], metavar="NAME", help="create this bucket (repeatable)")
    up.add_argument("--json", action="store_true", help="print endpoint and environment as JSON")
    up.set_defaults(handler=_up)

    down.add_argument("--purge", action="store_true", help="also delete the server's folder (record and log)")
    down.set_defaults(handler=_down)

    output = status.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print JSON: running, endpoint, env to export")
    output.add_argument("--env", action="store_true", help="print `export NAME=VALUE` lines (for eval)")
    status.set_defaults(handler=_status)


def _payload(server: LocalS3Server, running: bool) -> dict[str, object]:
    return {
        "running": running,
        "endpoint": server.endpoint,
        "port": server.port,
        "pid": server.pid,
        "moto_version": server.moto_version,
        "log_file": str(server.log_file),
        "env": server.environment(),
    }


def _up(args: argparse.Namespace) -> int:
    logging.getLogger("devtools.local_s3").setLevel(logging.INFO)
    server = start_server(port=args.port, base_dir=args.base_dir, buckets=args.bucket)
    if args.json:
        print(json.dumps(_payload(server, True), indent=2))
    else:
        print(f"local-s3\trunning\t{server.endpoint}\t(`python -m devtools local-s3 status --env` for the variables)")
    return 0


def _down(args: argparse.Namespace) -> int:
    server = stop_server(base_dir=args.base_dir, purge=args.purge)
    if server is None:
        print(f"no local S3 server under {resolve_base_dir(args.base_dir)}")
    else:
        print(f"local-s3\tstopped\t{server.endpoint}{' (record and log deleted)' if args.purge else ''}")
    return 0


def _status(args: argparse.Namespace) -> int:
    status = server_status(args.base_dir)
    if status is None:
        if args.json:
            print(json.dumps({"running": False}))
        else:
            print(f"no local S3 server under {resolve_base_dir(args.base_dir)}")
        return 0
    if args.json:
        print(json.dumps(_payload(status.server, status.running), indent=2))
    elif args.env:
        for name, value in status.server.environment().items():
            print(f"export {name}={shlex.quote(value)}")
    else:
        print(f"local-s3\t{'running' if status.running else 'stopped'}\t{status.server.endpoint}")
    return 0
