"""A local PostgreSQL server from the machine's Debian packages, run by ``pg_ctl`` on 127.0.0.1.

Layout of the base folder (default ``./.local-postgres``)::

    server.json   port, user, database (no secret)
    password      the generated superuser password (0600)
    pgpass        libpq password file for the client tools this module runs (0600)
    data/         the cluster (initdb), owned by the server's OS user
    run/          the server's Unix socket folder
    postgres.log  the server's log

Running as root: ``initdb``, ``pg_ctl`` and ``postgres`` refuse to run as root, so the server then runs as the
``postgres`` system user that Debian's ``postgresql-common`` creates, through ``runuser`` (util-linux, always
there on Debian). That keeps one code path for developers (their own user) and CI (root) with nothing to set up;
the price is that the ``postgres`` user must be able to reach the base folder (every parent folder must be
searchable by others), which :func:`start_postgres` checks and explains.

No secret is ever on a command line: ``initdb`` reads the password from the file, the client tools from
``PGPASSFILE``; the password is only in those two 0600 files and in what :meth:`LocalPostgres.url` returns.

Why one module of this size: a local service's whole life (prepare, start, wait, status, stop, delete), each
step with the error message that names the fix, as for the other local services.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import pwd
import re
import secrets
import shutil
import subprocess
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from devtools.errors import LocalPostgresError
from devtools.lifecycle import ServiceKind
from dynamic_kafka._toolchain.process import accepts_connections, port_is_free, tail

logger = logging.getLogger(__name__)

LOCAL_DIR_ENV = "DYNAMIC_KAFKA_LOCAL_POSTGRES_DIR"
BIN_DIR_ENV = "DYNAMIC_KAFKA_POSTGRES_BIN"
DEFAULT_PORT = 15432
DEFAULT_USER = "dynamic_kafka"
DEFAULT_DATABASE = "dagster"
SERVICE_USER = "postgres"  # Debian's system user, used only when we are root
START_TIMEOUT_S = 60.0
# pg_ctl starts, waits for and stops the server itself (and keeps its pid in the data folder): of the shared
# lifecycle, this service uses the folder and the record.
KIND = ServiceKind(
    label="local PostgreSQL",
    dir_env=LOCAL_DIR_ENV,
    default_dir=".local-postgres",
    state_file="server.json",
    pid_file="data/postmaster.pid",
    error=LocalPostgresError,
)
_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


class LocalPostgres(BaseModel):
    """One local PostgreSQL server, as recorded in its ``server.json``. Its repr holds no secret.

    Example:
        >>> from devtools.local_postgres import start_postgres
        >>> server = start_postgres(port=15432)  # doctest: +SKIP
        >>> server.url(with_password=False)  # doctest: +SKIP
        'postgresql://dynamic_kafka@127.0.0.1:15432/dagster'
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    base_dir: Path = Field(description="The server's base folder (data, socket, log, password).")
    port: int = Field(description="TCP port on 127.0.0.1.")
    user: str = Field(default=DEFAULT_USER, description="The superuser clients log in as.")
    database: str = Field(default=DEFAULT_DATABASE, description="The database created for Dagster.")
    host: str = Field(default="127.0.0.1", description="The only address the server listens on.")

    @property
    def data_dir(self) -> Path:
        """Return the server's data folder."""
        return self.base_dir / "data"

    @property
    def socket_dir(self) -> Path:
        """Return the folder of the server's Unix socket."""
        return self.base_dir / "run"

    @property
    def log_file(self) -> Path:
        """Return the server's log file."""
        return self.base_dir / "postgres.log"

    @property
    def password_file(self) -> Path:
        """Return the file (mode 0600) holding the generated password."""
        return self.base_dir / "password"

    @property
    def pgpass_file(self) -> Path:
        """Return the pgpass file clients read the password from."""
        return self.base_dir / "pgpass"

    def password(self) -> str:
        """The superuser password, read from :attr:`password_file`."""
        try:
            return self.password_file.read_text(encoding="utf-8").strip()
        except OSError as e:
            raise LocalPostgresError(
                f"cannot read the local PostgreSQL password file {self.password_file}: {e.strerror}.",
                hint="Run `python -m devtools local-postgres down --purge` and `up` again to create a new server.",
            ) from e

    def url(self, *, with_password: bool = True) -> str:
        """The SQLAlchemy/libpq connection URL (with the password unless ``with_password`` is False)."""
        auth = f"{self.user}:{self.password()}" if with_password else self.user
        return f"postgresql://{auth}@{self.host}:{self.port}/{self.database}"


class PostgresStatus(BaseModel):
    """A local server and whether it runs now."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    server: LocalPostgres
    running: bool


def resolve_base_dir(base_dir: Path | None = None) -> Path:
    """The argument, else ``$DYNAMIC_KAFKA_LOCAL_POSTGRES_DIR``, else ``./.local-postgres``, made absolute."""
    return KIND.resolve_base_dir(base_dir)


def find_bin_dir() -> Path:
    """The folder of ``initdb`` and ``pg_ctl``: ``$DYNAMIC_KAFKA_POSTGRES_BIN``, else the newest
    ``/usr/lib/postgresql/<major>/bin`` (Debian keeps them off PATH), else PATH.

    Raises:
        LocalPostgresError: no PostgreSQL server binaries were found.
    """
    env = os.environ.get(BIN_DIR_ENV)
    if env:
        candidates = [Path(env)]
    else:
        majors = glob.glob("/usr/lib/postgresql/*/bin")
        candidates = [Path(p) for p in sorted(majors, key=_major, reverse=True)]
        on_path = shutil.which("pg_ctl")
        if on_path:
            candidates.append(Path(on_path).resolve().parent)
    for candidate in candidates:
        if (candidate / "initdb").is_file() and (candidate / "pg_ctl").is_file():
            return candidate
    raise LocalPostgresError(
        "no PostgreSQL server binaries (initdb, pg_ctl) were found"
        + (f" in ${BIN_DIR_ENV}={env}" if env else " under /usr/lib/postgresql/*/bin or on PATH")
        + ".",
        hint="Run `make setup` (installs Debian's `postgresql` package) or set $DYNAMIC_KAFKA_POSTGRES_BIN.",
    )


def _major(bin_dir: str) -> int:
    name = Path(bin_dir).parent.name
    return int(name) if name.isdigit() else 0


def _as_server_user() -> list[str]:
    """The prefix that runs a server tool as a non-root user: nothing, or ``runuser -u postgres --`` as root."""
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam(SERVICE_USER)
    except KeyError as e:
        raise LocalPostgresError(
            f"PostgreSQL refuses to run as root and there is no {SERVICE_USER!r} system user to run it as.",
            hint="Install Debian's `postgresql` package (it creates the user), or run as a non-root user.",
        ) from e
    runuser = shutil.which("runuser")
    if runuser is None:
        raise LocalPostgresError(
            "PostgreSQL refuses to run as root and `runuser` (util-linux) is missing.",
            hint="Install util-linux, or run as a non-root user.",
        )
    return [runuser, "-u", SERVICE_USER, "--"]


def _chown_to_server_user(path: Path) -> None:
    if os.geteuid() == 0:
        entry = pwd.getpwnam(SERVICE_USER)
        os.chown(path, entry.pw_uid, entry.pw_gid)


def _run(argv: list[str], *, cwd: Path, env: dict[str, str] | None = None, what: str, stdin: str | None = None) -> str:
    done = subprocess.run(argv, cwd=cwd, env=env, input=stdin, capture_output=True, text=True, check=False, timeout=120)
    if done.returncode != 0:
        output = (done.stdout + done.stderr).strip()[-2000:]
        raise LocalPostgresError(f"{what} failed (exit {done.returncode}): {output}")
    return done.stdout


def _read_state(base_dir: Path) -> LocalPostgres | None:
    return KIND.load(base_dir, LocalPostgres)


def _write_state(server: LocalPostgres) -> None:
    KIND.save(server.base_dir, server)


def is_running(server: LocalPostgres) -> bool:
    """True if ``pg_ctl status`` finds the server's postmaster alive."""
    if not (server.data_dir / "PG_VERSION").is_file():
        return False
    pg_ctl = str(find_bin_dir() / "pg_ctl")
    done = subprocess.run(
        [*_as_server_user(), pg_ctl, "status", "-D", str(server.data_dir)],
        cwd=server.base_dir,
        capture_output=True,
        check=False,
        timeout=30,
    )
    return done.returncode == 0


def _check_reachable(base_dir: Path) -> None:
    """As root, the server user must be able to enter the base folder; say which parent blocks it if not."""
    if os.geteuid() != 0:
        return
    done = subprocess.run([*_as_server_user(), "test", "-x", str(base_dir)], capture_output=True, check=False)
    if done.returncode == 0:
        return
    blocking = next((p for p in [base_dir, *base_dir.parents] if not os.stat(p).st_mode & 0o001), base_dir)
    raise LocalPostgresError(
        f"the {SERVICE_USER!r} user (PostgreSQL refuses to run as root) cannot enter {base_dir}: "
        f"{blocking} is not searchable by others.",
        hint=f"Use a base folder whose parents are all o+x (e.g. under /var/tmp or /tmp), or `chmod o+x {blocking}`.",
    )


def _initialize(server: LocalPostgres, bin_dir: Path) -> None:
    """Initdb with a generated password; the config keeps the server on 127.0.0.1 and its socket in ``run/``."""
    base = server.base_dir
    base.mkdir(parents=True, exist_ok=True)
    base.chmod(0o755)  # the server user (as root: postgres) enters it; the secrets inside are 0600
    _check_reachable(base)
    if not server.password_file.exists():
        fd = os.open(server.password_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(secrets.token_urlsafe(24) + "\n")
    for folder in (server.data_dir, server.socket_dir):
        folder.mkdir(mode=0o700, exist_ok=True)
        _chown_to_server_user(folder)
    # initdb (as the server user) reads the password from a copy it owns, removed right after.
    pwfile = server.socket_dir / "initdb-password"
    fd = os.open(pwfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(server.password())
    _chown_to_server_user(pwfile)
    try:
        _run(
            [
                *_as_server_user(),
                str(bin_dir / "initdb"),
                "-D",
                str(server.data_dir),
                "-U",
                server.user,
                f"--pwfile={pwfile}",
                "--auth=scram-sha-256",
                "--encoding=UTF8",
                "--locale=C",
            ],
            cwd=base,
            what=f"initdb of {server.data_dir}",
        )
    finally:
        pwfile.unlink(missing_ok=True)
    # Appended settings win over initdb's defaults (last one wins). The port is given at each start instead, so a
    # later `up --port` can move the server.
    with (server.data_dir / "postgresql.conf").open("a", encoding="utf-8") as conf:
        conf.write(
            "\n# python -m devtools local-postgres\n"
            "listen_addresses = '127.0.0.1'\n"
            f"unix_socket_directories = '{server.socket_dir}'\n"
            # A local development server: a crash of the machine may lose the last transactions, never corrupts.
            "synchronous_commit = off\n"
            "max_connections = 200\n"
        )


def _write_pgpass(server: LocalPostgres) -> None:
    fd = os.open(server.pgpass_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(f"{server.host}:*:*:{server.user}:{server.password()}\n")


def _client_env(server: LocalPostgres) -> dict[str, str]:
    _write_pgpass(server)
    return {**os.environ, "PGPASSFILE": str(server.pgpass_file), "PGCONNECT_TIMEOUT": "10"}


def _ensure_database(server: LocalPostgres, bin_dir: Path) -> None:
    env = _client_env(server)
    common = ["-h", server.host, "-p", str(server.port), "-U", server.user]
    exists = _run(
        # psql interpolates :'db' as a quoted literal only in scripts (stdin), not in -c.
        [str(bin_dir / "psql"), *common, "-d", "postgres", "-tA", "-v", f"db={server.database}", "-f", "-"],
        cwd=server.base_dir,
        env=env,
        stdin="SELECT 1 FROM pg_database WHERE datname = :'db';\n",
        what="looking up the database",
    )
    if exists.strip() != "1":
        _run(
            [str(bin_dir / "createdb"), *common, server.database],
            cwd=server.base_dir,
            env=env,
            what=f"createdb {server.database}",
        )


def start_postgres(
    *,
    base_dir: Path | None = None,
    port: int | None = None,
    database: str = DEFAULT_DATABASE,
    start_timeout_s: float = START_TIMEOUT_S,
) -> LocalPostgres:
    """Initialize (first time) and start the local server; a no-op for a running one on the same port.

    Args:
        base_dir: the server's folder (default: :func:`resolve_base_dir`).
        port: TCP port on 127.0.0.1 (default: the recorded one, else 15432).
        database: the database to create (once) for Dagster.
        start_timeout_s: how long to wait for the server to accept connections.

    Raises:
        LocalPostgresError: no binaries, the port is taken, the server user cannot reach the folder, or the
            server did not start (the message holds the log's tail).
    """
    base = resolve_base_dir(base_dir)
    if not _NAME.match(database):
        raise LocalPostgresError(f"database name {database!r} is not a plain lower-case identifier.")
    bin_dir = find_bin_dir()
    recorded = _read_state(base)
    if recorded is not None and recorded.database != database:
        recorded = recorded.model_copy(update={"database": database})
    if recorded is not None and is_running(recorded):
        if port is not None and port != recorded.port:
            raise LocalPostgresError(
                f"the local PostgreSQL under {base} already runs on port {recorded.port}, not {port}.",
                hint="Run `python -m devtools local-postgres down` first to move it.",
            )
        _ensure_database(recorded, bin_dir)
        _write_state(recorded)
        return recorded
    server = LocalPostgres(
        base_dir=base,
        port=port if port is not None else (recorded.port if recorded else DEFAULT_PORT),
        database=database,
    )
    if not port_is_free(server.port):
        raise LocalPostgresError(
            f"port {server.port} on 127.0.0.1 is taken by another process.",
            hint="Pass another --port.",
        )
    if not (server.data_dir / "PG_VERSION").is_file():
        logger.info("initializing a PostgreSQL cluster in %s", server.data_dir)
        _initialize(server, bin_dir)
    _write_state(server)
    server.log_file.touch()
    _chown_to_server_user(server.log_file)
    logger.info("starting PostgreSQL on 127.0.0.1:%d (%s)", server.port, server.data_dir)
    done = subprocess.run(
        [
            *_as_server_user(),
            str(bin_dir / "pg_ctl"),
            "start",
            "-D",
            str(server.data_dir),
            "-l",
            str(server.log_file),
            "-o",
            f"-p {server.port}",
            "-w",
            "-t",
            str(int(start_timeout_s)),
        ],
        cwd=base,
        capture_output=True,
        text=True,
        check=False,
        timeout=start_timeout_s + 30,
    )
    deadline = time.monotonic() + 10.0
    while done.returncode == 0 and not accepts_connections(server.port) and time.monotonic() < deadline:
        time.sleep(0.1)
    if done.returncode != 0 or not accepts_connections(server.port):
        raise LocalPostgresError(
            f"PostgreSQL did not start on 127.0.0.1:{server.port} ({(done.stdout + done.stderr).strip()[-500:]}); "
            f"last lines of {server.log_file}:\n{tail(server.log_file)}",
        )
    _ensure_database(server, bin_dir)
    return server


def stop_postgres(*, base_dir: Path | None = None, purge: bool = False, timeout_s: float = 60.0) -> bool:
    """Stop the local server (fast shutdown: open sessions are ended) and, with ``purge``, delete its folder.

    Returns:
        True if a running server was stopped.

    Raises:
        LocalPostgresError: the server did not stop within ``timeout_s``.
    """
    base = resolve_base_dir(base_dir)
    server = _read_state(base)
    stopped = False
    if server is not None and is_running(server):
        _run(
            [
                *_as_server_user(),
                str(find_bin_dir() / "pg_ctl"),
                "stop",
                "-D",
                str(server.data_dir),
                "-m",
                "fast",
                "-w",
                "-t",
                str(int(timeout_s)),
            ],
            cwd=base,
            what=f"pg_ctl stop of {server.data_dir}",
        )
        stopped = True
    if purge and base.exists():
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(base)
    return stopped


def postgres_status(base_dir: Path | None = None) -> PostgresStatus | None:
    """The recorded server and whether it runs, or None when none was ever started under the folder."""
    server = _read_state(resolve_base_dir(base_dir))
    if server is None:
        return None
    return PostgresStatus(server=server, running=is_running(server))
