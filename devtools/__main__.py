"""``python -m devtools``: the development services' command line (see :mod:`devtools.cli.main`)."""

from devtools.cli.main import run

if __name__ == "__main__":
    run()
