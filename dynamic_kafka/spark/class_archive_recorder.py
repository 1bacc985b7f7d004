"""The background process that records a class data sharing archive (see :mod:`dynamic_kafka.spark.class_archive`).

Run as ``python -m dynamic_kafka.spark.class_archive_recorder KEY`` by
:meth:`~dynamic_kafka.spark.class_archive.ClassArchive.record_in_background`, at low priority, with the session's
``spark.jars*`` settings in its environment. A module of its own because it starts a Spark session: the archive
model stays importable by the session builder without an import cycle.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
from pathlib import Path

from dynamic_kafka.config.models import SparkConfig
from dynamic_kafka.spark.class_archive import JAR_SETTINGS_ENV, RECORD_ENV, prune_archives
from dynamic_kafka.spark.session import S3A_RECORDER_FLAG, build_spark_session, session_class_archive

logger = logging.getLogger(__name__)


def record(key: str, jar_settings: dict[str, str]) -> int:
    """Record the archive for a session with these ``spark.jars*`` settings: a tiny Delta round trip, then the
    JVM's exit.

    Returns:
        0 when the archive is in place (or was already), 1 when recording failed (nothing is left behind).
    """
    from pyspark import SparkContext

    s3a = jar_settings.pop(S3A_RECORDER_FLAG, "") == "true"
    settings = SparkConfig(master="local[1]", conf=jar_settings)
    probe = session_class_archive(settings, s3a=s3a)
    if probe is None or probe.key != key:
        logger.warning("the session's jars changed since the archive was asked for; not recording")
        return 1
    with probe.lock() as held:
        if not held or probe.ready:
            return 0
        for leftover in probe.path.parent.glob(f"{key}.*.partial"):
            leftover.unlink()  # of a recorder killed while the JVM wrote; we hold the lock, so nobody writes it
        partial = probe.path.with_name(f"{key}.{os.getpid()}.partial")
        with tempfile.TemporaryDirectory(prefix="dynamic-kafka-cds-") as scratch:
            os.environ[RECORD_ENV] = str(partial)
            spark = build_spark_session(settings, s3a=s3a)
            table = str(Path(scratch) / "table")
            spark.range(10).selectExpr("id", "cast(id as string) as value").write.format("delta").save(table)
            spark.read.format("delta").load(table).where("id > 3").count()
            gateway = SparkContext._gateway
            spark.stop()
            if gateway is None or getattr(gateway, "proc", None) is None:
                return 1
            gateway.proc.stdin.close()
            status = gateway.proc.wait(timeout=300)
        if status != 0 or not partial.is_file():
            partial.unlink(missing_ok=True)
            logger.warning("recording the class data sharing archive failed (JVM exit status %s)", status)
            return 1
        probe.path.with_suffix(".json").write_text(json.dumps(probe.description, indent=2) + "\n")
        os.replace(partial, probe.path)
        logger.info("class data sharing archive ready: %s", probe.path)
    prune_archives(probe.path.parent)
    return 0


if __name__ == "__main__":
    os.nice(10)  # here rather than in a preexec_fn: the parent may run threads
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    sys.exit(record(sys.argv[1], json.loads(os.environ.get(JAR_SETTINGS_ENV, "{}"))))
