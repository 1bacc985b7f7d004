"""The ``spark-server`` commands: the status of the local Spark server runs start with ``spark.local_server``,
and its stop (:mod:`dynamic_kafka.spark.local_server`). Neither needs a project config: the server is the user's,
in the cache folder, shared by every project that sets ``spark.local_server``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse

    from dynamic_kafka.spark.local_server import LocalServerStatus

HELP = "the local Spark server that runs with spark.local_server start and reuse: status, stop"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Registers ``spark-server status`` and ``spark-server stop``."""
    parser = subparsers.add_parser("spark-server", help=HELP, description=HELP)
    commands = parser.add_subparsers(dest="spark_server_command", required=True, metavar="COMMAND")
    status = commands.add_parser("status", help="whether it runs, where, and for how long it has been idle")
    status.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    status.set_defaults(handler=_status)
    stop = commands.add_parser("stop", help="stop it now (a run still using it fails retriably)")
    stop.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    stop.set_defaults(handler=_stop)


def _status(args: argparse.Namespace) -> int:
    from dynamic_kafka.spark.local_server import local_server_status

    status = local_server_status()
    print(status.model_dump_json(indent=2) if args.json else format_status(status))
    return 0


def _stop(args: argparse.Namespace) -> int:
    from dynamic_kafka.spark.local_server import server_folder, stop_local_server

    stopped = stop_local_server()
    if args.json:
        print(json.dumps({"stopped": stopped is not None, "pid": stopped.pid if stopped else None}))
    elif stopped is None:
        print(f"no local Spark server runs (folder {server_folder()})")
    else:
        print(f"stopped the local Spark server at {stopped.remote} (pid {stopped.pid})")
    return 0


def format_status(status: LocalServerStatus) -> str:
    """The status for people: one line saying whether it runs, then where it is and when it stops."""
    server = status.server
    if server is None or not status.running:
        return f"no local Spark server runs (folder {status.folder})"
    use = "in use by a run now" if status.in_use else f"idle for {status.idle_seconds:.0f} s"
    return "\n".join(
        [
            f"local Spark server running at {server.remote} (pid {server.pid}), {use}",
            f"  started     {server.started_at} from pyspark {server.spark_version}, master {server.master}",
            f"  stops after {server.idle_minutes:g} min without a run (spark.local_server_idle_minutes)",
            f"  settings    fingerprint {server.fingerprint}",
            f"  log         {server.log_file}",
        ]
    )
