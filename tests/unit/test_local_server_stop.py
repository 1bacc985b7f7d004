"""``spark-server stop`` returns once the server's port is closed, not only once its process left procfs."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from typing import TYPE_CHECKING

from dynamic_kafka._toolchain.process import accepts_connections, free_port
from dynamic_kafka.spark.connect_server import LOG4J_FILE
from dynamic_kafka.spark.local_server import SERVER_DIR_ENV, LocalServer, stop_local_server

if TYPE_CHECKING:
    from pathlib import Path

    import pytest

# The recorded process listens, hands its socket to a child and exits at SIGTERM; the child keeps the port open a
# moment longer. That is what a JVM looks like while the kernel tears it down: its command line is already gone
# from procfs (so it no longer counts as running) while its listening socket still accepts connections.
_SERVER = textwrap.dedent(
    """
    import os, signal, socket, sys, time
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", int(sys.argv[1])))
    listener.listen()
    parent = os.getpid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while os.getppid() == parent:
            time.sleep(0.05)
        time.sleep(1.5)
        os._exit(0)
    print("listening", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    while True:
        time.sleep(1)
    """
)


def test_stop_returns_once_the_servers_port_no_longer_accepts_connections(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "spark-server"
    folder.mkdir()
    monkeypatch.setenv(SERVER_DIR_ENV, str(folder))
    port = free_port()
    marker = str(folder / LOG4J_FILE)  # how the product recognises its server's process
    server = subprocess.Popen([sys.executable, "-c", _SERVER, str(port), marker], stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None
    assert server.stdout.readline().strip() == "listening"
    record = LocalServer(
        pid=server.pid,
        port=port,
        fingerprint="f",
        master="local[2]",
        spark_version="4.1.3",
        idle_minutes=30,
        started_at="2026-01-01T00:00:00+00:00",
        log_file=str(folder / "server.log"),
    )
    (folder / "server.json").write_text(record.model_dump_json())

    stopped = stop_local_server()
    closed_at_return = not accepts_connections(port)
    server.wait(timeout=10)
    time.sleep(2)  # the child's grace, so no listener outlives the test

    assert stopped is not None
    assert stopped.pid == server.pid
    assert closed_at_return, "stop returned while the server's port still accepted connections"
