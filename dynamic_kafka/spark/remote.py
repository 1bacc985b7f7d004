"""A Spark Connect session: the run's Spark lives in a server, so the run's process starts no JVM.

Importing this module imports no pyspark. :func:`build_remote_session` connects to the project's ``spark.remote``
(``sc://host:port``), bounds the client's retries and checks that the server answers (one round trip), so a server
that is down or unreachable is a quick, retriable :class:`~dynamic_kafka.errors.SparkConnectUnavailableError`
before anything is planned as written, instead of the client's default of retrying for more than ten minutes.
:func:`dynamic_kafka.spark.session.build_spark_session` is the one entry point: it calls this module when the
settings name a remote.

What the server decides (its start, ``dynamic-kafka spark-connect up``): the master, the jars (Delta, the Kafka
connector), static settings, the redaction pattern, logging and the UI. What a client may set: session (runtime
SQL) settings, from ``spark.conf``.
"""

from __future__ import annotations

import logging
import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING, cast

from dynamic_kafka.errors import ConfigError, SparkConnectUnavailableError

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pyspark.sql import SparkSession
    from pyspark.sql.connect.session import SparkSession as ConnectSparkSession

    from dynamic_kafka.config import SparkConfig

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_SessionKey = tuple[str, tuple[tuple[str, str], ...], int, int]
_sessions: dict[_SessionKey, SparkSession] = {}
# Server-side errors that mean "this client's session is gone" (the server restarted or timed the session out):
# a new session fixes them.
_SESSION_GONE = ("INVALID_HANDLE.SESSION_NOT_FOUND", "INVALID_HANDLE.SESSION_CLOSED", "SESSION_CHANGED")


def build_remote_session(settings: SparkConfig) -> SparkSession:
    """Return this process's Spark Connect session for ``settings.remote``, connecting on first use.

    A session cached by an earlier call is checked with one round trip (milliseconds) and replaced when the server
    lost it (a restarted server, an expired session), so a long-lived process (the demo, a test session) survives
    a server restart between runs.

    Args:
        settings: the project's ``spark`` section; ``remote`` must be set.

    Returns:
        A Spark Connect session whose server answered a round trip.

    Raises:
        SparkConnectUnavailableError: the server is down or unreachable (retriable; nothing was read or written).
        ConfigError: a setting in ``conf`` cannot be set on a session (a static setting belongs to the server).

    Example:
        >>> spark = build_remote_session(SparkConfig(remote="sc://127.0.0.1:15002"))  # doctest: +SKIP
        >>> spark.range(3).count()  # doctest: +SKIP
        3
    """
    if settings.remote is None:
        raise ValueError("build_remote_session needs settings with remote set")
    key: _SessionKey = (
        settings.remote,
        tuple(sorted(settings.conf.items())),
        settings.remote_retries,
        settings.remote_max_backoff_ms,
    )
    with _lock:
        session = _sessions.pop(key, None)
        if session is not None and _still_served(session, settings):
            _sessions[key] = session
            return session
        session = _connect(settings)
        _sessions[key] = session
        return session


def _still_served(session: SparkSession, settings: SparkConfig) -> bool:
    """Whether the server still holds ``session`` (one round trip, milliseconds).

    A restarted server answers a known client with a new server-side session, and the client then closes itself
    (its next call raises ``NO_ACTIVE_SESSION``, whatever the call); an expired session is refused by name.

    Raises:
        SparkConnectUnavailableError: the server is down or unreachable.
    """
    client = cast("ConnectSparkSession", session).client
    if client.is_closed:
        return False
    try:
        with _unavailable_as_error(settings):
            # A session call: the server answers `version` even for a session it no longer holds.
            session.conf.get("spark.sql.session.timeZone")
    except SparkConnectUnavailableError:
        raise
    except Exception as e:
        if not (client.is_closed or any(marker in str(e) for marker in _SESSION_GONE)):
            raise
        logger.info("the Spark Connect server lost this client's session (%s); opening a new one", e)
        return False
    return not client.is_closed


def _connect(settings: SparkConfig) -> SparkSession:
    from pyspark.errors import PySparkException
    from pyspark.sql import SparkSession
    from pyspark.sql.connect.client.retries import DefaultPolicy

    assert settings.remote is not None
    # create(), not getOrCreate(): a process may hold sessions of several servers, and a dropped one stays dropped.
    session: SparkSession = SparkSession.builder.remote(settings.remote).create()
    # The builder is typed as the classic session's; a remote one is pyspark.sql.connect's, with a client.
    cast("ConnectSparkSession", session).client.set_retry_policies(
        [DefaultPolicy(max_retries=settings.remote_retries, max_backoff=settings.remote_max_backoff_ms)]
    )
    with _unavailable_as_error(settings):
        try:
            version = session.version  # one round trip: is the server there?
            for name, value in settings.conf.items():
                session.conf.set(name, value)
        except PySparkException as e:
            if is_unavailable(e):
                raise
            raise ConfigError(
                f"the Spark Connect session rejected a setting of spark.conf: {str(e).splitlines()[0][:300]}",
                hint="With spark.remote, spark.conf holds session settings only; set static Spark settings "
                "(memory, jars, master) on the server's start.",
            ) from e
    logger.info("connected to Spark Connect at %s (Spark %s)", settings.shown_remote, version)
    return session


@contextmanager
def _unavailable_as_error(settings: SparkConfig) -> Iterator[None]:
    try:
        yield
    except Exception as e:
        if not is_unavailable(e):
            raise
        raise SparkConnectUnavailableError(
            f"the Spark Connect server at {settings.shown_remote} did not answer ({settings.remote_retries} retries); "
            "nothing was read or written.",
            hint="Start it (`dynamic-kafka spark-connect up`) or check spark.remote, then run again.",
        ) from e


def is_unavailable(error: BaseException) -> bool:
    """Whether ``error`` (from a Spark Connect call) means the server is down or unreachable.

    True for gRPC's UNAVAILABLE and DEADLINE_EXCEEDED anywhere in the cause chain (the client raises
    ``SparkConnectGrpcException`` from grpc's error once its retries are spent); False for errors the server raised
    while running a query.
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, SparkConnectUnavailableError):
            return True
        # grpc's RpcError (typed only by a stub package the project does not install): its code() is a StatusCode.
        code = getattr(current, "code", None)
        if type(current).__module__.startswith("grpc") and callable(code) and _status_name(code()) in _DOWN:
            return True
        current = current.__cause__ or current.__context__
    return False


_DOWN = ("UNAVAILABLE", "DEADLINE_EXCEEDED")


def _status_name(status: object) -> str:
    return str(getattr(status, "name", status))


def is_remote(session: SparkSession) -> bool:
    """Whether ``session`` is a Spark Connect session (no JVM in this process)."""
    return type(session).__module__.startswith("pyspark.sql.connect")


def stop_remote_sessions() -> None:
    """Close this process's Connect sessions, releasing what they hold on the server (the server keeps running).

    A server that is gone is not waited for: its sessions are dropped.
    """
    with _lock:
        for session in _sessions.values():
            try:
                session.stop()
            except Exception as e:  # the server is gone or lost the session: nothing left to release
                logger.debug("closing a Spark Connect session failed: %s", type(e).__name__)
        _sessions.clear()
