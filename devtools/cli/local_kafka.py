"""``python -m devtools local-kafka up|down|status``: real local Kafka clusters from the command line.

The password of ``--sasl-plain USER`` comes from ``$DYNAMIC_KAFKA_SASL_PASSWORD`` or stdin, never from the command
line (which every user sees in the process list); it is passed to the broker's config and never printed or logged.
``--scram USER`` takes its password the same way from ``$DYNAMIC_KAFKA_SCRAM_PASSWORD``; ``--tls``, ``--mtls``,
``--scram`` and ``--oauthbearer`` each add a listener on a free port (see ``status --json``), with certificates and
PKCS12/JKS stores under ``NAME/tls/`` (their password in the 0600 file ``NAME/tls/store-password``).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import TYPE_CHECKING

from devtools.cli._service import service_commands
from devtools.errors import LocalKafkaError
from devtools.local_kafka import (
    DEFAULT_KAFKA_VERSION,
    SASL_PASSWORD_ENV,
    LocalCluster,
    cluster_status,
    parse_cluster_spec,
    resolve_base_dir,
    sasl_plain_credentials,
    start_clusters,
    stop_clusters,
)
from devtools.local_kafka.security import SCRAM_PASSWORD_ENV, SecurityModes

if TYPE_CHECKING:
    import argparse


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``local-kafka`` group to the top-level subparsers."""
    commands = service_commands(
        subparsers,
        "local-kafka",
        help_text="start, stop and list local single-node Kafka clusters (KRaft)",
        description="Real Apache Kafka brokers on 127.0.0.1, one KRaft node per cluster, jars from Maven Central.",
        base_dir_help="folder of the clusters (default: $DYNAMIC_KAFKA_LOCAL_DIR, else ./.local-kafka)",
        up_help="start clusters (no-op for running ones)",
        down_help="stop clusters, keeping their data unless --purge",
        status_help="list clusters: running or stopped, bootstrap",
    )
    up, down, status = commands.up, commands.down, commands.status
    up.add_argument("clusters", nargs="+", metavar="NAME:PORT", help="cluster name and client port, e.g. east:19092")
    up.add_argument(
        "--sasl-plain",
        metavar="USER",
        help=f"require SASL_PLAINTEXT with PLAIN for this user on the client listener; its password comes from "
        f"${SASL_PASSWORD_ENV} or, when that is unset, the first line of stdin",
    )
    up.add_argument("--tls", action="store_true", help="add a TLS listener (a self-signed CA made with openssl)")
    up.add_argument("--mtls", action="store_true", help="add a TLS listener that requires a client certificate")
    up.add_argument(
        "--scram",
        metavar="USER",
        help=f"add a SASL_SSL listener with SCRAM-SHA-512 for this user; its password comes from "
        f"${SCRAM_PASSWORD_ENV} or, when that is unset, the first line of stdin",
    )
    up.add_argument(
        "--oauthbearer", action="store_true", help="add a SASL_PLAINTEXT listener with OAUTHBEARER (unsecured JWT)"
    )
    up.add_argument(
        "--kerberos",
        action="store_true",
        help="add a SASL_PLAINTEXT listener with GSSAPI and start a local MIT KDC (Debian's krb5-kdc) with keytabs",
    )
    up.add_argument("--kafka-version", default=DEFAULT_KAFKA_VERSION, help="Kafka release (default: %(default)s)")
    up.add_argument("--json", action="store_true", help='print {"NAME": "BOOTSTRAP"} instead of lines')
    up.set_defaults(handler=_up)

    down.add_argument("names", nargs="*", metavar="NAME", help="clusters to stop (default: all)")
    down.add_argument("--purge", action="store_true", help="also delete the clusters' data, config and logs")
    down.set_defaults(handler=_down)

    status.add_argument("--json", action="store_true", help="print JSON instead of a table")
    status.set_defaults(handler=_status)


def _up(args: argparse.Namespace) -> int:
    # Starting brokers (and the first jar download) takes a while: show progress even without --verbose.
    for name in ("devtools.local_kafka", "dynamic_kafka._toolchain.ivy"):
        logging.getLogger(name).setLevel(logging.INFO)
    specs = [parse_cluster_spec(s) for s in args.clusters]
    both_from_stdin = not {SASL_PASSWORD_ENV, SCRAM_PASSWORD_ENV} & os.environ.keys()
    if args.sasl_plain is not None and args.scram is not None and both_from_stdin:
        raise LocalKafkaError(
            f"--sasl-plain and --scram together need one of their passwords in ${SASL_PASSWORD_ENV} or "
            f"${SCRAM_PASSWORD_ENV}: stdin holds only one."
        )
    sasl = (
        sasl_plain_credentials(args.sasl_plain, lambda: _password(SASL_PASSWORD_ENV))
        if args.sasl_plain is not None
        else None
    )
    modes = SecurityModes(
        tls=args.tls, mtls=args.mtls, scram_user=args.scram, oauthbearer=args.oauthbearer, kerberos=args.kerberos
    )
    clusters = start_clusters(
        specs,
        base_dir=args.base_dir,
        sasl_plain=sasl,
        security=modes,
        scram_password=_password(SCRAM_PASSWORD_ENV) if args.scram is not None else None,
        kafka_version=args.kafka_version,
    )
    if args.json:
        print(json.dumps({name: c.bootstrap_servers for name, c in clusters.items()}))
    else:
        for cluster in clusters.values():
            print(f"{cluster.name}\t{cluster.bootstrap_servers}{_security(cluster)}")
    return 0


def _password(variable: str) -> str | None:
    password = os.environ.get(variable)
    if password is None and not sys.stdin.isatty():
        password = sys.stdin.readline().rstrip("\r\n")
    return password


def _down(args: argparse.Namespace) -> int:
    stopped = stop_clusters(args.names or None, base_dir=args.base_dir, purge=args.purge)
    for name in stopped:
        print(f"{name}\tstopped{' (data deleted)' if args.purge else ''}")
    if not stopped:
        print(f"no local clusters under {resolve_base_dir(args.base_dir)}")
    return 0


def _status(args: argparse.Namespace) -> int:
    statuses = cluster_status(args.base_dir)
    if args.json:
        payload = {
            s.cluster.name: {
                "running": s.running,
                "bootstrap_servers": s.cluster.bootstrap_servers,
                "sasl_user": s.cluster.sasl_user,
                "secure_listeners": s.cluster.secure_listeners,
                "scram_user": s.cluster.scram_user,
                "tls_dir": str(s.cluster.tls_dir) if s.cluster.tls_dir else None,
                "kerberos_dir": str(s.cluster.kerberos_dir) if s.cluster.kerberos_dir else None,
                "cluster_id": s.cluster.cluster_id,
            }
            for s in statuses
        }
        print(json.dumps(payload, indent=2))
        return 0
    if not statuses:
        print(f"no local clusters under {resolve_base_dir(args.base_dir)}")
    for s in statuses:
        state = "running" if s.running else "stopped"
        print(f"{s.cluster.name}\t{state}\t{s.cluster.bootstrap_servers}{_security(s.cluster)}")
    return 0


def _security(cluster: LocalCluster) -> str:
    shown = f"\tSASL_PLAINTEXT/PLAIN user {cluster.sasl_user}" if cluster.sasl_user else ""
    return shown + "".join(f"\t{mode} {bootstrap}" for mode, bootstrap in cluster.secure_listeners.items())
