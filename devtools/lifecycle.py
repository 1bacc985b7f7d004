"""The life of one local service process, shared by every development service: where its folder is, its record,
its start (log rotated, process detached, pid recorded), the wait until it serves, its status and its stop.

Each service (:mod:`devtools.local_kafka`, :mod:`devtools.local_registry`, :mod:`devtools.local_s3`,
:mod:`devtools.local_spark_connect`, and :mod:`devtools.local_postgres` for its folder and record) describes itself
once with a :class:`ServiceKind` and keeps only what is its own: its command line, its readiness probe, its
settings. A process is identified by its pid *and* a marker in its command line (a path of its folder), so a
reused pid never counts as the service (:func:`dynamic_kafka._toolchain.process.is_alive`).

Folder layout, per instance (one folder per cluster or registry, one for a server)::

    <state file>   the service's record (a pydantic model as JSON; never a secret), written atomically
    <pid file>     the process id while it runs
    <log file>     the process's stdout and stderr, rotated past 64 MiB at each start
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from pydantic import BaseModel

from dynamic_kafka._toolchain import process
from dynamic_kafka._toolchain.filelock import exclusive_lock

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from devtools.errors import DevtoolsError

logger = logging.getLogger(__name__)

Record = TypeVar("Record", bound=BaseModel)
Instance = TypeVar("Instance")

LOG_ROTATE_BYTES = 64 * 1024 * 1024
"""A log past this size at a start is kept as ``<log>.1`` (the previous ``.1`` is replaced)."""
PROBE_INTERVAL_S = 0.1
"""The pause between two readiness probes that found the service not ready yet."""


@dataclass(frozen=True)
class ServiceKind:
    """One kind of local service: its folder's default and variable, its files, and its error class.

    Attributes:
        label: how messages name one instance, e.g. ``"local cluster"``.
        dir_env: the environment variable that overrides the default base folder.
        default_dir: the base folder's name under the current directory, e.g. ``".local-kafka"``.
        state_file: the record's file name in an instance's folder.
        pid_file: the pid file's name in an instance's folder.
        error: the error class of the service.
    """

    label: str
    dir_env: str
    default_dir: str
    state_file: str
    pid_file: str
    error: type[DevtoolsError]

    def check_specs(self, specs: list[tuple[str, int]], *, noun: str, plural: str) -> None:
        """Refuse an empty list of ``NAME:PORT`` specs, or one that repeats a name or a port."""
        if not specs:
            raise self.error(f"no {plural} given; expected at least one NAME:PORT.")
        names = [n for n, _ in specs]
        ports = [str(p) for _, p in specs]
        for label, values in (("name", names), ("port", ports)):
            repeated = sorted({v for v in values if values.count(v) > 1})
            if repeated:
                raise self.error(f"each {noun} needs its own {label}; repeated: {', '.join(repeated)}.")

    def stop_named(
        self,
        base: Path,
        names: list[str] | None,
        instances: Callable[[], Iterable[tuple[str, Path, Instance]]],
        stop_one: Callable[[Instance], None],
        *,
        purge: bool,
    ) -> list[str]:
        """Stop the instances ``names`` (None: all) under ``base``, one ``stop_one`` each under the base folder's
        lock, deleting their folders if ``purge`` (and the base folder when all were purged); ``instances`` lists
        (name, folder, instance). Returns the names handled.
        """
        if names is None and not base.is_dir():
            return []
        with exclusive_lock(base / ".lock"):
            known = {name: (folder, instance) for name, folder, instance in instances()}
            chosen = sorted(known) if names is None else list(dict.fromkeys(names))
            unknown = [n for n in chosen if n not in known]
            if unknown:
                raise self.error(
                    f"no {self.label} named {', '.join(unknown)} under {base}; "
                    f"known: {', '.join(sorted(known)) or '(none)'}."
                )
            for name in chosen:
                folder, instance = known[name]
                stop_one(instance)
                if purge:
                    shutil.rmtree(folder, ignore_errors=True)
                    logger.info("%s %s: data deleted", self.label, name)
        if purge and names is None:
            with contextlib.suppress(OSError):
                (base / ".lock").unlink()
                base.rmdir()
        return chosen

    def resolve_base_dir(self, base_dir: Path | None = None) -> Path:
        """Return the base folder: the argument, else ``$<dir_env>``, else ``./<default_dir>``, made absolute."""
        if base_dir is not None:
            return Path(base_dir).absolute()
        env = os.environ.get(self.dir_env)
        return Path(env).expanduser().absolute() if env else Path.cwd() / self.default_dir

    def load(self, folder: Path, model: type[Record]) -> Record | None:
        """Return the record kept in ``folder``, or None if there is none.

        Raises:
            DevtoolsError: (the service's class) the record is not one: it names the file and how to start afresh.
        """
        state = folder / self.state_file
        try:
            text = state.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        try:
            return model.model_validate_json(text)
        except ValueError as e:
            raise self.error(
                f"unreadable {self.label} record {state}: {e}",
                hint=f"Stop any process started from {folder} by hand, then delete {folder} to start afresh.",
            ) from e

    def save(self, folder: Path, record: BaseModel) -> None:
        """Write ``record`` to ``folder``'s state file atomically: a reader sees the old record or the new one."""
        partial = folder / f".{self.state_file}.{os.getpid()}.tmp"
        partial.write_text(record.model_dump_json(indent=2) + "\n", encoding="utf-8")
        partial.replace(folder / self.state_file)

    def spawn(
        self,
        argv: list[str],
        *,
        folder: Path,
        log_file: Path,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> int:
        """Start ``argv`` detached (it outlives this process), its output appended to ``log_file`` (rotated first
        when large), and record its pid in ``folder``; return the pid.
        """
        if log_file.exists() and log_file.stat().st_size > LOG_ROTATE_BYTES:
            log_file.replace(log_file.with_name(log_file.name + ".1"))
        pid = process.spawn_detached(argv, log_file=log_file, cwd=cwd or folder, env=env)
        (folder / self.pid_file).write_text(f"{pid}\n")
        return pid

    def wait_until_ready(
        self,
        pid: int,
        marker: str,
        probe: Callable[[], str | None],
        *,
        deadline: float,
        not_ready: Callable[[str], DevtoolsError],
        interval_s: float = PROBE_INTERVAL_S,
    ) -> None:
        """Probe the service until it serves: ``probe()`` returns None when it does, else why not yet.

        Raises:
            DevtoolsError: ``not_ready(reason)``: the process exited (with its exit code), or the deadline passed
                (with the probe's last answer). The process is left as it is: the caller decides whether to stop it.
        """
        last = "the port never accepted a connection"
        while time.monotonic() < deadline:
            if not process.is_alive(pid, marker):
                raise not_ready(f"its process exited (code {process.exit_code(pid)})")
            reason = probe()
            if reason is None:
                return
            last = reason
            time.sleep(interval_s)
        raise not_ready(f"it did not answer before the deadline (last error: {last})")

    def stop(self, folder: Path, pid: int | None, marker: str, *, timeout_s: float) -> bool | None:
        """Stop the process ``pid`` of ``folder`` if it still runs (SIGTERM, then SIGKILL after ``timeout_s``) and
        forget its pid; return True if it exited cleanly, False if it was killed, None if it was not running.
        """
        outcome = None
        if pid is not None and process.is_alive(pid, marker):
            outcome = process.terminate(pid, marker, timeout_s=timeout_s)
            logger.info("%s under %s: %s pid %d", self.label, folder, "stopped" if outcome else "killed", pid)
        (folder / self.pid_file).unlink(missing_ok=True)
        return outcome


def is_running(pid: int | None, marker: str) -> bool:
    """Whether the process ``pid`` runs and is the service's (its command line holds ``marker``)."""
    return pid is not None and process.is_alive(pid, marker)


def not_running_reason(port: int) -> str | None:
    """A readiness probe for services that serve once their port accepts connections on 127.0.0.1."""
    return None if process.accepts_connections(port) else "the port never accepted a connection"
