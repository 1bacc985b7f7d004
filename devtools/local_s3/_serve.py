"""Entry point of the detached server process: ``python -m devtools.local_s3._serve --dir DIR --port P``.

It runs moto's standalone S3 server, bound to 127.0.0.1. ``--dir`` is unused by the server itself: it puts the
server's folder in the process's command line, which is how a recorded pid is recognised as this server (a pid
reused by another process after a reboot never counts as a running server).
"""

from __future__ import annotations

import argparse


def main() -> None:
    """Parse ``--dir`` and ``--port`` and serve S3 on 127.0.0.1 until SIGTERM."""
    parser = argparse.ArgumentParser(prog="devtools.local_s3._serve")
    parser.add_argument("--dir", required=True, help="the server's folder (identifies the process)")
    parser.add_argument("--port", required=True, type=int)
    args = parser.parse_args()
    from moto.server import main as moto_main

    moto_main(["--host", "127.0.0.1", "--port", str(args.port)])


if __name__ == "__main__":
    main()
