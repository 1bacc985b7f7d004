"""What a fresh ``dynamic-kafka`` process imports before it runs its command.

A scheduled run is a fresh ``dynamic-kafka run`` process, and what it imports before its first request to Spark is
most of a small run's client time (``bench.small_run``, benchmark 8's probed small run). The code of the other
commands, and the libraries only they use, load when one of them is called.
"""

from __future__ import annotations

import subprocess
import sys

# Modules the command line must not load before a command needs them: other operations' code, and what only that
# code uses (pyarrow's datasets and pandas for publishing, Ivy's XML and HTTP for resolving an in-process session's
# jars, the distribution's metadata for --version).
DEFERRED = (
    "dynamic_kafka.operations.backfill",
    "dynamic_kafka.operations.check",
    "dynamic_kafka.operations.check_online",
    "dynamic_kafka.operations.replay",
    "dynamic_kafka.operations.health",
    "dynamic_kafka.operations.maintain",
    "dynamic_kafka.metadata.watch",
    "dynamic_kafka.operations.offsets_reset",
    "dynamic_kafka.publish.publisher",
    "dynamic_kafka.spark.packages",
    "dynamic_kafka.operations.status",
    "dagster",
    "airflow",
    "pandas",
    "pyarrow.dataset",
    "urllib.request",
    "xml.sax",
)

_PROBE = f"""
import sys
from dynamic_kafka.cli.main import build_parser
build_parser().parse_args(["run", "--config", "x.yaml", "--pipeline", "p"])
print(sorted(m for m in {DEFERRED!r} if m in sys.modules))
"""


def test_the_command_line_loads_no_other_command_before_it_runs_one() -> None:
    done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, check=False)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
