"""The process-wide Spark session, with Delta Lake and the Kafka connector.

Importing this module starts no JVM and imports no pyspark: the session is built on the first call to
:func:`build_spark_session`, so loading Dagster definitions and runs with nothing to read stay JVM-free.

The connector and Delta jars (and any packages the user lists in ``spark.jars.packages``) are resolved from Maven
Central once and passed as ``spark.jars`` (see :mod:`dynamic_kafka.spark.packages`); Ivy never runs. The Kafka
connector's version always equals pyspark's. Spark redacts every setting and data source option whose key looks
secret (including ``kafka.sasl.jaas.config``) in its UI, logs and plans.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from dynamic_kafka._toolchain.cache import cache_dir
from dynamic_kafka.config.models import SparkConfig
from dynamic_kafka.errors import ConfigError
from dynamic_kafka.secrets import SPARK_OPTIONS_REDACTION_REGEX as OPTIONS_REDACTION_REGEX
from dynamic_kafka.secrets import SPARK_REDACTION_REGEX as REDACTION_REGEX
from dynamic_kafka.secrets import SPARK_STRING_REDACTION_REGEX as STRING_REDACTION_REGEX
from dynamic_kafka.secrets import guard_py4j_logging
from dynamic_kafka.spark.class_archive import RECORD_ENV, ClassArchive
from dynamic_kafka.storage import StorageConfig, spark_s3a_conf

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence

    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)

# Hadoop's S3A connector for s3:// and s3a:// tables. hadoop-aws must match the Hadoop that pyspark bundles
# (hadoop-client-api 3.4.2 in pyspark 4.1.3), and the AWS SDK the version hadoop-project 3.4.2 names
# (aws-java-sdk-v2.version). The SDK's 641 MB bundle is excluded for the S3 client and its transfer manager:
# 17 MB in all (docs/object-storage.md). Added only when a pipeline uses S3, so local users download none of it.
HADOOP_AWS_VERSION = "3.4.2"
AWS_SDK_VERSION = "2.29.52"
S3A_PACKAGES = (
    f"org.apache.hadoop:hadoop-aws:{HADOOP_AWS_VERSION}",
    f"software.amazon.awssdk:s3:{AWS_SDK_VERSION}",
    f"software.amazon.awssdk:s3-transfer-manager:{AWS_SDK_VERSION}",
)
S3A_EXCLUDES = ("software.amazon.awssdk:bundle",)
JAR_RESOLUTION_KEYS = (
    "spark.jars.packages",
    "spark.jars.excludes",
    "spark.jars.repositories",
    "spark.jars.ivySettings",
)
"""Spark's settings of ``spark.jars.packages`` resolution, which dynamic-kafka does itself (spark/packages.py)."""
_S3A_CLASS = "org.apache.hadoop.fs.s3a.S3AFileSystem"
# Tells the class archive recorder that the session it records has the S3A connector (so the same jars).
S3A_RECORDER_FLAG = "dynamic_kafka.s3a"

_lock = threading.Lock()
_session: SparkSession | None = None
_session_settings: SparkConfig | None = None


def requested_packages(settings: SparkConfig, spark_version: str, *, s3a: bool = False) -> tuple[list[str], list[str]]:
    """Return the Maven coordinates and exclusions a session with ``settings`` needs (pure; nothing downloaded).

    The user's ``spark.jars.packages`` and ``spark.jars.excludes`` join Delta's and the Kafka connector's, and with
    ``s3a`` Hadoop's S3A connector (:data:`S3A_PACKAGES`, without the AWS SDK bundle).
    """
    # Imported here: resolving jars (Ivy, XML, HTTP) is an in-process start's, never a Connect client's.
    from dynamic_kafka.spark.packages import session_packages

    extra = [*(S3A_PACKAGES if s3a else ()), *_join_list(settings.conf.get("spark.jars.packages", "")).split(",")]
    packages = session_packages(spark_version, [p for p in extra if p])
    exclusions = [*(S3A_EXCLUDES if s3a else ())]
    exclusions += [e for e in _join_list(settings.conf.get("spark.jars.excludes", "")).split(",") if e]
    return packages, exclusions


def object_storage_conf(buckets: Mapping[str, StorageConfig | None]) -> dict[str, str]:
    """Return the ``spark.hadoop.fs.s3a.bucket.<bucket>.*`` settings for ``buckets`` (resolves secret references).

    Per-bucket settings let pipelines with different endpoints or credentials share one session.

    Raises:
        ConfigError: a referenced environment variable is unset or a referenced file unreadable.
    """
    conf: dict[str, str] = {}
    for bucket, storage in sorted(buckets.items()):
        conf.update(spark_s3a_conf(storage, owner=f"the storage of bucket {bucket!r}", bucket=bucket))
    return conf


def configure_object_storage(session: SparkSession, buckets: Mapping[str, StorageConfig | None]) -> None:
    """Make a running session reach ``buckets``: their per-bucket S3A settings go into its Hadoop configuration.

    A session serves every pipeline of the process, and a session started earlier (for another project, or a
    test session) may not know a bucket yet. Settings of a bucket apply from its first use on (Hadoop caches one
    file system per bucket), which is why two pipelines on one bucket must share one storage block.

    Raises:
        ConfigError: the session was started without Hadoop's S3A connector.
    """
    from dynamic_kafka.spark.remote import is_remote

    # A Spark Connect session has no SparkContext here: the server was started with its buckets' settings.
    if not buckets or is_remote(session):
        return
    if session.sparkContext._jsc is None or session.sparkContext._jvm is None:
        return
    # Spark's class loader, not the JVM's system one: jars given as spark.jars are only on the former.
    if not session.sparkContext._jvm.org.apache.spark.util.Utils.classIsLoadable(_S3A_CLASS):
        raise ConfigError(
            f"the running Spark session has no S3A connector ({_S3A_CLASS}), so it cannot reach bucket(s) "
            f"{', '.join(sorted(buckets))}.",
            hint="Start the session with build_spark_session(..., s3a=True) or let dynamic-kafka start it.",
        )
    hadoop = session.sparkContext._jsc.hadoopConfiguration()
    for key, value in object_storage_conf(buckets).items():
        hadoop.set(key.removeprefix("spark.hadoop."), value)


SNAPSHOT_FILES_PER_TASK = 20_000
"""Data files per task when Delta rebuilds a table's snapshot (see :func:`log_replay_settings`)."""


def log_replay_settings(files: int) -> dict[str, str]:
    """The session setting that sizes Delta's log replay (``snapshotPartitions``) for a table of ``files`` data
    files, for :func:`session_settings` around a write to it.

    An idempotent append rebuilds the table's snapshot to find its transaction: with the session default (4
    tasks), a small sink costs about four times the CPU of one task (measured through a warm Connect server: 0.8 s
    vs 0.15 s of executor CPU per run), while a sink of many files still gets one task per
    :data:`SNAPSHOT_FILES_PER_TASK` files.
    """
    tasks = max(1, min(50, math.ceil(files / SNAPSHOT_FILES_PER_TASK)))
    return {"spark.databricks.delta.snapshotPartitions": str(tasks)}


INTERPRETED_MAX_RECORDS = 50_000
"""Writes of at most this many records evaluate their expressions interpreted (see :func:`codegen_settings`)."""


def codegen_settings(records: int | None) -> dict[str, str]:
    """The session settings of Spark's code generation for a write of ``records`` records (None: unknown, as with
    a bootstrap archive's rows), for :func:`session_settings` around it: off up to
    :data:`INTERPRETED_MAX_RECORDS`, on (Spark's defaults, stated) above.

    A Spark Connect server keeps generated classes per session (the compile cache is keyed by the session's class
    loader since Spark 3.5), and each write's observed counts hold its own offsets as constants, so a write
    compiles some of its classes again even in a pipeline's shared session. For a few thousand rows the
    interpreted expressions cost less than compiling them (a 10,000-record run's server CPU 1.49 -> 1.12 s,
    measured in a fresh session); a larger write keeps codegen, whose faster rows repay the compile, and says so:
    a small run killed inside its write leaves code generation off in the shared session. ``factoryMode`` covers
    the projections outside whole-stage code (the Kafka rows, the observed metrics, the file writer's); a Spark
    without it ignores the setting.
    """
    if records is None or records > INTERPRETED_MAX_RECORDS:
        return {"spark.sql.codegen.wholeStage": "true", "spark.sql.codegen.factoryMode": "FALLBACK"}
    return {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}


@contextmanager
def session_settings(spark: SparkSession, settings: Mapping[str, str]) -> Iterator[None]:
    """Applies ``settings`` to the session for the block, then puts back what it held (unsets what it did not).

    A session may be shared with the caller's own work (a notebook, other pipelines of a process, every client of
    a Connect server's session), so what a run needs for one write must not outlive the write. Settings are made
    in the given order (a first one the session refuses leaves nothing set); through Spark Connect each step is
    one round trip for all of them (a small run's two writes made 12 of them, one per setting and step).

    A run killed inside the block leaves the settings in its session, and a pipeline's runs share one server
    session (``spark.session_per_pipeline``): so a write states every setting its work depends on, never relying
    on a session's defaults. Nothing to apply: nothing asked.
    """
    from dynamic_kafka.spark.remote import ConnectConf, is_remote

    if not settings:
        yield
        return
    conf: _Conf = ConnectConf(spark) if is_remote(spark) else _SessionConf(spark)
    before = conf.get(list(settings))
    conf.set(settings)
    try:
        yield
    finally:
        try:
            conf.set({name: held for name, held in before.items() if held is not None})
            conf.unset([name for name, held in before.items() if held is None])
        except Exception as e:  # a session that went away (a stopped Connect server) keeps no settings to restore
            logger.warning("Spark session settings %s not restored: %s", ", ".join(before), e)


class _Conf(Protocol):
    def get(self, names: list[str]) -> dict[str, str | None]: ...
    def set(self, settings: Mapping[str, str]) -> None: ...
    def unset(self, names: list[str]) -> None: ...


class _SessionConf:
    """A session's settings one by one (an in-process session: no round trip)."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    def get(self, names: list[str]) -> dict[str, str | None]:
        return {name: self.spark.conf.get(name, None) for name in names}

    def set(self, settings: Mapping[str, str]) -> None:
        for name, value in settings.items():
            self.spark.conf.set(name, value)

    def unset(self, names: list[str]) -> None:
        for name in names:
            self.spark.conf.unset(name)


def spark_conf(settings: SparkConfig, *, jars: Sequence[Path]) -> dict[str, str]:
    """Return the Spark settings of a session (pure; no JVM).

    Args:
        settings: the user's settings; their ``conf`` wins over dynamic-kafka's defaults.
        jars: the resolved jars (see :func:`requested_packages`); the user's own ``spark.jars`` follow them.

    Returns:
        The settings, with ``spark.jars`` holding every jar and no ``spark.jars.packages`` (nothing for Ivy).
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
        "spark.redaction.regex": REDACTION_REGEX,
        "spark.sql.redaction.string.regex": STRING_REDACTION_REGEX,
        "spark.sql.redaction.options.regex": OPTIONS_REDACTION_REGEX,
        **settings.conf,
    }
    # Resolved here (session_jars), not by Spark: Spark would resolve them again at every start.
    for key in JAR_RESOLUTION_KEYS:
        conf.pop(key, None)
    conf["spark.jars"] = _join_list(*map(str, jars), conf.get("spark.jars", ""))
    return conf


def build_spark_session(
    settings: SparkConfig | None = None,
    *,
    object_storage: Mapping[str, StorageConfig | None] | None = None,
    s3a: bool | None = None,
    shared_as: str | None = None,
) -> SparkSession:
    """Return the process-wide Spark session, building it on first use; with ``settings.remote``, this process's
    Spark Connect session to that server instead (:func:`dynamic_kafka.spark.remote.build_remote_session`), the
    server session named by ``shared_as`` when given; with ``settings.local_server`` (and no object storage), the
    same through the local server dynamic-kafka starts or reuses (:mod:`dynamic_kafka.spark.local_server`).

    Later calls return the same session while it runs. Spark fixes most settings when its JVM starts, so a call
    with other settings than the running session's gets the running session (and a warning); the per-bucket
    settings of ``object_storage`` are still applied to it (:func:`configure_object_storage`).

    Args:
        settings: how to build the session; defaults to ``SparkConfig()``.
        object_storage: the S3 buckets the session must reach, each with its storage block (see
            :meth:`~dynamic_kafka.config.models.ProjectConfig.object_store_buckets`); unused with ``settings.remote``,
            where the server holds the S3A settings.
        s3a: add Hadoop's S3A connector; default: when ``object_storage`` names a bucket.
        shared_as: with ``settings.remote``: the name of a server session that outlives this process, shared by
            every process that gives the same name (see :func:`dynamic_kafka.spark.remote.build_remote_session`);
            unused in-process.

    Returns:
        A session with Delta Lake's SQL extension and catalog, and the ``kafka`` data source.

    Raises:
        SparkConnectUnavailableError: ``settings.remote`` is set and that server does not answer (retriable).
        LocalSparkServerError: ``settings.local_server`` is set and the local server did not come up (retriable).

    Example:
        >>> spark = build_spark_session(SparkConfig(master="local[2]"))  # doctest: +SKIP
        >>> spark.read.format("delta").load("data/orders").count()  # doctest: +SKIP
    """
    global _session, _session_settings
    settings = settings or SparkConfig()
    buckets = dict(object_storage or {})
    if settings.remote is None and settings.local_server and not (buckets or s3a):
        from dynamic_kafka.spark.local_server import local_server_settings

        launch = SessionLaunch.prepare(settings.without_class_data_sharing())
        settings = local_server_settings(settings, launch.conf)
    elif settings.remote is None and settings.local_server:
        # A bucket's keys would have to reach a server shared by every project of the user: not done.
        logger.info("spark.local_server is not used with tables on object storage; starting Spark in this process")
    if settings.remote is not None:
        from dynamic_kafka.spark.remote import build_remote_session

        # Object storage is the server's: its S3A jars and bucket settings come with `spark-connect up`.
        return build_remote_session(settings, shared_as=shared_as)
    guard_py4j_logging()
    with _lock:
        if _session is not None and _is_active(_session):
            if settings != _session_settings:
                logger.warning("a Spark session already runs with other settings; reusing it unchanged")
            configure_object_storage(_session, buckets)
            return _session
        from pyspark.sql import SparkSession

        launch = SessionLaunch.prepare(settings, s3a=bool(buckets) if s3a is None else s3a)
        # The buckets' settings (their keys among them) are set once the JVM runs, not given to the builder: pyspark
        # starts the JVM with every builder setting as `--conf` on spark-submit's command line, which every user of
        # the machine can read. Set live in the Hadoop configuration, they reach the executors with each job.
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
        # Python UDFs (Protobuf decoding) run in Python workers, which pyspark starts as $PYSPARK_PYTHON, else
        # `python3` from PATH: often another interpreter, without this process's packages (pyarrow, protobuf).
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        builder = SparkSession.builder.master(settings.master).appName(settings.app_name)
        for key, value in conf.items():
            builder = builder.config(key, value.strip())
        logger.info(
            "starting Spark (%s)%s",
            settings.master,
            " with its class data sharing archive" if java_options and not recording else "",
        )
        _session = builder.getOrCreate()
        _session.sparkContext.setLogLevel("WARN")
        configure_object_storage(_session, buckets)
        _record_start_up_aids(launch, settings, recording=bool(recording))
        _session_settings = settings
        return _session


def _record_start_up_aids(launch: SessionLaunch, settings: SparkConfig, *, recording: bool) -> None:
    """After a start, have the class archive recorded if it is missing. It only speeds up later starts, so a
    cache folder that cannot be written costs speed, never the run.
    """
    try:
        if launch.archive is not None and not launch.archive.ready and not recording:
            jar_settings = {k: v for k, v in settings.conf.items() if k.startswith("spark.jars")}
            if launch.s3a:
                jar_settings[S3A_RECORDER_FLAG] = "true"
            launch.archive.record_in_background(jar_settings)
    except OSError as e:
        logger.warning("could not record Spark start-up aids in %s (later starts stay slower): %s", cache_dir(), e)


def session_class_archive(settings: SparkConfig, *, s3a: bool = False) -> ClassArchive | None:
    """The class data sharing archive a session with ``settings`` would use; None when switched off."""
    return SessionLaunch.prepare(settings, s3a=s3a).archive


@dataclass(frozen=True)
class SessionLaunch:
    """Everything decided before a Spark JVM starts: its settings (jars resolved) and its class data archive.

    The local Spark Connect server is launched from the same settings, so both modes run the same jars.
    """

    conf: dict[str, str]
    archive: ClassArchive | None
    s3a: bool = False

    @classmethod
    def prepare(cls, settings: SparkConfig, *, s3a: bool = False) -> SessionLaunch:
        """Resolve the session's jars (downloading them the first time) and build its settings.

        Raises:
            ToolchainError: the jars are not cached and cannot be downloaded.
        """
        import pyspark

        from dynamic_kafka.spark.packages import session_jars

        packages, exclusions = requested_packages(settings, pyspark.__version__, s3a=s3a)
        repositories = [r for r in _join_list(settings.conf.get("spark.jars.repositories", "")).split(",") if r]
        ivy_settings = settings.conf.get("spark.jars.ivySettings")
        jars = session_jars(
            packages,
            exclusions,
            repositories=repositories,
            ivy_settings=Path(ivy_settings).expanduser() if ivy_settings else None,
        )
        conf = spark_conf(settings, jars=jars)
        archive = None
        if settings.class_data_sharing:
            archive = ClassArchive(conf["spark.jars"].split(","), spark_version=pyspark.__version__)
        return cls(conf=conf, archive=archive, s3a=s3a)


def stop_spark_session() -> None:
    """Stop the process-wide session and close the Spark Connect sessions, if any; the next
    :func:`build_spark_session` starts (or connects) a new one.
    """
    global _session, _session_settings
    from dynamic_kafka.spark.local_server import release_local_server
    from dynamic_kafka.spark.remote import stop_remote_sessions

    stop_remote_sessions()
    release_local_server()
    with _lock:
        if _session is not None:
            _session.stop()
        _session = None
        _session_settings = None


def _join_list(*items: str) -> str:
    """Join comma-separated Spark list settings, dropping blanks."""
    return ",".join(part.strip() for item in items for part in item.split(",") if part.strip())


def _is_active(session: SparkSession) -> bool:
    # A stopped SparkContext drops its Java handle; the Python object lingers.
    return session.sparkContext._jsc is not None
