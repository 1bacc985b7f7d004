"""Start, stop and list real local Schema Registries (Apicurio Registry, Confluent-compatible API) under a folder.

Layout of a registry NAME under the base folder (``./.local-registry`` unless ``$DYNAMIC_KAFKA_LOCAL_REGISTRY_DIR``
or an argument says otherwise)::

    NAME/registry.json   the LocalRegistry, as JSON
    NAME/registry.pid    the registry's pid while it runs
    NAME/registry.log    the registry's log (stdout and stderr)
    NAME/data/           the H2 database file: schemas and their ids survive ``down`` then ``up``
    NAME/config/application.properties  basic-auth user and password, TLS files, if any (mode 0600; Quarkus
                         reads it from the working folder, so the password is in no command line or environment)
    NAME/tls/            with ``tls``: the CA (``ca.pem``, what clients trust) and the server's certificate, made
                         by the local broker's tooling (:func:`devtools.local_kafka.security.make_certificates`)

Invariants: ``start_registries`` on a running registry with the same port changes nothing; a registry listens on
127.0.0.1 only; its schema ids are Apicurio content ids, the ids Confluent serializers write into records.

Why one module of this size: a local service's whole life (fetch, prepare, start, wait, status, stop, delete),
each step with the error message that names the fix, as for the other local services.
"""

from __future__ import annotations

import logging
import re
import ssl
import time
import urllib.error
import urllib.request
from typing import TYPE_CHECKING

from devtools.errors import LocalKafkaError, LocalRegistryError
from devtools.lifecycle import ServiceKind, is_running
from devtools.local_kafka.properties import parse_cluster_spec
from devtools.local_kafka.security import make_certificates
from devtools.local_registry.distribution import (
    DEFAULT_REGISTRY_VERSION,
    resolve_registry_distribution,
    runner_jar,
)
from devtools.local_registry.models import CCOMPAT_PATH, LocalRegistry, RegistryStatus
from dynamic_kafka._toolchain import process
from dynamic_kafka._toolchain.filelock import exclusive_lock
from dynamic_kafka._toolchain.java import find_java

if TYPE_CHECKING:
    from pathlib import Path

logger = logging.getLogger(__name__)

LOCAL_DIR_ENV = "DYNAMIC_KAFKA_LOCAL_REGISTRY_DIR"
PASSWORD_ENV = "DYNAMIC_KAFKA_REGISTRY_PASSWORD"  # noqa: S105 (the variable's name, not a password)
# Measured on the 2-core box: C1 only (TieredStopAtLevel=1) and SerialGC start Quarkus faster and use less memory
# than the defaults, and a registry serving tests and demos never needs C2's peak throughput.
REGISTRY_JVM_OPTS = (
    "-Xms64m",
    "-Xmx384m",
    "-XX:TieredStopAtLevel=1",
    "-XX:+UseSerialGC",
    "-Xshare:auto",
    "-Djava.awt.headless=true",
)
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0
KIND = ServiceKind(
    label="local registry",
    dir_env=LOCAL_DIR_ENV,
    default_dir=".local-registry",
    state_file="registry.json",
    pid_file="registry.pid",
    error=LocalRegistryError,
)
_MARKER_PROPERTY = "dynamic_kafka.registry.dir"
_USER_RE = re.compile(r"[a-z][a-z0-9]{0,31}")
# Printable ASCII without the characters a .properties value would need escaped.


def parse_basic_auth(user: str, password: str | None) -> tuple[str, str]:
    r"""Check the user and password of a registry that requires HTTP basic auth (``--basic-auth USER``, the
    password from ``$DYNAMIC_KAFKA_REGISTRY_PASSWORD`` or stdin, never from the command line).

    Raises:
        LocalRegistryError: the user holds a ``:`` (a password on the command line, visible in the process list),
            is not 1-32 of ``[a-z0-9]`` starting with a letter, no password was given, or the password is not
            1-256 printable ASCII characters other than ``\\``, ``:``, ``=`` and ``#``. The message never
            contains the password.
    """
    if ":" in user:
        raise LocalRegistryError(
            "--basic-auth takes the user only: a password on the command line is visible to every user in the "
            f"process list. Put the password in ${PASSWORD_ENV} or pipe it on stdin."
        )
    if not _USER_RE.fullmatch(user):
        raise LocalRegistryError(
            f"invalid --basic-auth user {user!r}; use 1-32 of a-z and 0-9, starting with a letter."
        )
    if not password:
        raise LocalRegistryError(f"--basic-auth {user} needs a password: set ${PASSWORD_ENV} or pipe it on stdin.")
    if not re.fullmatch(r"[!-~]{1,256}", password) or any(c in password for c in "\\:=#"):
        raise LocalRegistryError(
            "invalid --basic-auth password; use 1-256 printable ASCII characters other than \\ : = # (not shown)."
        )
    return user, password


def resolve_base_dir(base_dir: Path | None = None) -> Path:
    """Return the base folder: the argument, else ``$DYNAMIC_KAFKA_LOCAL_REGISTRY_DIR``, else ``./.local-registry``."""
    return KIND.resolve_base_dir(base_dir)


def parse_registry_spec(spec: str) -> tuple[str, int]:
    """Parse ``NAME:PORT`` into ``(name, port)``.

    Raises:
        LocalRegistryError: the spec is not ``NAME:PORT`` with a folder-safe name and a port in 1..65535.
    """
    try:
        return parse_cluster_spec(spec)
    except Exception as e:  # the Kafka tooling's error names clusters; say registry instead
        raise LocalRegistryError(
            f"invalid registry spec {spec!r}; expected NAME:PORT, e.g. east:18081 (NAME: letters, digits, _ and -; "
            "PORT: 1-65535)."
        ) from e


def start_registries(
    specs: list[tuple[str, int]],
    *,
    base_dir: Path | None = None,
    basic_auth: tuple[str, str] | None = None,
    tls: bool = False,
    registry_version: str = DEFAULT_REGISTRY_VERSION,
    start_timeout_s: float = START_TIMEOUT_S,
) -> dict[str, LocalRegistry]:
    """Start one Apicurio Registry per ``(name, port)`` and wait until each serves the Confluent-compatible API.

    A registry that already runs on the same port is left alone. A stopped registry restarts on its kept data.
    If any registry fails to come up, the registries this call started are stopped again.

    Args:
        specs: ``(name, port)`` pairs; the registry binds ``127.0.0.1:port``.
        base_dir: folder holding the registries (see :func:`resolve_base_dir`).
        basic_auth: ``(user, password)``: every API call then requires HTTP basic auth as this user.
        tls: serve HTTPS only, with a certificate for ``127.0.0.1`` signed by a CA made at the first start
            (``LocalRegistry.ca_file``, kept across restarts so clients keep trusting it).
        registry_version: the Apicurio Registry release, fetched from Maven Central on first use.
        start_timeout_s: how long each registry may take to answer.

    Returns:
        The registries by name.

    Raises:
        LocalRegistryError: bad specs, a port in use, a registry running with other settings, certificates that
            could not be made, or a registry that did not come up in time (the message holds the end of its log).
        ToolchainError: no Java 17+, or the distribution could not be downloaded.

    Example:
        >>> start_registries([("east", 18081)])["east"].url  # doctest: +SKIP
        'http://127.0.0.1:18081/apis/ccompat/v7'
    """
    KIND.check_specs(specs, noun="registry", plural="registries")
    base = resolve_base_dir(base_dir)
    result: dict[str, LocalRegistry] = {}
    with exclusive_lock(base / ".lock"):
        to_start = []
        for name, port in specs:
            running = _running_registry(base / name, port, basic_auth, tls)
            if running is not None:
                logger.info("local registry %s already runs at %s", name, running.url)
                result[name] = running
            else:
                to_start.append((name, port))
        if to_start:
            result.update(_start_new(base, to_start, basic_auth, tls, registry_version, start_timeout_s))
    return {name: result[name] for name, _ in specs}


def stop_registries(
    names: list[str] | None = None,
    *,
    base_dir: Path | None = None,
    purge: bool = False,
    stop_timeout_s: float = STOP_TIMEOUT_S,
) -> list[str]:
    """Stop local registries (SIGTERM, then SIGKILL after ``stop_timeout_s``), keeping their data unless ``purge``.

    Args:
        names: the registries to stop; None stops every registry under the base folder.
        base_dir: folder holding the registries (see :func:`resolve_base_dir`).
        purge: also delete each registry's folder (data, log).
        stop_timeout_s: how long a registry may take to shut down cleanly before it is killed.

    Returns:
        The names of the registries handled, whether they were running or not.

    Raises:
        LocalRegistryError: a named registry does not exist under the base folder.
    """
    base = resolve_base_dir(base_dir)
    return KIND.stop_named(
        base,
        names,
        lambda: [(r.name, r.registry_dir, r) for r in _load_all(base)],
        lambda r: _stop_one(r, stop_timeout_s),
        purge=purge,
    )


def registry_status(base_dir: Path | None = None) -> list[RegistryStatus]:
    """List the registries under the base folder, sorted by name, with whether each is running."""
    base = resolve_base_dir(base_dir)
    return [RegistryStatus(registry=r, running=_is_running(r)) for r in sorted(_load_all(base), key=lambda r: r.name)]


def _running_registry(
    registry_dir: Path, port: int, basic_auth: tuple[str, str] | None, tls: bool
) -> LocalRegistry | None:
    registry = _load(registry_dir)
    if registry is None or not _is_running(registry):
        return None
    wanted_user = basic_auth[0] if basic_auth else None
    if (
        registry.port != port
        or registry.basic_auth_user != wanted_user
        or _config_text(registry_dir, basic_auth, tls) != _read_config_file(registry_dir)
    ):
        auth = f"basic-auth user {registry.basic_auth_user!r}" if registry.basic_auth_user else "no auth"
        scheme = "https" if registry.ca_file else "http"
        raise LocalRegistryError(
            f"local registry {registry.name!r} already runs with other settings (port {registry.port}, {scheme}, "
            f"{auth}).",
            hint=f"Stop it first: `python -m devtools local-registry down {registry.name}`.",
        )
    return registry


def _start_new(
    base: Path,
    specs: list[tuple[str, int]],
    basic_auth: tuple[str, str] | None,
    tls: bool,
    registry_version: str,
    start_timeout_s: float,
) -> dict[str, LocalRegistry]:
    busy = [f"{port} (registry {name})" for name, port in specs if not process.port_is_free(port)]
    if busy:
        raise LocalRegistryError(
            f"port {', '.join(busy)} is already in use on 127.0.0.1 by another process.",
            hint="Pick another port or stop what holds it (`ss -ltnp` shows it).",
        )
    java = find_java()
    dist = resolve_registry_distribution(registry_version)
    started: list[LocalRegistry] = []
    try:
        for name, port in specs:
            started.append(_launch(base / name, name, port, basic_auth, tls, registry_version, java, dist))
        deadline = time.monotonic() + start_timeout_s
        for registry in started:
            _wait_until_serving(registry, deadline)
    except BaseException:
        for registry in started:
            _stop_one(registry, STOP_TIMEOUT_S)
        raise
    return {r.name: r for r in started}


def _launch(
    registry_dir: Path,
    name: str,
    port: int,
    basic_auth: tuple[str, str] | None,
    tls: bool,
    registry_version: str,
    java: Path,
    dist: Path,
) -> LocalRegistry:
    registry_dir.mkdir(parents=True, exist_ok=True)
    if tls:
        try:
            make_certificates(registry_dir / "tls", java.parent / "keytool", owner=f"local registry {name!r}")
        except LocalKafkaError as e:
            raise LocalRegistryError(str(e)) from e
    _write_config_file(registry_dir, basic_auth, tls)
    data_dir = registry_dir / "data"
    data_dir.mkdir(exist_ok=True)
    log_file = registry_dir / "registry.log"
    argv = [
        str(java),
        *REGISTRY_JVM_OPTS,
        # Marks the process as this registry's, so a reused pid never counts as a running registry.
        f"-D{_MARKER_PROPERTY}={registry_dir}",
        "-Dquarkus.http.host=127.0.0.1",
        # With TLS the same port serves HTTPS (the application.properties file) and plain HTTP is not opened.
        f"-Dquarkus.http.{'ssl-port' if tls else 'port'}={port}",
        # A file database instead of the default in-memory one: schemas and ids survive a restart, as a real
        # registry's do (Confluent's keeps them in a Kafka topic).
        f"-Dapicurio.datasource.url=jdbc:h2:file:{data_dir / 'registry'}",
        "-Dquarkus.log.console.color=false",
        "-jar",
        str(dist / runner_jar(registry_version)),
    ]
    pid = KIND.spawn(argv, folder=registry_dir, log_file=log_file)
    registry = LocalRegistry(
        name=name,
        port=port,
        url=f"{'https' if tls else 'http'}://127.0.0.1:{port}{CCOMPAT_PATH}",
        pid=pid,
        basic_auth_user=basic_auth[0] if basic_auth else None,
        ca_file=registry_dir / "tls" / "ca.pem" if tls else None,
        registry_version=registry_version,
        registry_dir=registry_dir,
        log_file=log_file,
    )
    KIND.save(registry_dir, registry)
    logger.info("local registry %s: started pid %d for %s", name, pid, registry.url)
    return registry


def _config_text(registry_dir: Path, basic_auth: tuple[str, str] | None, tls: bool) -> str:
    lines: list[str] = []
    if basic_auth is not None:
        user, password = basic_auth
        # Quarkus' embedded users (the properties-file realm in Apicurio's lib/) plus a policy that every API path
        # needs an authenticated user: Apicurio's own basic auth would need an OIDC token endpoint.
        lines += [
            "quarkus.http.auth.basic=true",
            "quarkus.security.users.embedded.enabled=true",
            "quarkus.security.users.embedded.plain-text=true",
            f"quarkus.security.users.embedded.users.{user}={password}",
            f"quarkus.security.users.embedded.roles.{user}=sr-admin",
            "quarkus.http.auth.permission.registry.paths=/apis/*",
            "quarkus.http.auth.permission.registry.policy=authenticated",
        ]
    if tls:
        tls_dir = registry_dir / "tls"
        lines += [
            f"quarkus.http.ssl.certificate.files={tls_dir / 'broker.crt'}",
            f"quarkus.http.ssl.certificate.key-files={tls_dir / 'broker.key'}",
            "quarkus.http.insecure-requests=disabled",
        ]
    return "\n".join([*lines, ""]) if lines else ""


def _read_config_file(registry_dir: Path) -> str:
    path = registry_dir / "config" / "application.properties"
    return path.read_text() if path.is_file() else ""


def _write_config_file(registry_dir: Path, basic_auth: tuple[str, str] | None, tls: bool) -> None:
    path = registry_dir / "config" / "application.properties"
    text = _config_text(registry_dir, basic_auth, tls)
    if not text:
        path.unlink(missing_ok=True)
        return
    path.parent.mkdir(exist_ok=True)
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text(text)


def _wait_until_serving(registry: LocalRegistry, deadline: float) -> None:
    context = ssl.create_default_context(cafile=str(registry.ca_file)) if registry.ca_file else None

    def probe() -> str | None:
        if not process.accepts_connections(registry.port):
            return "the port never accepted a connection"
        try:
            # The URL is built here from 127.0.0.1 and a port: http, or https checked against the registry's CA.
            with urllib.request.urlopen(f"{registry.url}/subjects", timeout=5, context=context) as response:  # noqa: S310
                return None if response.status == 200 else f"HTTP {response.status}"
        except urllib.error.HTTPError as e:
            # Answering "who are you?" on the API path means the registry is up and enforcing basic auth.
            return None if e.code == 401 and registry.basic_auth_user else f"HTTP {e.code}"
        except (urllib.error.URLError, OSError) as e:
            return str(e)

    assert registry.pid is not None  # a registry just launched has its pid
    KIND.wait_until_ready(
        registry.pid,
        _marker(registry),
        probe,
        deadline=deadline,
        not_ready=lambda why: _not_serving(registry, why),
        interval_s=0.2,
    )
    auth = " (basic auth)" if registry.basic_auth_user else ""
    logger.info("local registry %s: serving at %s%s", registry.name, registry.url, auth)


def _not_serving(registry: LocalRegistry, reason: str) -> LocalRegistryError:
    return LocalRegistryError(
        f"local registry {registry.name!r} at {registry.url} did not come up: {reason}. "
        f"Last lines of {registry.log_file}:\n{process.tail(registry.log_file, 30)}"
    )


def _stop_one(registry: LocalRegistry, timeout_s: float) -> None:
    KIND.stop(registry.registry_dir, registry.pid, _marker(registry), timeout_s=timeout_s)


def _is_running(registry: LocalRegistry) -> bool:
    return is_running(registry.pid, _marker(registry))


def _marker(registry: LocalRegistry) -> str:
    return f"-D{_MARKER_PROPERTY}={registry.registry_dir}"


def _load(registry_dir: Path) -> LocalRegistry | None:
    return KIND.load(registry_dir, LocalRegistry)


def _load_all(base: Path) -> list[LocalRegistry]:
    if not base.is_dir():
        return []
    return [r for d in sorted(base.iterdir()) if d.is_dir() and (r := _load(d)) is not None]
