"""The class data sharing archive: recorded by its background process, then mapped by the next driver JVM.

Uses the machine's real cache (as every Spark start does), so the archive it records also speeds up the suite's
later Spark processes.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

from dynamic_kafka.config.models import SparkConfig
from dynamic_kafka.spark.session import session_class_archive

if TYPE_CHECKING:
    from pathlib import Path

SETTINGS = SparkConfig(master="local[1]")
REFUSAL = re.compile(r"mismatch|disabl|fail|unable|error|not match|cannot|invalid", re.IGNORECASE)
# Run in a fresh interpreter: one JVM per process.
ROUND_TRIP = """
import json, sys
from dynamic_kafka.config.models import SparkConfig
from dynamic_kafka.spark.session import build_spark_session
settings = SparkConfig.model_validate_json(sys.argv[1])
spark = build_spark_session(settings)
spark.range(5).write.format("delta").save(sys.argv[2])
args = list(spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
print(json.dumps({"rows": spark.read.format("delta").load(sys.argv[2]).count(), "jvm_args": args}))
"""


def test_a_recorded_archive_is_mapped_by_the_next_driver_jvm(spark: Any, tmp_path: Path) -> None:
    archive = session_class_archive(SETTINGS)
    assert archive is not None, "the session fixture's start should have recorded the resolved jars"
    recorder = subprocess.run(
        [sys.executable, "-m", "dynamic_kafka.spark.class_archive_recorder", archive.key],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert recorder.returncode == 0, recorder.stderr[-3000:]
    deadline = time.monotonic() + 300
    while not archive.ready and archive.recording and time.monotonic() < deadline:
        time.sleep(1)  # a background recorder of this session held the lock; it finishes the same archive
    assert archive.ready
    assert not list(archive.path.parent.glob(f"{archive.key}.*.partial"))

    classes = tmp_path / "class-load.log"
    # The JVM drops an archive it cannot map without a word; its cds log says why (classpath, heap, base archive).
    cds = tmp_path / "cds.log"
    java_options = f"-Xlog:class+load=info:file={classes} -Xlog:cds=info,class+path=info:file={cds}"
    settings = SETTINGS.model_copy(update={"conf": {"spark.driver.extraJavaOptions": java_options}})
    run = subprocess.run(
        [sys.executable, "-c", ROUND_TRIP, settings.model_dump_json(), str(tmp_path / "table")],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["rows"] == 5
    assert f"-XX:SharedArchiveFile={archive.path}" in result["jvm_args"]
    # Classes mapped from a dynamic archive are logged with "shared objects file (top)".
    from_archive = [line for line in classes.read_text().splitlines() if "shared objects file (top)" in line]
    refusals = [line for line in cds.read_text().splitlines() if REFUSAL.search(line)]
    assert any("org.apache.spark." in line for line in from_archive), (
        f"{len(from_archive)} classes from the archive; the JVM's cds log says: {refusals[-20:]}"
    )
