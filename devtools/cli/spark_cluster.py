"""``python -m devtools spark-cluster up|down|status``: a local Spark standalone cluster from the command line."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

from devtools.cli._service import service_commands
from devtools.local_spark_cluster import cluster_status, resolve_base_dir, start_cluster, stop_cluster

if TYPE_CHECKING:
    import argparse


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``spark-cluster`` group to the top-level subparsers."""
    commands = service_commands(
        subparsers,
        "spark-cluster",
        help_text="start, stop and show a local Spark standalone cluster (a master and N workers)",
        description="pyspark's own standalone master and workers on 127.0.0.1, each its own process; put a Spark "
        "Connect server in front with `spark-connect up --master spark://127.0.0.1:PORT`.",
        base_dir_help="folder of the cluster (default: $DYNAMIC_KAFKA_SPARK_CLUSTER_DIR, else ./.local-spark-cluster)",
        up_help="start the master and workers (a running cluster: only its stopped workers are started again)",
        down_help="stop the workers and the master",
        status_help="show the master and each worker: running or stopped",
    )
    up, down, status = commands.up, commands.down, commands.status
    up.add_argument("--workers", type=int, default=2, help="how many workers (default: %(default)s)")
    up.add_argument("--worker-cores", type=int, default=1, help="cores per worker (default: %(default)s)")
    up.add_argument("--worker-memory", default="1g", help="memory per worker (default: %(default)s)")
    up.add_argument("--port", type=int, default=None, help="the master's port on 127.0.0.1 (default: a free one)")
    up.add_argument("--web-port", type=int, default=None, help="the master's web UI port (default: a free one)")
    up.add_argument("--json", action="store_true", help='print {"master_url": "spark://127.0.0.1:PORT", ...}')
    up.set_defaults(handler=_up)

    down.set_defaults(handler=_down)

    status.add_argument("--json", action="store_true", help="print JSON instead of lines")
    status.set_defaults(handler=_status)


def _up(args: argparse.Namespace) -> int:
    logging.getLogger("devtools.local_spark_cluster").setLevel(logging.INFO)
    info = start_cluster(
        base_dir=args.base_dir,
        workers=args.workers,
        worker_cores=args.worker_cores,
        worker_memory=args.worker_memory,
        port=args.port,
        web_port=args.web_port,
    )
    if args.json:
        print(json.dumps(info.as_json()))
    else:
        print(f"{info.master_url}\trunning\t{len(info.workers)} worker(s)\tweb {info.web_url}")
    return 0


def _down(args: argparse.Namespace) -> int:
    stopped = stop_cluster(base_dir=args.base_dir)
    if stopped is None:
        print(f"no running Spark standalone cluster under {resolve_base_dir(args.base_dir)}")
    else:
        print(f"{stopped.master_url}\tstopped")
    return 0


def _status(args: argparse.Namespace) -> int:
    status = cluster_status(args.base_dir)
    if args.json:
        body = (
            None
            if status is None
            else {
                **status.info.as_json(),
                "master_running": status.master_running,
                "workers_running": status.workers_running,
            }
        )
        print(json.dumps(body, indent=2))
        return 0
    if status is None:
        print(f"no Spark standalone cluster under {resolve_base_dir(args.base_dir)}")
        return 0
    print(f"{status.info.master_url}\t{'running' if status.master_running else 'stopped'}\tweb {status.info.web_url}")
    for worker in status.info.workers:
        state = "running" if status.workers_running[worker.name] else "stopped"
        print(f"  {worker.name}\t{state}\t127.0.0.1:{worker.port}\tpid {worker.pid}")
    return 0
