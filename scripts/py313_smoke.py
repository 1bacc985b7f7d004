"""`make py313`: the built wheel on Python 3.13, as a user installs it (not part of `make test`: it installs a
whole environment and starts two Kafka clusters and a JVM, a few minutes).

Into a clean 3.13 virtualenv go the wheel with the `spark` and `dagster` extras (versions of uv.lock, uv's cache
first); there, from a folder outside the repository with no repository on sys.path, `dynamic-kafka --version`,
`check`, `plan` and an in-process `run` land a two-cluster stream exactly once (a second run lands nothing more),
and the Dagster integration builds the pipeline's definitions. The interpreter: `$PY313`, else the newest
`~/.pyenv/versions/3.13.*`.

Usage: .venv/bin/python scripts/py313_smoke.py
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from devtools.testing.clusters import local_test_clusters
from tests.support.exactly_once import TwoClusterStream
from tests.support.wheel import build_wheel, run

_DEFINITIONS = (
    "import sys; from dynamic_kafka.dagster import build_definitions; "
    "keys = build_definitions(sys.argv[1]).resolve_all_asset_keys(); print(sorted(k.to_user_string() for k in keys))"
)


def python313() -> str:
    """The 3.13 interpreter to test: ``$PY313``, else the newest one pyenv has."""
    if os.environ.get("PY313"):
        return os.environ["PY313"]
    found = sorted(Path.home().glob(".pyenv/versions/3.13.*/bin/python3.13"), key=lambda p: p.parent.parent.name)
    if not found:
        sys.exit("no Python 3.13: set PY313 to its interpreter (e.g. `pyenv install 3.13`)")
    return str(found[-1])


def main() -> None:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="py313-") as scratch:
        folder = Path(scratch)
        built = build_wheel(folder / "dist")
        bin_dir = built.new_venv(folder / "venv", "[spark,dagster]", python=python313())
        env = {"HOME": os.environ["HOME"], "PATH": f"{bin_dir}:{os.environ['PATH']}"}
        version = run([bin_dir / "python", "--version"], env=env, cwd=folder).stdout.strip()
        print(f"installed into {version}: {run([bin_dir / 'dynamic-kafka', '--version'], env=env).stdout.strip()}")

        with local_test_clusters(["east", "west"], folder / "kafka") as clusters:
            stream = TwoClusterStream(clusters, folder / "project", spark_config={"master": "local[1]"})
            stream.produce("first", east=4, west=3)
            config = ["--config", str(stream.harness.config_path)]
            cli = bin_dir / "dynamic-kafka"
            run([cli, "check", *config], env=env, cwd=folder)
            print(run([cli, "plan", *config, "--pipeline", "p"], env=env, cwd=folder).stdout.strip())
            for _ in range(2):
                run([cli, "run", *config, "--pipeline", "p"], env=env, cwd=folder)
            assert stream.harness.sink_rows() == stream.expected_rows(), "the sink is not the produced records"
            print(f"landed {len(stream.expected_rows())} records exactly once")
            defined = run([bin_dir / "python", "-c", _DEFINITIONS, stream.harness.config_path], env=env, cwd=folder)
            print(f"dynamic_kafka.dagster assets: {defined.stdout.strip()}")
    print(f"py313 smoke passed in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
