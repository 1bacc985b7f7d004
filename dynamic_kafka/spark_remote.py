"""A Spark Connect session: the run's Spark lives in a server, so the run's process starts no JVM.

Importing this module imports no pyspark. :func:`build_remote_session` connects to ``sc://host:port``, checks that
the server answers (one round trip) and bounds the client's retries, so a server that is down or unreachable is
a quick, retriable :class:`SparkConnectUnavailableError` before anything is planned as written, instead of the
client's default of retrying for more than ten minutes.

(To move to ``dynamic_kafka/spark/session.py`` beside the in-process session.)
"""

from __future__ import annotations

import logging
import re
import threading
from typing import TYPE_CHECKING, cast

from pydantic import BaseModel, ConfigDict, Field, field_validator

from dynamic_kafka.errors import ConfigError, SparkConnectUnavailableError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.connect.session import SparkSession as ConnectSparkSession

logger = logging.getLogger(__name__)

# Everything after the first "/;" of an sc:// URL is parameters, which may hold a token: never shown.
_PARAMETERS = re.compile(r"/;.*$")
_lock = threading.Lock()
_sessions: dict[RemoteSparkSettings, SparkSession] = {}


class RemoteSparkSettings(BaseModel):
    """How to reach a Spark Connect server.

    Example:
        >>> RemoteSparkSettings(remote="sc://127.0.0.1:15002").shown_remote
        'sc://127.0.0.1:15002'
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    remote: str = Field(description="Spark Connect URL, sc://HOST:PORT (parameters after /; allowed).")
    conf: dict[str, str] = Field(
        default_factory=dict,
        description="Session (runtime SQL) settings set on the server-side session; static settings belong to "
        "the server's start.",
    )
    max_retries: int = Field(default=4, ge=0, description="Retries of a call the server did not answer.")
    max_backoff_ms: int = Field(default=2000, ge=10, description="Longest wait between two retries.")

    @field_validator("remote")
    @classmethod
    def _sc_url(cls, value: str) -> str:
        if not value.startswith("sc://"):
            raise ValueError("must be a Spark Connect URL, sc://HOST:PORT")
        return value

    @property
    def shown_remote(self) -> str:
        """The URL without its parameters (which may hold a token), for logs and errors."""
        return _PARAMETERS.sub("/;...", self.remote) if "/;" in self.remote else self.remote

    def __hash__(self) -> int:
        return hash((self.remote, tuple(sorted(self.conf.items())), self.max_retries, self.max_backoff_ms))


def build_remote_session(settings: RemoteSparkSettings) -> SparkSession:
    """Return this process's Spark Connect session for ``settings``, connecting on first use.

    Args:
        settings: the server's URL and session settings.

    Returns:
        A Spark Connect session whose server answered a round trip.

    Raises:
        SparkConnectUnavailableError: the server is down or unreachable (retriable).
        ConfigError: a setting in ``conf`` cannot be set on a session (e.g. a static setting).

    Example:
        >>> spark = build_remote_session(RemoteSparkSettings(remote="sc://127.0.0.1:15002"))  # doctest: +SKIP
        >>> spark.range(3).count()  # doctest: +SKIP
        3
    """
    with _lock:
        session = _sessions.get(settings)
        if session is not None:
            return session
        from pyspark.errors import PySparkException
        from pyspark.sql import SparkSession
        from pyspark.sql.connect.client.retries import DefaultPolicy

        created: SparkSession = SparkSession.builder.remote(settings.remote).create()
        session = created
        # The builder is typed as the classic session's; a remote one is pyspark.sql.connect's, with a client.
        connect_session = cast("ConnectSparkSession", session)
        connect_session.client.set_retry_policies(
            [DefaultPolicy(max_retries=settings.max_retries, max_backoff=settings.max_backoff_ms)]
        )
        try:
            version = session.version  # one round trip: is the server there?
            for key, value in settings.conf.items():
                session.conf.set(key, value)
        except Exception as e:
            if is_unavailable(e):
                raise SparkConnectUnavailableError(
                    f"the Spark Connect server at {settings.shown_remote} did not answer "
                    f"({settings.max_retries} retries); nothing was read or written.",
                    hint="Start it (`dynamic-kafka spark-connect up`) or check the address, then run again.",
                ) from e
            if isinstance(e, PySparkException):
                raise ConfigError(
                    f"the Spark Connect session rejected a setting of spark.conf: {str(e).splitlines()[0][:300]}",
                    hint="Set static Spark settings on the server (its start), not per session.",
                ) from e
            raise
        logger.info("connected to Spark Connect at %s (Spark %s)", settings.shown_remote, version)
        _sessions[settings] = session
        return session


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
        # grpc's RpcError (typed only by a stub package the project does not install): its code() is a StatusCode.
        code = getattr(current, "code", None)
        if type(current).__module__.startswith("grpc") and callable(code) and _status_name(code()) in _DOWN:
            return True
        current = current.__cause__ or current.__context__
    return False


_DOWN = ("UNAVAILABLE", "DEADLINE_EXCEEDED")


def _status_name(status: object) -> str:
    return str(getattr(status, "name", status))


def stop_remote_sessions() -> None:
    """Close this process's Connect sessions (the server keeps running)."""
    with _lock:
        for session in _sessions.values():
            session.stop()
        _sessions.clear()
