"""The Flink peer of benchmark 8: Apache Flink's Dynamic Kafka Source reading the same ranges, bounded, and
discarding the records.

``bench/flink/`` is a small Maven project (``pom.xml`` pins Flink and the Kafka connector; the job is
``DynamicKafkaPeer.java``). :func:`build` packages it once into ``.cache/bench/flink/target/`` (the job's jar and
its dependencies under ``lib/``) and builds again only when the pom or a source file changes (a hash of them is
kept beside the output). :func:`run_flink` runs the job as a fresh ``java`` process, measured by the same harness
as every other run (:func:`bench.measure.run_measured`), and checks that it counted exactly the records expected.

The job reads one stream id that a metadata service of its own maps to the data set's topic on both benchmark
clusters, each with its exact ``[earliest, latest)`` ranges (the ones the baseline and the ceiling read), in a
local MiniCluster at parallelism :data:`PARALLELISM`; records are counted into job accumulators and dropped by a
``DiscardingSink``. It prints one JSON line: ``records``, ``value_bytes``, ``job_s`` (the job's own run time in
the MiniCluster), ``execute_s`` (the whole ``execute()`` call, the MiniCluster's start and stop included) and
``jvm_s`` (since the JVM started).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time
from typing import TYPE_CHECKING

from bench.env import BENCH_DIR, ROOT, BenchEnv, bench_environ
from bench.measure import Measured, run_measured
from bench.runs import source_spec

if TYPE_CHECKING:
    from pathlib import Path

PROJECT = ROOT / "bench" / "flink"
OUT = BENCH_DIR / "flink"
TARGET = OUT / "target"
_BUILD_KEY = OUT / "build.key"
MAIN_CLASS = "dynamickafka.bench.DynamicKafkaPeer"
# Two task slots on a 2-core machine, as Spark's local[*] there runs two tasks at once.
PARALLELISM = 2


def _source_hash() -> str:
    digest = hashlib.sha256()
    for path in sorted([PROJECT / "pom.xml", *(PROJECT / "src").rglob("*")]):
        if path.is_file():
            digest.update(str(path.relative_to(PROJECT)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def classpath() -> str:
    """The job's classpath: its own jar, then every dependency Maven copied beside it."""
    return f"{TARGET / 'flink-peer-1.jar'}:{TARGET / 'lib' / '*'}"


def build() -> float:
    """Packages the Flink peer with Maven unless the packaged copy matches the pom and sources. Returns the
    seconds spent (0 when the cached build was reused). The first build downloads Flink, the Kafka connector and
    their dependencies from Maven Central into the local Maven repository (~120 MB; see bench/README.md).
    """
    key = _source_hash()
    if _BUILD_KEY.exists() and _BUILD_KEY.read_text() == key and (TARGET / "flink-peer-1.jar").exists():
        return 0.0
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError(
            "the Flink peer needs Maven (`mvn`) and Java 17 to build; install them (scripts/setup.sh does) "
            "or leave the Flink peer out"
        )
    began = time.monotonic()
    shutil.rmtree(TARGET, ignore_errors=True)
    done = subprocess.run([mvn, "-B", "-q", "package"], cwd=PROJECT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-30:])
        raise RuntimeError(f"building the Flink peer in {PROJECT} failed (exit {done.returncode}):\n{tail}")
    OUT.mkdir(parents=True, exist_ok=True)
    _BUILD_KEY.write_text(key)
    return time.monotonic() - began


def write_spec(env: BenchEnv, topic: str, folder: Path) -> Path:
    """Writes the job's spec (a Java properties file) for ``topic`` on every cluster with its exact ranges."""
    sources = source_spec(env, topic)
    lines = ["stream=bench", f"parallelism={PARALLELISM}", f"clusters={','.join(sources)}"]
    for cluster, source in sources.items():
        ranges = ",".join(f"{p}:{lo}-{hi}" for p, (lo, hi) in source["ranges"].items())
        lines += [
            f"cluster.{cluster}.bootstrap={source['bootstrap_servers']}",
            f"cluster.{cluster}.topic={source['topic']}",
            f"cluster.{cluster}.ranges={ranges}",
        ]
    path = folder / "flink.properties"
    path.write_text("\n".join(lines) + "\n")
    return path


def run_flink(env: BenchEnv, topic: str, folder: Path, *, expected: int) -> Measured:
    """The Flink job over ``topic``'s ranges as a fresh ``java`` process; raises unless it counted ``expected``
    records. The JSON it prints lands in ``extra``.
    """
    build()
    spec = write_spec(env, topic, folder)
    argv = ["java", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", classpath(), MAIN_CLASS, str(spec)]
    measured = run_measured(argv, cwd=folder, env=bench_environ()).check()
    measured.extra.update(json.loads(measured.stdout.strip().splitlines()[-1]))
    if measured.extra["records"] != expected:
        raise RuntimeError(f"the Flink peer counted {measured.extra['records']} records, not {expected}")
    return measured
