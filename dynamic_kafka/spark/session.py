"""The process-wide Spark session, with Delta Lake and the Kafka connector.

Importing this module starts no JVM and imports no pyspark: the session is built on the first call to
:func:`build_spark_session`, so loading Dagster definitions and runs with nothing to read stay JVM-free.

The connector and Delta jars come from Maven Central through ``spark.jars.packages`` into an Ivy cache under the
dynamic-kafka cache folder, so only the first session on a machine downloads them, and only the first session
with a given set of packages runs Ivy at all (see :mod:`dynamic_kafka.spark.packages`). The Kafka connector's version
always equals pyspark's (its token provider is the exception, see ``KAFKA_TOKENPROVIDER_VERSION``). Spark redacts
every setting and data source option whose key looks secret (including ``kafka.sasl.jaas.config``) in its UI, logs
and plans.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from dynamic_kafka._toolchain.cache import cache_dir
from dynamic_kafka._toolchain.maven import resolve_jars
from dynamic_kafka.config import SparkConfig
from dynamic_kafka.secrets import SPARK_REDACTION_REGEX as REDACTION_REGEX
from dynamic_kafka.spark.class_archive import RECORD_ENV, ClassArchive
from dynamic_kafka.spark.packages import ResolvedJars, delta_package

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)

# Spark's default (?i)secret|password|token|access[.]?key plus the Kafka client keys that carry credentials.
# spark-sql-kafka-0-10 depends on spark-token-provider-kafka-0-10 of its own version, but Maven Central (as this
# project reaches it) serves the token provider only up to 4.0.0: 4.0.1 and later are 404, so Ivy cannot resolve
# the connector. The token provider's public API is the same in 4.0.0 and the 4.1 line (compared with javap), so
# Ivy skips it and 4.0.0's jar, fetched by Maven with checksums, joins the classpath instead.
KAFKA_TOKENPROVIDER = "org.apache.spark:spark-token-provider-kafka-0-10_2.13"
KAFKA_TOKENPROVIDER_VERSION = "4.0.0"

_lock = threading.Lock()
_session: SparkSession | None = None
_session_settings: SparkConfig | None = None


def spark_conf(
    settings: SparkConfig, *, spark_version: str, extra_jars: list[Path]
) -> tuple[dict[str, str], list[str]]:
    """Return the Spark settings and the extra Maven packages for a session (pure; no JVM).

    Args:
        settings: the user's settings.
        spark_version: pyspark's version; the Kafka connector must match it exactly.
        extra_jars: local jars to put on the classpath (the Kafka token provider).

    Returns:
        ``(conf, packages)``: ``conf`` without ``spark.jars.packages``; ``packages`` are Delta's, the Kafka
        connector's and the user's Maven coordinates.
    """
    conf = {
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.shuffle.partitions": "4",
        # Delta log replay defaults to 50 tasks: mostly scheduling overhead for tables of a few files.
        "spark.databricks.delta.snapshotPartitions": "4",
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.memory": "1g",
        "spark.ui.enabled": str(settings.ui_enabled).lower(),
        "spark.ui.showConsoleProgress": "false",
        "spark.jars.ivy": str(cache_dir() / "ivy"),
        "spark.redaction.regex": REDACTION_REGEX,
        **settings.conf,
    }
    conf["spark.jars"] = _join_list(*map(str, extra_jars), conf.get("spark.jars", ""))
    conf["spark.jars.excludes"] = _join_list(KAFKA_TOKENPROVIDER, conf.get("spark.jars.excludes", ""))
    packages = [delta_package(spark_version), f"org.apache.spark:spark-sql-kafka-0-10_2.13:{spark_version}"]
    packages += _join_list(conf.pop("spark.jars.packages", "")).split(",")
    return conf, [p for p in packages if p]


def build_spark_session(settings: SparkConfig | None = None) -> SparkSession:
    """Return the process-wide Spark session, building it on first use; with ``settings.remote``, this process's
    Spark Connect session to that server instead (:func:`dynamic_kafka.spark.remote.build_remote_session`).

    Later calls return the same session while it runs. Spark fixes most settings when its JVM starts, so a call
    with other settings than the running session's gets the running session (and a warning).

    Args:
        settings: how to build the session; defaults to ``SparkConfig()``.

    Returns:
        A session with Delta Lake's SQL extension and catalog, and the ``kafka`` data source.

    Raises:
        SparkConnectUnavailableError: ``settings.remote`` is set and that server does not answer (retriable).

    Example:
        >>> spark = build_spark_session(SparkConfig(master="local[2]"))  # doctest: +SKIP
        >>> spark.read.format("delta").load("data/orders").count()  # doctest: +SKIP
    """
    global _session, _session_settings
    settings = settings or SparkConfig()
    if settings.remote is not None:
        from dynamic_kafka.spark.remote import build_remote_session

        return build_remote_session(settings)
    with _lock:
        if _session is not None and _is_active(_session):
            if settings != _session_settings:
                logger.warning("a Spark session already runs with other settings; reusing it unchanged")
            return _session
        from pyspark.sql import SparkSession

        launch = _Launch.prepare(settings)
        conf = dict(launch.conf)
        recording = os.environ.get(RECORD_ENV)
        if recording:
            java_options = ClassArchive.record_options(recording)
        elif launch.archive is not None and launch.archive.ready:
            java_options = launch.archive.use_options()
        else:
            java_options = ""
        if java_options:
            conf["spark.driver.extraJavaOptions"] = f"{conf.get('spark.driver.extraJavaOptions', '')} {java_options}"
        builder = SparkSession.builder.master(settings.master).appName(settings.app_name)
        for key, value in conf.items():
            builder = builder.config(key, value.strip())
        logger.info(
            "starting Spark (%s); %s%s",
            settings.master,
            f"jars resolved into {conf['spark.jars.ivy']}" if launch.resolved is None else "cached jars",
            ", class data sharing archive" if java_options and not recording else "",
        )
        _session = builder.getOrCreate()
        _session.sparkContext.setLogLevel("WARN")
        _record_start_up_aids(launch, settings, _session, recording=bool(recording))
        _ship_submitted_jars(_session)
        _session_settings = settings
        return _session


def _record_start_up_aids(launch: _Launch, settings: SparkConfig, session: SparkSession, *, recording: bool) -> None:
    """After a start: record the jars Ivy resolved, or have the class archive recorded. Both only speed up later
    starts, so a cache folder that cannot be written costs speed, never the run."""
    try:
        if launch.resolved is None and session.sparkContext._jvm is not None:
            submitted = session.sparkContext._jvm.System.getProperty("spark.jars") or ""
            launch.resolution.save(submitted, launch.own_jars)
        elif launch.archive is not None and not launch.archive.ready and not recording:
            launch.archive.record_in_background({k: v for k, v in settings.conf.items() if k.startswith("spark.jars")})
    except OSError as e:
        logger.warning("could not record Spark start-up aids in %s (later starts stay slower): %s", cache_dir(), e)


def session_class_archive(settings: SparkConfig) -> ClassArchive | None:
    """The class data sharing archive a session with ``settings`` would use; None when it would use none
    (switched off, or the jars are not resolved yet)."""
    return _Launch.prepare(settings).archive


class _Launch:
    """Everything decided before the JVM starts: settings, jars, and the class data sharing archive."""

    def __init__(self, conf: dict[str, str], own_jars: str, resolution: ResolvedJars, resolved: list[str] | None):
        self.conf = conf
        self.own_jars = own_jars
        self.resolution = resolution
        self.resolved = resolved
        self.archive: ClassArchive | None = None

    @classmethod
    def prepare(cls, settings: SparkConfig) -> _Launch:
        import pyspark

        token_provider = resolve_jars(
            f"spark-token-provider-{KAFKA_TOKENPROVIDER_VERSION}",
            [f"{KAFKA_TOKENPROVIDER}:{KAFKA_TOKENPROVIDER_VERSION}"],
            transitive=False,
        )
        extra_jars = sorted(token_provider.glob("*.jar"))
        conf, packages = spark_conf(settings, spark_version=pyspark.__version__, extra_jars=extra_jars)
        own_jars = conf["spark.jars"]
        resolution = ResolvedJars(packages, conf)
        resolved = resolution.load()
        launch = cls(conf, own_jars, resolution, resolved)
        if resolved is None:
            conf["spark.jars.packages"] = ",".join(packages)
        else:
            conf["spark.jars"] = _join_list(own_jars, *resolved)
            if settings.class_data_sharing:
                launch.archive = ClassArchive(conf["spark.jars"].split(","), spark_version=pyspark.__version__)
        return launch


def stop_spark_session() -> None:
    """Stop the process-wide session and close the Spark Connect sessions, if any; the next
    :func:`build_spark_session` starts (or connects) a new one."""
    global _session, _session_settings
    from dynamic_kafka.spark.remote import stop_remote_sessions

    stop_remote_sessions()
    with _lock:
        if _session is not None:
            _session.stop()
        _session = None
        _session_settings = None


def _ship_submitted_jars(session: SparkSession) -> None:
    """Make executors get every jar spark-submit resolved, not only the ``spark.jars`` we set.

    spark-submit merges ``spark.jars`` with the jars it resolved for ``spark.jars.packages`` (the Kafka connector,
    Delta) and puts them all on the driver's classpath, but pyspark then sets the builder's own ``spark.jars`` over
    that merged list, so the context ships only our jars: local mode works (executors share the driver's
    classpath) while executors of a cluster fail with ``ClassNotFoundException`` for the Kafka source.
    """
    context = session.sparkContext
    if (context.master or "local").startswith("local") or context._jvm is None:
        return
    submitted = context._jvm.System.getProperty("spark.jars") or ""
    shipped = {uri.rsplit("/", 1)[-1] for uri in _join_list(context._jsc.sc().listJars().mkString(",")).split(",")}
    for jar in _join_list(submitted).split(","):
        if jar and jar.rsplit("/", 1)[-1] not in shipped:
            context._jsc.addJar(jar)


def _join_list(*items: str) -> str:
    """Join comma-separated Spark list settings, dropping blanks."""
    return ",".join(part.strip() for item in items for part in item.split(",") if part.strip())


def _is_active(session: SparkSession) -> bool:
    # A stopped SparkContext drops its Java handle; the Python object lingers.
    return session.sparkContext._jsc is not None
