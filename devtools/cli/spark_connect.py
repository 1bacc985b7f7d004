"""``python -m devtools spark-connect up|down|status``: a local Spark Connect server from the command line."""

from __future__ import annotations

import json
import logging
from argparse import ArgumentTypeError
from typing import TYPE_CHECKING

from devtools.cli._service import service_commands
from devtools.local_spark_connect import (
    DEFAULT_MASTER,
    DEFAULT_PORT,
    resolve_base_dir,
    server_status,
    start_server,
    stop_server,
)

if TYPE_CHECKING:
    import argparse


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``spark-connect`` group to the top-level subparsers."""
    commands = service_commands(
        subparsers,
        "spark-connect",
        help_text="start, stop and show a local Spark Connect server",
        description="pyspark's own Spark Connect server on 127.0.0.1, with the Kafka connector and Delta Lake.",
        base_dir_help="folder of the server (default: $DYNAMIC_KAFKA_SPARK_CONNECT_DIR, else ./.local-spark-connect)",
        up_help="start the server (no-op if it runs)",
        down_help="stop the server",
        status_help="show the server: running or stopped, remote",
    )
    up, down, status = commands.up, commands.down, commands.status
    up.add_argument("--port", type=int, default=DEFAULT_PORT, help="gRPC port on 127.0.0.1 (default: %(default)s)")
    up.add_argument(
        "--master", default=DEFAULT_MASTER, help="local[*], local[N] or spark://HOST:PORT (default: %(default)s)"
    )
    up.add_argument("--driver-memory", default="2g", help="the server JVM's heap (default: %(default)s)")
    up.add_argument("--ui", action="store_true", help="serve Spark's UI (port 4040 and up)")
    up.add_argument(
        "--conf",
        action="append",
        type=_setting,
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting of the server, e.g. spark.cores.max=4 on a shared standalone cluster (repeatable; "
        "it is on the server's command line, so one that looks like a secret is refused; the server's "
        "authentication token is generated into the `token` file of its folder)",
    )
    up.add_argument("--json", action="store_true", help='print {"remote": "sc://127.0.0.1:PORT", ...}')
    up.set_defaults(handler=_up)

    down.set_defaults(handler=_down)

    status.add_argument("--json", action="store_true", help="print JSON instead of a line")
    status.set_defaults(handler=_status)


def _up(args: argparse.Namespace) -> int:
    # The first start downloads jars and a start takes seconds: show progress even without --verbose.
    for name in ("devtools.local_spark_connect", "dynamic_kafka._toolchain.ivy"):
        logging.getLogger(name).setLevel(logging.INFO)
    info = start_server(
        base_dir=args.base_dir,
        port=args.port,
        master=args.master,
        driver_memory=args.driver_memory,
        ui=args.ui,
        conf=dict(args.conf),
    )
    if args.json:
        print(json.dumps(info.as_json(running=True)))
    else:
        print(f"{info.remote}\trunning\tmaster {info.master}\tpid {info.pid}")
    return 0


def _setting(text: str) -> tuple[str, str]:
    key, equals, value = text.partition("=")
    if not equals or not key.strip():
        raise ArgumentTypeError("expected KEY=VALUE (a Spark setting such as spark.cores.max=4)")
    return key.strip(), value


def _down(args: argparse.Namespace) -> int:
    stopped = stop_server(base_dir=args.base_dir)
    if stopped is None:
        print(f"no running Spark Connect server under {resolve_base_dir(args.base_dir)}")
    else:
        print(f"{stopped.remote}\tstopped")
    return 0


def _status(args: argparse.Namespace) -> int:
    status = server_status(args.base_dir)
    if args.json:
        print(json.dumps(None if status is None else status.info.as_json(running=status.running), indent=2))
        return 0
    if status is None:
        print(f"no Spark Connect server under {resolve_base_dir(args.base_dir)}")
        return 0
    state = "running" if status.running else "stopped"
    print(f"{status.info.remote}\t{state}\tmaster {status.info.master}\tlog {status.info.log_file}")
    return 0
