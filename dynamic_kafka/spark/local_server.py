"""The local Spark server dynamic-kafka manages (``spark.local_server``): a Spark Connect server on this machine,
started by the first run that needs Spark and reused by later runs, so a run starts no JVM of its own.

The server is pyspark's own Spark Connect service launched from the installed pyspark with the in-process
session's master, settings and jars (:mod:`dynamic_kafka.spark.connect_server`), bound to 127.0.0.1 on a free
port. It accepts only clients that send its token: a random one per start, in a file readable by its owner only,
handed to the server through its environment and read by clients as a ``${file:...}`` reference, so it is on no
command line and in no log. Its folder (``$DYNAMIC_KAFKA_SPARK_SERVER_DIR``, else ``spark-server`` under the
cache folder, :func:`dynamic_kafka._toolchain.cache.cache_dir`; mode 0700) holds::

    server.json         the running server (LocalServer as JSON; never a secret)
    token               its token (mode 0600)
    server.log          its stdout and stderr;  log4j2.properties: its logging config
    watchdog.log        the idle watchdog's log
    last_used           touched when a run attaches and when it lets go (its time is the last use)
    .lock               held while a server is started, reused or stopped: two runs never start two servers
    clients.lock        held shared by every process attached to the server (released when the process dies)
    work/               the server's working folder

A run reuses the recorded server when it runs, answers, and was started with the same *fingerprint* (its command
line but for the port: Spark version, jars, master, memory, ``spark.conf``); otherwise it stops the stale one and
starts a fresh one (:func:`reuse_decision`). A watchdog process started with the server stops it once no process
is attached and the last use is ``spark.local_server_idle_minutes`` old.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import hashlib
import json
import logging
import os
import secrets
import sys
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Literal

from pydantic import Field

from dynamic_kafka._toolchain import process
from dynamic_kafka._toolchain.cache import cache_dir
from dynamic_kafka._toolchain.filelock import exclusive_lock, try_exclusive_lock
from dynamic_kafka.errors import LocalSparkServerError
from dynamic_kafka.frozen import FrozenModel, replaced
from dynamic_kafka.spark.connect_server import LOG4J_FILE, server_argv, server_env, write_logging_config

if TYPE_CHECKING:
    from collections.abc import Mapping

    from dynamic_kafka.config.models import SparkConfig

logger = logging.getLogger(__name__)

SERVER_DIR_ENV = "DYNAMIC_KAFKA_SPARK_SERVER_DIR"
"""Overrides the local server's folder (default: ``spark-server`` under the cache folder)."""
START_TIMEOUT_S = 180.0
"""How long a run waits for a server it started to accept connections."""
STOP_TIMEOUT_S = 30.0
WATCHDOG_INTERVAL_S = 15.0
"""The watchdog's longest pause between two looks (a quarter of a shorter idle timeout)."""

_RECORD = "server.json"
_LOG = "server.log"
_TOKEN = "token"  # noqa: S105 (a file's name, not a token)
_LOCK = ".lock"
_CLIENTS = "clients.lock"
_USED = "last_used"
_WATCHDOG_LOG = "watchdog.log"
_WATCHDOG_MARKER = "dynamic_kafka.spark.local_server"
_LOG_ROTATE_BYTES = 64 * 1024 * 1024

Decision = Literal["reuse", "start", "replace"]


class LocalServer(FrozenModel):
    """The local Spark server, as recorded in its folder's ``server.json``."""

    pid: int = Field(description="The server's JVM process id.")
    port: int = Field(description="Its gRPC port on 127.0.0.1.")
    fingerprint: str = Field(description="A hash of its command line but the port (jars, master, settings).")
    master: str = Field(description="The Spark master its jobs run on.")
    spark_version: str = Field(description="The pyspark it was started from.")
    idle_minutes: float = Field(description="It stops after this many minutes without a run.")
    started_at: str = Field(description="When it was started (ISO 8601, UTC).")
    log_file: str = Field(description="Its stdout and stderr.")
    watchdog_pid: int | None = Field(None, description="The process that stops it when idle.")

    @property
    def remote(self) -> str:
        """The server's Spark Connect URL."""
        return f"sc://127.0.0.1:{self.port}"

    @property
    def folder(self) -> Path:
        """The server's folder."""
        return Path(self.log_file).parent

    def with_idle_minutes(self, idle_minutes: float) -> LocalServer:
        """This server stopping after ``idle_minutes`` without a run."""
        return replaced(self, idle_minutes=idle_minutes)


class LocalServerStatus(FrozenModel):
    """What ``dynamic-kafka spark-server status`` reports."""

    folder: str
    running: bool
    in_use: bool = Field(description="Whether a process is attached to it now (a run, a long-lived process).")
    idle_seconds: float | None = Field(description="Since the last run attached or let go; None: no server.")
    server: LocalServer | None


def server_folder() -> Path:
    """The local server's folder: ``$DYNAMIC_KAFKA_SPARK_SERVER_DIR``, else ``<cache folder>/spark-server``."""
    override = os.environ.get(SERVER_DIR_ENV)
    return (Path(override).expanduser() if override else cache_dir() / "spark-server").absolute()


def reuse_decision(record: LocalServer | None, fingerprint: str, *, running: bool, answers: bool) -> Decision:
    """Whether a run reuses the recorded server, starts one (none runs), or replaces it (stops it, starts anew).

    A server started with other jars or settings would run the pipeline with them, and one that runs but does not
    accept connections cannot serve it: both are replaced.

    Example:
        >>> reuse_decision(None, "f", running=False, answers=False)
        'start'
    """
    if record is None or not running:
        return "start"
    if record.fingerprint != fingerprint or not answers:
        return "replace"
    return "reuse"


def local_server_settings(settings: SparkConfig, launch_conf: Mapping[str, str]) -> SparkConfig:
    """Settings that connect to the local server for ``settings`` (``spark.local_server``), starting it first
    if none runs with the same fingerprint, and attaching this process to it (see :func:`release_local_server`).
    ``launch_conf``: the in-process session's settings for ``settings``
    (:class:`~dynamic_kafka.spark.session.SessionLaunch`'s ``conf``, jars resolved), which the server starts with.

    The returned settings name the server (``remote``) and its token file (``token``); the user's ``conf`` went
    to the server's start, so the client states none of it.

    Raises:
        LocalSparkServerError: the server did not come up (the message names its log).
        ToolchainError: no Java 17+, or the jars cannot be fetched.
    """
    server = ensure_local_server(settings, launch_conf)
    return settings.attached(server.remote, f"${{file:{server.folder / _TOKEN}}}")


def ensure_local_server(settings: SparkConfig, launch_conf: Mapping[str, str]) -> LocalServer:
    """The local server for ``settings``: the recorded one when :func:`reuse_decision` says so, else a fresh one
    (a stale one is stopped first); this process stays attached to it until :func:`release_local_server`.

    Raises:
        LocalSparkServerError: the server did not come up, or its folder cannot be used.
        ToolchainError: no Java 17+, or the jars cannot be fetched.
    """
    folder = server_folder()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(0o700)
    except OSError as e:
        raise LocalSparkServerError(
            f"the local Spark server's folder {folder} cannot be used: {e.strerror}.",
            hint=f"Make it writable, or set ${SERVER_DIR_ENV} to a folder of your own.",
        ) from e
    import pyspark

    launch = ServerLaunch(settings, folder, launch_conf, pyspark.__version__)
    with exclusive_lock(folder / _LOCK):
        _attach(folder)
        try:
            return _reuse_or_start(folder, launch, settings.local_server_idle_minutes)
        except BaseException:
            release_local_server()
            raise


def _reuse_or_start(folder: Path, launch: ServerLaunch, idle_minutes: float) -> LocalServer:
    """:func:`ensure_local_server`'s decision and its action, under ``.lock``."""
    record = _load(folder)
    running = record is not None and _server_running(record)
    answers = record is not None and running and process.accepts_connections(record.port)
    decision = reuse_decision(record, launch.fingerprint, running=running, answers=answers)
    if record is not None and decision == "reuse":
        if record.idle_minutes != idle_minutes:
            record = record.with_idle_minutes(idle_minutes)
            _save(folder, record)
        logger.info("using the local Spark server at %s (pid %d)", record.remote, record.pid)
    else:
        if record is not None:
            why = "was started with other settings" if answers else "does not answer" if running else "is gone"
            logger.info("the local Spark server (pid %d) %s; starting a fresh one", record.pid, why)
            _stop(folder, record)
        record = _start(folder, launch, idle_minutes=idle_minutes)
    _touch(folder)
    return record


def release_local_server() -> None:
    """Lets go of the local server this process attached to (its last use is now); nothing if none."""
    global _attached
    if _attached is None:
        return
    with contextlib.suppress(OSError):
        _touch(Path(_attached.name).parent)
    _attached.close()  # closing the file releases its lock
    _attached = None


def stop_local_server() -> LocalServer | None:
    """Stops the local server and its watchdog; returns what was stopped, None if no server ran."""
    folder = server_folder()
    if not (folder / _RECORD).exists():
        return None
    with exclusive_lock(folder / _LOCK):
        record = _load(folder)
        if record is None:
            return None
        running = _server_running(record)
        _stop(folder, record)
        return record if running else None


def local_server_status() -> LocalServerStatus:
    """The recorded local server, whether it runs, whether a process is attached and how long it has been idle."""
    folder = server_folder()
    record = _load(folder) if (folder / _RECORD).exists() else None
    running = record is not None and _server_running(record)
    in_use = False
    if running:
        with try_exclusive_lock(folder / _CLIENTS) as unused:
            in_use = not unused
    return LocalServerStatus(
        folder=str(folder),
        running=running,
        in_use=in_use,
        idle_seconds=round(idle_seconds(folder), 1) if running else None,
        server=record,
    )


def idle_seconds(folder: Path) -> float:
    """Seconds since a process last attached to or let go of the server of ``folder``."""
    try:
        return max(0.0, time.time() - (folder / _USED).stat().st_mtime)
    except FileNotFoundError:
        return 0.0


class ServerLaunch:
    """A server's command line for some settings (its port filled in at the start) and its fingerprint."""

    def __init__(self, settings: SparkConfig, folder: Path, launch_conf: Mapping[str, str], spark_version: str) -> None:
        """Pure: ``launch_conf`` is the in-process session's settings for ``settings`` (jars resolved)."""
        # The user's settings as the session resolved them (their own spark.jars joined to the resolved ones).
        users = {key: value for key, value in launch_conf.items() if key in settings.conf}
        memory = launch_conf["spark.driver.memory"]
        self.master = settings.master
        self.spark_version = spark_version
        self._argv = server_argv(
            folder, launch_conf, port=_PORT_SLOT, master=self.master, driver_memory=memory, conf=users
        )
        self.fingerprint = hashlib.sha256(json.dumps([spark_version, self._argv]).encode()).hexdigest()[:16]

    def argv(self, port: int) -> list[str]:
        """The command line that starts the server on ``port``."""
        slot = f"spark.connect.grpc.binding.port={_PORT_SLOT}"
        return [f"spark.connect.grpc.binding.port={port}" if arg == slot else arg for arg in self._argv]


_PORT_SLOT = 0


def _start(folder: Path, launch: ServerLaunch, *, idle_minutes: float) -> LocalServer:
    from dynamic_kafka._toolchain.java import find_java

    java = find_java()
    (folder / "work").mkdir(exist_ok=True)
    write_logging_config(folder)
    token = _new_token(folder)
    log_file = folder / _LOG
    if log_file.exists() and log_file.stat().st_size > _LOG_ROTATE_BYTES:
        log_file.replace(log_file.with_name(_LOG + ".1"))
    port = process.free_port()
    env = server_env(folder, java=java, token=token, master=launch.master)
    begun = time.monotonic()
    logger.info("starting the local Spark server on 127.0.0.1:%d (master %s)", port, launch.master)
    pid = process.spawn_detached(launch.argv(port), log_file=log_file, cwd=folder / "work", env=env)
    marker = str(folder / LOG4J_FILE)
    try:
        _wait_until_ready(pid, marker, port, log_file, deadline=begun + START_TIMEOUT_S)
    except BaseException:
        process.terminate(pid, marker, timeout_s=STOP_TIMEOUT_S)
        raise
    watchdog = process.spawn_detached(
        [sys.executable, "-m", _WATCHDOG_MARKER, str(folder), str(pid)],
        log_file=folder / _WATCHDOG_LOG,
        cwd=folder,
    )
    record = LocalServer(
        pid=pid,
        port=port,
        fingerprint=launch.fingerprint,
        master=launch.master,
        spark_version=launch.spark_version,
        idle_minutes=idle_minutes,
        started_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        log_file=str(log_file),
        watchdog_pid=watchdog,
    )
    _save(folder, record)
    logger.info("local Spark server ready at %s after %.1f s (pid %d)", record.remote, time.monotonic() - begun, pid)
    return record


def _wait_until_ready(pid: int, marker: str, port: int, log_file: Path, *, deadline: float) -> None:
    while not process.accepts_connections(port):
        if not process.is_alive(pid, marker):
            tail = process.tail(log_file)
            taken = "Address already in use" in tail or "BindException" in tail
            raise LocalSparkServerError(
                f"the local Spark server exited while starting (code {process.exit_code(pid)})"
                f"{': port ' + str(port) + ' was taken' if taken else ''}; last lines of {log_file}:\n{tail}",
                hint="Run again (a new start picks another free port)."
                if taken
                else f"Read {log_file}; fix spark.conf or spark.master, or set spark.local_server: false.",
            )
        if time.monotonic() >= deadline:
            raise LocalSparkServerError(
                f"the local Spark server did not accept connections on 127.0.0.1:{port} within "
                f"{START_TIMEOUT_S:.0f} s; it was stopped. Its log: {log_file}",
                hint="On a busy machine run again; otherwise read the log.",
            )
        time.sleep(0.2)


def _new_token(folder: Path) -> str:
    """A new random token, written to ``token`` readable by its owner only (created so, never wider)."""
    token = secrets.token_urlsafe(32)
    partial = folder / f".{_TOKEN}.{os.getpid()}.tmp"
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as out:
        out.write(token + "\n")
    partial.replace(folder / _TOKEN)
    return token


def _stop(folder: Path, record: LocalServer) -> None:
    """Stops the server and its watchdog (unless the caller is that watchdog) and forgets them; under ``.lock``."""
    process.terminate(record.pid, str(folder / LOG4J_FILE), timeout_s=STOP_TIMEOUT_S)
    if not process.wait_until_closed(record.port, timeout_s=STOP_TIMEOUT_S):
        logger.warning("the local Spark server's port %d still accepts connections after its stop", record.port)
    if record.watchdog_pid is not None and record.watchdog_pid != os.getpid():
        process.terminate(record.watchdog_pid, _WATCHDOG_MARKER, timeout_s=STOP_TIMEOUT_S)
    for name in (_RECORD, _TOKEN):
        (folder / name).unlink(missing_ok=True)
    logger.info("stopped the local Spark server (pid %d)", record.pid)


def _server_running(record: LocalServer) -> bool:
    return process.is_alive(record.pid, str(record.folder / LOG4J_FILE))


def _load(folder: Path) -> LocalServer | None:
    try:
        return LocalServer.model_validate_json((folder / _RECORD).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except ValueError:
        logger.warning("the local Spark server's record %s is unreadable; starting afresh", folder / _RECORD)
        return None


def _save(folder: Path, record: LocalServer) -> None:
    partial = folder / f".{_RECORD}.{os.getpid()}.tmp"
    partial.write_text(record.model_dump_json(indent=2) + "\n", encoding="utf-8")
    partial.replace(folder / _RECORD)


def _touch(folder: Path) -> None:
    (folder / _USED).touch()


_attached: IO[str] | None = None


def _attach(folder: Path) -> None:
    """Holds ``clients.lock`` shared for as long as this process uses the server (the watchdog stops a server
    only when it can take the lock exclusively); the lock dies with the process.
    """
    global _attached
    if _attached is not None:
        return
    handle = (folder / _CLIENTS).open("a")
    os.set_inheritable(handle.fileno(), False)
    fcntl.flock(handle, fcntl.LOCK_SH)
    _attached = handle


def watch(folder: Path, pid: int) -> None:
    """The watchdog: stops the server ``pid`` of ``folder`` once no process is attached and its last use is
    ``idle_minutes`` old; returns when it stopped it or when the server is gone or replaced.
    """
    while True:
        record = _load(folder)
        if record is None or record.pid != pid or not _server_running(record):
            return
        time.sleep(min(WATCHDOG_INTERVAL_S, max(1.0, record.idle_minutes * 15)))
        with exclusive_lock(folder / _LOCK):
            record = _load(folder)
            if record is None or record.pid != pid:
                return
            with try_exclusive_lock(folder / _CLIENTS) as unused:
                idle = idle_seconds(folder)
                if unused and idle >= record.idle_minutes * 60:
                    logger.warning("the local Spark server (pid %d) was idle %.0f s; stopping it", pid, idle)
                    _stop(folder, record)
                    return


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    watch(Path(sys.argv[1]), int(sys.argv[2]))
