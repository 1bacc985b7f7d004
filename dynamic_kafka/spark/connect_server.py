"""How a Spark Connect server on this machine is launched from the installed pyspark: its command line, its
environment and its logging, shared by the product's managed local server (:mod:`dynamic_kafka.spark.local_server`)
and the development server of this repository's test tooling (docs/development.md).

The server is pyspark's own ``spark-submit --class org.apache.spark.sql.connect.service.SparkConnectServer``, so
its Spark is exactly the client's (same version, same jars), with the jars and settings of the in-process session
(:class:`dynamic_kafka.spark.session.SessionLaunch`), so neither mode downloads them twice. Importing this module
imports no pyspark.

Nothing secret is on the command line (every user of the machine can read it): the pre-shared token reaches the
server through its environment (:data:`~dynamic_kafka.spark.connect_token.TOKEN_ENV`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from dynamic_kafka.spark.connect_token import TOKEN_ENV, is_loopback

if TYPE_CHECKING:
    from collections.abc import Mapping

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
LOG4J_FILE = "log4j2.properties"
"""The server's logging config in its folder; its path in the command line also tells the server from a process
that reused its pid."""

SERVER_CONF = {
    "spark.connect.grpc.binding.address": "127.0.0.1",
    # A session idle this long is closed by the server: a pipeline's runs keep theirs (spark.session_per_pipeline)
    # while a schedule starts one within this time; other runs are short, fresh processes.
    "spark.connect.session.manager.defaultSessionTimeout": "15min",
    "spark.sql.connect.ui.retainedSessions": "50",
    "spark.sql.connect.ui.retainedStatements": "50",
    "spark.ui.retainedJobs": "100",
    "spark.ui.retainedStages": "100",
    "spark.sql.ui.retainedExecutions": "50",
    "spark.eventLog.enabled": "false",
    # Every read has a group id of its own (Spark's default), so a pooled consumer or a cached fetch is never used
    # again; with Spark's 5-minute default a server running back-to-back runs held ~0.25 MB more per run (heap
    # histogram: ConsumerRecords of FetchedDataPool entries) and dozens of idle broker connections.
    "spark.kafka.consumer.cache.timeout": "30s",
    "spark.kafka.consumer.cache.evictorThreadRunInterval": "15s",
    "spark.kafka.consumer.fetchedData.cache.timeout": "30s",
    "spark.kafka.consumer.fetchedData.cache.evictorThreadRunInterval": "15s",
}
"""dynamic-kafka's settings of a long-lived local server (Spark Connect's own defaults suit one user; these keep
its memory flat); settings given to :func:`server_argv` win over them."""

# Scheduled runs leave the server idle most of the time: a collection after a minute without one, and a heap
# that shrinks to 30% free at each full cycle, hand the memory of the last burst back to the machine. User
# options come after these, so theirs win.
_SERVER_JVM_OPTIONS = "-XX:G1PeriodicGCInterval=60000 -XX:MinHeapFreeRatio=10 -XX:MaxHeapFreeRatio=30"
# glibc gives each thread that allocates its own malloc arena; the JVM's hundreds of pooled threads made the
# resident size grow with arenas that are never returned.
_SERVER_MALLOC_ARENAS = "2"


def server_argv(
    folder: Path,
    launch_conf: Mapping[str, str],
    *,
    port: int,
    master: str,
    driver_memory: str,
    conf: Mapping[str, str],
) -> list[str]:
    """The server's command line (argv), which holds no secret: ``ps`` shows it.

    Args:
        folder: the server's folder (its logging config is there).
        launch_conf: the in-process session's settings (:class:`~dynamic_kafka.spark.session.SessionLaunch`'s
            ``conf``: jars resolved, Delta's extension and catalog, redaction).
        port: the gRPC port on 127.0.0.1.
        master: the Spark master the server's jobs run on.
        driver_memory: the server JVM's heap.
        conf: settings that win over :data:`SERVER_CONF` (the user's).
    """
    import pyspark

    settings = dict(launch_conf)
    settings.pop("spark.driver.memory", None)
    # Python UDFs run in worker processes of the server; they need this interpreter's pyspark.
    settings.update({**SERVER_CONF, "spark.pyspark.python": sys.executable, **conf})
    settings["spark.connect.grpc.binding.port"] = str(port)
    settings["spark.driver.extraJavaOptions"] = (
        f"-Dlog4j2.configurationFile=file:{folder / LOG4J_FILE} {_SERVER_JVM_OPTIONS} "
        f"{settings.get('spark.driver.extraJavaOptions', '')}"
    ).strip()
    spark_submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    argv = [str(spark_submit), "--class", SERVER_CLASS, "--name", "dynamic-kafka-spark-connect"]
    argv += ["--master", master, "--driver-memory", driver_memory]
    for key, value in sorted(settings.items()):
        argv += ["--conf", f"{key}={value}"]
    # spark-submit needs a primary resource; Spark's own start-connect-server.sh passes the internal marker.
    argv.append("spark-internal")
    return argv


def server_env(folder: Path, *, java: Path, token: str, master: str) -> dict[str, str]:
    """The server's environment: this process's, with its Java, its log folder and its ``token``, without the
    variables of a calling pyspark process (they must not leak into the server's launcher).
    """
    env = {
        "MALLOC_ARENA_MAX": _SERVER_MALLOC_ARENAS,
        **os.environ,
        "JAVA_HOME": str(java.resolve().parent.parent),
        "SPARK_LOG_DIR": str(folder),
    }
    for key in ("SPARK_HOME", "PYSPARK_SUBMIT_ARGS", "SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE"):
        env.pop(key, None)
    # The token reaches the server through its environment: a command line is readable by every user.
    env[TOKEN_ENV] = token
    # A UDF's Python worker (Protobuf decoding) is started as $PYSPARK_PYTHON, else `python3` on PATH: the server
    # reads the variable, not `spark.pyspark.python`, and a starting process that never built an in-process
    # session has none to pass on.
    env["PYSPARK_PYTHON"] = sys.executable
    if master_on_loopback(master):
        # Every executor runs on this host (in the driver's JVM, or on a loopback cluster's workers): bind every
        # Spark port (driver, block manager, UI) to loopback only. Otherwise, on a host whose name resolves to
        # loopback, Spark binds the driver to the first network interface and executors call it back there.
        env["SPARK_LOCAL_IP"] = "127.0.0.1"
    return env


def write_logging_config(folder: Path) -> None:
    """Writes the server's logging config (:data:`LOG4J_FILE`) into ``folder``."""
    (folder / LOG4J_FILE).write_text(_LOG4J2)


def master_on_loopback(master: str) -> bool:
    """Return True if every executor of ``master`` runs on this host: a local master, or a standalone master
    (``spark://HOST:PORT``, or ``spark://H1:P1,H2:P2`` with standby masters) whose every host is a loopback
    address or ``localhost``, whose workers can only be on this host too.

    Example:
        >>> master_on_loopback("spark://127.0.0.1:7077"), master_on_loopback("spark://spark-master:7077")
        (True, False)
    """
    if master.startswith("local"):
        return True
    if not master.startswith("spark://"):
        return False
    hosts = [address.rpartition(":")[0].strip("[]") for address in master.removeprefix("spark://").split(",")]
    return all(is_loopback(host) for host in hosts)


# WARN everywhere (Kafka's client config dumps and Connect's per-request traces are INFO/DEBUG), plus the two
# INFO lines that say the server is up and where.
_LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.stdout.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
logger.connect.name = org.apache.spark.sql.connect.service.SparkConnectServer
logger.connect.level = info
logger.kafka.name = org.apache.kafka
logger.kafka.level = warn
logger.grpc.name = org.sparkproject.connect.grpc
logger.grpc.level = warn
"""
