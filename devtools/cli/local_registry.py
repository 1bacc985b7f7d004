"""``python -m devtools local-registry up|down|status``: real local Schema Registries from the command line.

The password of ``--basic-auth USER`` comes from ``$DYNAMIC_KAFKA_REGISTRY_PASSWORD`` or stdin, never from the command
line, and goes to the registry's 0600 config file only, never to output or logs. ``--tls`` serves HTTPS with a
certificate signed by a CA made at the first ``up`` (``status`` names its file).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import TYPE_CHECKING

from devtools.cli._service import service_commands
from devtools.local_registry import (
    DEFAULT_REGISTRY_VERSION,
    PASSWORD_ENV,
    parse_basic_auth,
    parse_registry_spec,
    registry_status,
    resolve_base_dir,
    start_registries,
    stop_registries,
)

if TYPE_CHECKING:
    import argparse


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``local-registry`` group to the top-level subparsers."""
    commands = service_commands(
        subparsers,
        "local-registry",
        help_text="start, stop and list local Schema Registries (Apicurio, Confluent-compatible API)",
        description="Real Apicurio Registry processes on 127.0.0.1 serving the Confluent Schema Registry API "
        "under /apis/ccompat/v7, distribution from Maven Central.",
        base_dir_help="folder of the registries (default: $DYNAMIC_KAFKA_LOCAL_REGISTRY_DIR, else ./.local-registry)",
        up_help="start registries (no-op for running ones)",
        down_help="stop registries, keeping their data unless --purge",
        status_help="list registries: running or stopped, URL",
    )
    up, down, status = commands.up, commands.down, commands.status
    up.add_argument("registries", nargs="+", metavar="NAME:PORT", help="registry name and port, e.g. east:18081")
    up.add_argument(
        "--basic-auth",
        metavar="USER",
        help=f"require HTTP basic auth as this user on every API call; its password comes from ${PASSWORD_ENV} "
        "or, when that is unset, the first line of stdin",
    )
    up.add_argument("--tls", action="store_true", help="serve HTTPS only (a self-signed CA made with openssl)")
    up.add_argument(
        "--registry-version", default=DEFAULT_REGISTRY_VERSION, help="Apicurio Registry release (default: %(default)s)"
    )
    up.add_argument("--json", action="store_true", help='print {"NAME": "URL"} instead of lines')
    up.set_defaults(handler=_up)

    down.add_argument("names", nargs="*", metavar="NAME", help="registries to stop (default: all)")
    down.add_argument("--purge", action="store_true", help="also delete the registries' data and logs")
    down.set_defaults(handler=_down)

    status.add_argument("--json", action="store_true", help='print {"NAME": "URL"} of the running registries')
    status.set_defaults(handler=_status)


def _up(args: argparse.Namespace) -> int:
    # Starting a registry (and the first download) takes a while: show progress even without --verbose.
    logging.getLogger("devtools.local_registry").setLevel(logging.INFO)
    specs = [parse_registry_spec(s) for s in args.registries]
    auth = parse_basic_auth(args.basic_auth, _password()) if args.basic_auth is not None else None
    registries = start_registries(
        specs, base_dir=args.base_dir, basic_auth=auth, tls=args.tls, registry_version=args.registry_version
    )
    if args.json:
        print(json.dumps({name: r.url for name, r in registries.items()}))
    else:
        for registry in registries.values():
            print(f"{registry.name}\t{registry.url}")
    return 0


def _password() -> str | None:
    password = os.environ.get(PASSWORD_ENV)
    if password is None and not sys.stdin.isatty():
        password = sys.stdin.readline().rstrip("\r\n")
    return password


def _down(args: argparse.Namespace) -> int:
    stopped = stop_registries(args.names or None, base_dir=args.base_dir, purge=args.purge)
    for name in stopped:
        print(f"{name}\tstopped{' (data deleted)' if args.purge else ''}")
    if not stopped:
        print(f"no local registries under {resolve_base_dir(args.base_dir)}")
    return 0


def _status(args: argparse.Namespace) -> int:
    statuses = registry_status(args.base_dir)
    if args.json:
        # Same shape as `up --json`, so scripts can feed either into a metadata file; stopped ones are left out.
        print(json.dumps({s.registry.name: s.registry.url for s in statuses if s.running}))
        return 0
    if not statuses:
        print(f"no local registries under {resolve_base_dir(args.base_dir)}")
    for s in statuses:
        auth = f"\tbasic auth as {s.registry.basic_auth_user}" if s.registry.basic_auth_user else ""
        auth += f"\tCA {s.registry.ca_file}" if s.registry.ca_file else ""
        print(f"{s.registry.name}\t{'running' if s.running else 'stopped'}\t{s.registry.url}{auth}")
    return 0
