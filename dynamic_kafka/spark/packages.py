"""The jars a Spark session needs beyond pyspark's own: Delta Lake, the Kafka connector, and any the user adds.

They are resolved from Maven Central (or the user's ``spark.jars.repositories`` / ``spark.jars.ivySettings``) once,
by the Apache Ivy that pyspark ships, with checksums verified (see :mod:`dynamic_kafka._toolchain.ivy`), into a
cache folder named after the coordinates and exclusions, and every session (in-process or a local Spark Connect
server) gets them as ``spark.jars``. Java is all it takes. spark-submit's own resolution of ``spark.jars.packages``
is not used: it ran at every start (seconds, even with a warm cache), printed a wall of resolution output, and two
processes resolving into one Ivy cache at once could corrupt it. Here Ivy runs under a file lock, once per folder,
and not at all once a folder is complete.

Jars whose artifact pyspark already ships (in any version) are left out: Spark loads its own jars first, so a
second copy would never be used, only scanned, archived and shipped to executors.

The Kafka connector depends on ``spark-token-provider-kafka-0-10`` of its own version, which Maven Central (as
this project reaches it) serves only up to 4.0.0; its public API is the same in 4.0.0 and the 4.1 line (compared
with javap), so the resolution excludes it and 4.0.0's jar joins the classpath instead.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from dynamic_kafka._toolchain.ivy import resolve_jars
from dynamic_kafka.errors import ToolchainError

if TYPE_CHECKING:
    from collections.abc import Sequence

logger = logging.getLogger(__name__)

SCALA_VERSION = "2.13"
KAFKA_TOKENPROVIDER = f"org.apache.spark:spark-token-provider-kafka-0-10_{SCALA_VERSION}"
KAFKA_TOKENPROVIDER_VERSION = "4.0.0"
# A Maven jar's file name: artifact, then "-" and a version that starts with a digit.
_JAR_NAME = re.compile(r"(?P<artifact>.+?)-\d[A-Za-z0-9.]*(?:-[A-Za-z0-9.]+)*\.jar")


def delta_package(spark_version: str) -> str:
    """Return Delta Lake's Maven coordinate for the installed ``delta-spark`` and Spark's minor version.

    The same coordinate ``delta.pip_utils.configure_spark_with_delta_pip`` would choose.

    Raises:
        ToolchainError: delta-spark (the spark extra) is not installed.

    Example:
        >>> delta_package("4.1.3")  # doctest: +SKIP
        'io.delta:delta-spark_4.1_2.13:4.4.0'
    """
    spark_minor = ".".join(spark_version.split(".")[:2])
    try:
        delta_version = metadata.version("delta-spark")
    except metadata.PackageNotFoundError as e:
        raise ToolchainError(
            "an in-process Spark session needs Delta Lake's jar, and delta-spark is not installed (it names the "
            "version); this install has the Spark Connect client only.",
            hint="Install the spark extra (`pip install 'dynamic-kafka[spark]'`), or set spark.remote to a Spark "
            "Connect server (docs/deployment.md).",
        ) from e
    return f"io.delta:delta-spark_{spark_minor}_{SCALA_VERSION}:{delta_version}"


# from_avro for registry and schema-file values. Maven Central serves spark-avro_2.13 up to 4.1.1, not 4.1.3;
# 4.1.1 works on Spark 4.1.3 (docs/formats.md). Move to pyspark's version once Central serves it.
SPARK_AVRO_PACKAGE = f"org.apache.spark:spark-avro_{SCALA_VERSION}:4.1.1"
# Spark's binding of Hadoop's path output committers (PathOutputCommitProtocol, BindingParquetOutputCommitter), for
# staged appends' manifest committer (sink/staged_append.py). Maven Central serves it up to 4.1.2, not 4.1.3;
# its five classes use only Spark APIs that 4.1.3 keeps. Move to pyspark's version once Central serves it.
HADOOP_CLOUD_VERSION = "4.1.2"
HADOOP_CLOUD_PACKAGE = f"org.apache.spark:spark-hadoop-cloud_{SCALA_VERSION}:{HADOOP_CLOUD_VERSION}"


def session_packages(spark_version: str, extra: Sequence[str] = ()) -> list[str]:
    """Return the Maven coordinates of a session: Delta's, the Kafka connector's (pyspark's version), spark-avro,
    then ``extra``.

    Example:
        >>> session_packages("4.1.3", ["g:a:1"])[1:]
        ['org.apache.spark:spark-sql-kafka-0-10_2.13:4.1.3', 'org.apache.spark:spark-avro_2.13:4.1.1', 'g:a:1']
    """
    packages = [
        delta_package(spark_version),
        f"org.apache.spark:spark-sql-kafka-0-10_{SCALA_VERSION}:{spark_version}",
        SPARK_AVRO_PACKAGE,
    ]
    return packages + [p for p in extra if p and p not in packages]


def session_jars(
    packages: Sequence[str],
    exclusions: Sequence[str] = (),
    *,
    repositories: Sequence[str] = (),
    ivy_settings: Path | None = None,
) -> list[Path]:
    """Return the jar files of ``packages`` and their runtime dependencies, downloading them once.

    Args:
        packages: ``group:artifact:version`` coordinates (see :func:`session_packages`).
        exclusions: ``group:artifact`` of transitive dependencies to leave out, besides the Kafka token provider.
        repositories: Maven repositories tried before Maven Central (``spark.jars.repositories``).
        ivy_settings: an Ivy settings file replacing the default resolvers (``spark.jars.ivySettings``).

    Raises:
        ToolchainError: no Java, the repositories are unreachable and nothing is cached, or a download failed.
    """
    excluded = sorted({KAFKA_TOKENPROVIDER, *exclusions})
    digest = hashlib.sha256(json.dumps([sorted(packages), excluded]).encode()).hexdigest()[:12]
    resolve = partial(resolve_jars, repositories=repositories, ivy_settings=ivy_settings)
    libs = resolve(f"spark-jars-{digest}", packages, exclusions=excluded)
    token_provider = resolve(
        f"spark-token-provider-{KAFKA_TOKENPROVIDER_VERSION}",
        [f"{KAFKA_TOKENPROVIDER}:{KAFKA_TOKENPROVIDER_VERSION}"],
        transitive=False,
    )
    # The committer classes alone: their dependencies (Hadoop's committers, cloud connectors) are pyspark's own
    # or the S3A packages a pipeline on S3 adds.
    hadoop_cloud = resolve(f"spark-hadoop-cloud-{HADOOP_CLOUD_VERSION}", [HADOOP_CLOUD_PACKAGE], transitive=False)
    shipped = {artifact_of(jar.name) for jar in _pyspark_jars()}
    ours = [jar for jar in sorted(libs.glob("*.jar")) if artifact_of(jar.name) not in shipped]
    return sorted(token_provider.glob("*.jar")) + sorted(hadoop_cloud.glob("*.jar")) + ours


def artifact_of(jar_name: str) -> str:
    """Return the artifact of a Maven jar's file name.

    Example:
        >>> artifact_of("zstd-jni-1.5.7-3.jar"), artifact_of("spark-sql-kafka-0-10_2.13-4.1.3.jar")
        ('zstd-jni', 'spark-sql-kafka-0-10_2.13')
    """
    match = _JAR_NAME.fullmatch(jar_name)
    return match.group("artifact") if match else jar_name


def _pyspark_jars() -> list[Path]:
    import pyspark

    return list((Path(pyspark.__file__).parent / "jars").glob("*.jar"))
