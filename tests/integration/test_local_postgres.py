"""A real local PostgreSQL: start, connect with the generated password, idempotent up, restart on kept data, CLI."""

from __future__ import annotations

import json
import shutil
import stat
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg2
import pytest

from devtools.cli.main import main
from devtools.errors import LocalPostgresError
from devtools.local_postgres import (
    LocalPostgres,
    find_bin_dir,
    postgres_status,
    start_postgres,
    stop_postgres,
)
from dynamic_kafka._toolchain.process import free_port

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def base_dir() -> Iterator[Path]:
    # Not pytest's tmp_path: as root the server runs as `postgres`, who cannot enter /tmp/pytest-of-root (0700).
    base = Path(tempfile.mkdtemp(prefix="dynamic-kafka-pg-test-"))
    base.chmod(0o755)
    yield base
    stop_postgres(base_dir=base, purge=True)
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def server(base_dir: Path) -> LocalPostgres:
    return start_postgres(base_dir=base_dir, port=free_port())


def _query(url: str, sql: str) -> object:
    with psycopg2.connect(url, connect_timeout=10) as conn, conn.cursor() as cur:
        cur.execute(sql)
        row = cur.fetchone()
    conn.close()
    return row[0] if row else None


def test_the_server_accepts_the_generated_password_on_loopback_only(server: LocalPostgres) -> None:
    assert _query(server.url(), "SELECT current_database()") == "dagster"
    assert _query(server.url(), "SHOW listen_addresses") == "127.0.0.1"
    with pytest.raises(psycopg2.OperationalError, match="password authentication failed"):
        psycopg2.connect(server.url().replace(server.password(), "wrong"), connect_timeout=10)
    assert stat.S_IMODE(server.password_file.stat().st_mode) == 0o600


def test_the_password_is_on_no_command_line_and_in_no_repr(server: LocalPostgres) -> None:
    password = server.password()
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            assert password.encode() not in cmdline.read_bytes(), cmdline
        except OSError:
            continue  # the process ended meanwhile
    assert password not in repr(server)
    assert password not in server.url(with_password=False)


def test_up_is_idempotent_and_refuses_to_move_a_running_server(server: LocalPostgres, base_dir: Path) -> None:
    assert start_postgres(base_dir=base_dir) == server
    with pytest.raises(LocalPostgresError, match=f"already runs on port {server.port}"):
        start_postgres(base_dir=base_dir, port=server.port + 1)


def test_down_then_up_keeps_data_and_password(server: LocalPostgres, base_dir: Path) -> None:
    _query(server.url(), "CREATE TABLE IF NOT EXISTS kept (v int); INSERT INTO kept VALUES (7); SELECT 1")
    password = server.password()

    assert stop_postgres(base_dir=base_dir) is True
    status = postgres_status(base_dir)
    assert status is not None
    assert not status.running
    again = start_postgres(base_dir=base_dir)

    assert again.port == server.port
    assert again.password() == password
    assert _query(again.url(), "SELECT sum(v) FROM kept") == 7


def test_cli_status_json_prints_the_connection_url(
    server: LocalPostgres, base_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["local-postgres", "status", "--base-dir", str(base_dir), "--json"]) == 0
    details = json.loads(capsys.readouterr().out)
    assert details["running"] is True
    assert details["url"] == server.url()
    assert _query(details["url"], "SELECT 1") == 1


def test_a_missing_server_binary_folder_says_what_to_do(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DYNAMIC_KAFKA_POSTGRES_BIN", str(tmp_path))
    with pytest.raises(LocalPostgresError, match="make setup"):
        find_bin_dir()


def test_a_taken_port_is_refused(server: LocalPostgres) -> None:
    other = Path(tempfile.mkdtemp(prefix="dynamic-kafka-pg-taken-"))
    other.chmod(0o755)
    try:
        with pytest.raises(LocalPostgresError, match=f"port {server.port} on 127.0.0.1 is taken"):
            start_postgres(base_dir=other, port=server.port)
    finally:
        stop_postgres(base_dir=other, purge=True)
        shutil.rmtree(other, ignore_errors=True)
