"""Start, stop and inspect a local Spark Connect server under a base folder.

Layout of the base folder (``./.local-spark-connect`` unless ``$DYNAMIC_KAFKA_SPARK_CONNECT_DIR`` or an argument
says otherwise)::

    server.json         the running server (ServerInfo as JSON; never a secret)
    server.pid          the server's pid while it runs
    log4j2.properties   the server's logging config (WARN, with the Connect service's start line)
    server.log          the server's stdout and stderr
    token               the token clients authenticate with (mode 0600; kept across restarts)
    work/               the server's working folder (Spark's scratch space, Derby files)

The server is pyspark's own ``spark-submit --class org.apache.spark.sql.connect.service.SparkConnectServer``, so
its Spark is exactly the client's (same version, same jars). The Kafka connector and Delta come from the same
resolved jars the in-process session uses (:class:`dynamic_kafka.spark.session.SessionLaunch`), so neither mode
downloads them twice. The process is identified by its pid and by the path of its log4j config in its
command line, so a reused pid never counts as our server.

Authentication: the server refuses every client that does not send its pre-shared token (Spark Connect's
``spark.connect.authenticate.token`` check, fed through the server's environment variable
``SPARK_CONNECT_AUTHENTICATE_TOKEN``, never its command line). ``up`` generates the token once per folder into
``token`` (readable by its owner only) and exports it as ``SPARK_CONNECT_AUTHENTICATE_TOKEN`` to the process that
started it, whose clients and child processes find it there, the documented way
(:mod:`~devtools.local_spark_connect.tokens`).

Secrets: clients send Kafka credentials as data source options inside query plans. The server redacts every key
matching :data:`dynamic_kafka.secrets.SPARK_REDACTION_REGEX` (``kafka.sasl.jaas.config`` included) in its UI, event logs
and plan strings, logs only warnings (Kafka's client config dumps and Connect's request traces are INFO/DEBUG),
and its command line holds no secret.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from devtools.errors import LocalSparkConnectError
from devtools.lifecycle import ServiceKind, is_running, not_running_reason
from devtools.local_spark_connect.tokens import export_token, server_token
from dynamic_kafka._toolchain import process
from dynamic_kafka._toolchain.filelock import exclusive_lock
from dynamic_kafka.secrets import is_sensitive_key, secrets_in_text
from dynamic_kafka.spark.connect_server import (
    LOG4J_FILE,
    server_argv,
    server_env,
    write_logging_config,
)

logger = logging.getLogger(__name__)

BASE_DIR_ENV = "DYNAMIC_KAFKA_SPARK_CONNECT_DIR"
DEFAULT_PORT = 15002
DEFAULT_MASTER = "local[*]"
DEFAULT_DRIVER_MEMORY = "2g"
START_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 30.0
KIND = ServiceKind(
    label="Spark Connect server",
    dir_env=BASE_DIR_ENV,
    default_dir=".local-spark-connect",
    state_file="server.json",
    pid_file="server.pid",
    error=LocalSparkConnectError,
)
_LOG_FILE = "server.log"
_LOCK_FILE = ".lock"
# Beyond the sensitive keys of dynamic_kafka.secrets: any "key" word (fs.s3a.access.key, a keystore key...).
_KEY_WORD = re.compile(r"(?i)key(?![a-z])")


class ServerInfo(BaseModel):
    """A local Spark Connect server, as recorded in ``server.json``.

    Example:
        >>> ServerInfo(pid=1, port=15002, master="local[*]", log_file="/tmp/x.log", ui=False,
        ...            started_at="2026-01-01T00:00:00+00:00").remote
        'sc://127.0.0.1:15002'
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    pid: int = Field(description="The server's JVM process id.")
    port: int = Field(description="The gRPC port clients connect to, on 127.0.0.1.")
    master: str = Field(description="The Spark master the server runs its jobs on.")
    log_file: str = Field(description="The server's log (stdout and stderr).")
    ui: bool = Field(description="Whether the server serves Spark's UI.")
    started_at: str = Field(description="When the server was started (ISO 8601, UTC).")

    @property
    def remote(self) -> str:
        """The Spark Connect URL for ``SparkSession.builder.remote``."""
        return f"sc://127.0.0.1:{self.port}"

    def as_json(self, *, running: bool) -> dict[str, object]:
        """What ``spark-connect status --json`` prints."""
        return {"remote": self.remote, "running": running, **self.model_dump()}


class ServerStatus(BaseModel):
    """A recorded server and whether it runs now."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    info: ServerInfo
    running: bool


def resolve_base_dir(base_dir: Path | None = None) -> Path:
    """Return the base folder: the argument, else ``$DYNAMIC_KAFKA_SPARK_CONNECT_DIR``, else
    ``./.local-spark-connect``.
    """
    return KIND.resolve_base_dir(base_dir)


def start_server(
    *,
    base_dir: Path | None = None,
    port: int = DEFAULT_PORT,
    master: str = DEFAULT_MASTER,
    driver_memory: str = DEFAULT_DRIVER_MEMORY,
    ui: bool = False,
    conf: dict[str, str] | None = None,
    start_timeout_s: float = START_TIMEOUT_S,
) -> ServerInfo:
    """Start the local Spark Connect server and wait until it accepts clients; a running one is left alone.

    Args:
        base_dir: the server's folder (see :func:`resolve_base_dir`).
        port: the gRPC port on 127.0.0.1.
        master: ``local[*]``, ``local[N]`` or a standalone cluster's ``spark://host:port``.
        driver_memory: the server JVM's heap (the driver of every client's jobs).
        ui: serve Spark's UI (port 4040 and up); off by default.
        conf: extra Spark settings; they win over dynamic-kafka's defaults. No secret belongs here: settings are
            on the server's command line, so one that looks like a secret is refused.
        start_timeout_s: how long to wait for the port to accept connections.

    Returns:
        The running server.

    Raises:
        LocalSparkConnectError: a setting of ``conf`` looks like a secret, another server of this folder runs with
            other settings, the port is taken, or the server did not come up (the message has its log's tail).
        ToolchainError: no Java 17+, or the jars cannot be fetched.
    """
    refuse_secret_settings(conf or {})
    base = resolve_base_dir(base_dir)
    with exclusive_lock(base / _LOCK_FILE):
        current = _load(base)
        if current is not None and _running(current):
            if current.port != port or current.master != master:
                raise LocalSparkConnectError(
                    f"a Spark Connect server already runs from {base} on port {current.port} with master "
                    f"{current.master}; asked for port {port} with master {master}.",
                    hint="Stop it first (`python -m devtools spark-connect down`) or use another --base-dir.",
                )
            logger.info("Spark Connect server already runs at %s (pid %d)", current.remote, current.pid)
            export_token(base)
            return current
        return _start(
            base,
            port=port,
            master=master,
            driver_memory=driver_memory,
            ui=ui,
            conf=conf or {},
            start_timeout_s=start_timeout_s,
        )


def refuse_secret_settings(conf: dict[str, str]) -> None:
    """Refuses settings for the server's command line that look like secrets (by key or by an assignment in
    the value): every user of the machine can read a command line (``ps``, ``/proc/*/cmdline``).

    Raises:
        LocalSparkConnectError: names the setting (never its value) and where a secret belongs instead.
    """
    for key, value in sorted(conf.items()):
        if not (is_sensitive_key(key) or _KEY_WORD.search(key) or secrets_in_text(value)):
            continue
        if key == "spark.connect.authenticate.token":
            hint = "Leave it out: the server generates its own token (the `token` file of its folder) and local "
            hint += "clients find it; others set spark.token to a ${file:...} or ${env:...} reference to it."
        else:
            hint = (
                "Give the server its secrets through its environment (e.g. AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY for S3A, exported before `spark-connect up`) or a file readable by you only, "
                "never as --conf."
            )
        raise LocalSparkConnectError(
            f"the Spark setting {key!r} looks like a secret; settings go on the Spark Connect server's command "
            "line, which every user of this machine can read, so it was refused and no server was started.",
            hint=hint,
        )


def stop_server(*, base_dir: Path | None = None, timeout_s: float = STOP_TIMEOUT_S) -> ServerInfo | None:
    """Stop the local server if it runs; return what was stopped, None if none ran."""
    base = resolve_base_dir(base_dir)
    with exclusive_lock(base / _LOCK_FILE):
        current = _load(base)
        if current is None:
            return None
        stopped = KIND.stop(base, current.pid, _marker(base), timeout_s=timeout_s)
        return None if stopped is None else current


def server_status(base_dir: Path | None = None) -> ServerStatus | None:
    """Return the recorded server of ``base_dir`` and whether it runs, or None if none was ever started there."""
    base = resolve_base_dir(base_dir)
    current = _load(base)
    return None if current is None else ServerStatus(info=current, running=_running(current))


def server_command(
    base: Path,
    *,
    port: int,
    master: str,
    driver_memory: str,
    ui: bool,
    conf: dict[str, str],
) -> list[str]:
    """The server's command line (argv). It holds no secret: ``ps`` shows it.

    Raises:
        ToolchainError: the session's jars are not cached and cannot be downloaded.
    """
    from dynamic_kafka.config.models import SparkConfig
    from dynamic_kafka.spark.session import SessionLaunch

    launch = SessionLaunch.prepare(SparkConfig(master=master, ui_enabled=ui, class_data_sharing=False, conf=conf))
    return server_argv(base, launch.conf, port=port, master=master, driver_memory=driver_memory, conf=conf)


def _start(
    base: Path,
    *,
    port: int,
    master: str,
    driver_memory: str,
    ui: bool,
    conf: dict[str, str],
    start_timeout_s: float,
) -> ServerInfo:
    from dynamic_kafka._toolchain.java import find_java

    if not master.startswith(("local", "spark://")):
        raise LocalSparkConnectError(
            f"unsupported Spark master {master!r}.", hint="Use local[*], local[N] or spark://HOST:PORT."
        )
    java = find_java()
    if not process.port_is_free(port):
        raise LocalSparkConnectError(
            f"port {port} on 127.0.0.1 is in use by another process; the Spark Connect server cannot bind it.",
            hint="Stop that process or pick another port (--port).",
        )
    base.mkdir(parents=True, exist_ok=True)
    (base / "work").mkdir(exist_ok=True)
    write_logging_config(base)
    log_file = base / _LOG_FILE
    argv = server_command(base, port=port, master=master, driver_memory=driver_memory, ui=ui, conf=conf)
    env = server_env(base, java=java, token=server_token(base), master=master)
    begun = time.monotonic()
    pid = KIND.spawn(argv, folder=base, log_file=log_file, cwd=base / "work", env=env)
    info = ServerInfo(
        pid=pid,
        port=port,
        master=master,
        log_file=str(log_file),
        ui=ui,
        started_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    )
    logger.info("starting Spark Connect server on 127.0.0.1:%d (master %s, pid %d)", port, master, pid)
    try:
        KIND.wait_until_ready(
            pid,
            _marker(base),
            lambda: not_running_reason(port),
            deadline=begun + start_timeout_s,
            not_ready=lambda why: LocalSparkConnectError(
                f"the Spark Connect server on port {port} did not come up: {why}; it was stopped; "
                f"last lines of {log_file}:\n{process.tail(log_file)}"
            ),
            interval_s=0.2,
        )
    except BaseException:
        KIND.stop(base, pid, _marker(base), timeout_s=STOP_TIMEOUT_S)
        raise
    KIND.save(base, info)
    export_token(base)
    logger.info("Spark Connect server ready at %s after %.1f s", info.remote, time.monotonic() - begun)
    return info


def _marker(base: Path) -> str:
    return str(base / LOG4J_FILE)


def _running(info: ServerInfo) -> bool:
    return is_running(info.pid, _marker(Path(info.log_file).parent))


def _load(base: Path) -> ServerInfo | None:
    return KIND.load(base, ServerInfo)
