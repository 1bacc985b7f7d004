"""A Spark Connect session: the run's Spark lives in a server, so the run's process starts no JVM.

Importing this module imports no pyspark. :func:`build_remote_session` connects to the project's ``spark.remote``
(``sc://host:port``), bounds the client's retries and checks that the server answers (one round trip), so a server
that is down or unreachable is a quick, retriable :class:`~dynamic_kafka.errors.SparkConnectUnavailableError`
before anything is planned as written, instead of the client's default of retrying for more than ten minutes.
:func:`dynamic_kafka.spark.session.build_spark_session` is the one entry point: it calls this module when the
settings name a remote.

Authentication: a server may require a pre-shared token (Spark Connect's ``spark.connect.authenticate.token``, or
``$SPARK_CONNECT_AUTHENTICATE_TOKEN`` in the environment of Spark's ``start-connect-server.sh``). The client sends
it as a bearer token: the ``spark.token`` setting (a secret reference), else a ``token`` parameter of the URL or
``$SPARK_CONNECT_AUTHENTICATE_TOKEN`` (pyspark's own sources); nothing else. To a loopback server the token travels
over gRPC's local credentials (no TLS needed on one machine); to another host, as pyspark does, over TLS. A refused
token is a :class:`~dynamic_kafka.errors.SparkConnectAuthenticationError` naming the fix, never a gRPC trace, and
no token is ever in a log line, an error or a URL shown.

What the server decides (its start, Spark's ``sbin/start-connect-server.sh``; docs/deployment.md): the master, the
jars (Delta, the Kafka connector), static settings, the redaction pattern, logging and the UI. What a client may set:
session (runtime SQL) settings, from ``spark.conf``.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import threading
import uuid
import warnings
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlparse

from dynamic_kafka.errors import ConfigError, SparkConnectAuthenticationError, SparkConnectUnavailableError
from dynamic_kafka.secrets import SPARK_OPTIONS_REDACTION_REGEX, SPARK_STRING_REDACTION_REGEX, resolve_value
from dynamic_kafka.spark.connect_token import TOKEN_ENV, is_loopback

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from pyspark.sql import SparkSession
    from pyspark.sql.connect.session import SparkSession as ConnectSparkSession

    from dynamic_kafka.config.models import SparkConfig

logger = logging.getLogger(__name__)

SESSION_REDACTION = {
    "spark.sql.redaction.options.regex": SPARK_OPTIONS_REDACTION_REGEX,
    "spark.sql.redaction.string.regex": SPARK_STRING_REDACTION_REGEX,
}
"""Runtime settings every Connect session sets first (``spark.conf`` may override them): a server not started by
that does not set them at its start then masks the Kafka reader's secret options in the plans it shows too."""

START_SERVER = (
    "Spark's `sbin/start-connect-server.sh`, or with pip's pyspark `spark-submit --class "
    "org.apache.spark.sql.connect.service.SparkConnectServer ... spark-internal`, each with Delta and the Kafka "
    'connector: docs/deployment.md, "Spark Connect"'
)
"""How a user starts a Spark Connect server: pip's pyspark has ``spark-submit`` but no ``sbin/`` scripts."""

START_SERVER_HINT = f"Start the server ({START_SERVER}) or check spark.remote, then run again."
"""What to do when no Spark Connect server answers at ``spark.remote``."""

_lock = threading.Lock()
_SessionKey = tuple[str, str | None, tuple[tuple[str, str], ...], int, int, str | None]
_sessions: dict[_SessionKey, SparkSession] = {}
# Server-side errors that mean "this client's session is gone" (the server restarted or timed the session out):
# a new session fixes them.
_SESSION_GONE = ("INVALID_HANDLE.SESSION_NOT_FOUND", "INVALID_HANDLE.SESSION_CLOSED", "SESSION_CHANGED")
SHARED_GENERATIONS = 16
"""How many generations of a shared session a process tries (one round trip each, milliseconds) before it uses a
session of its own: a pipeline whose session the server closed that often runs less often than the server's idle
timeout, so sharing would not keep compiled classes for it anyway."""


class _SessionClosedError(Exception):
    """The server refused the session id as closed or lost while it was being opened."""


def build_remote_session(settings: SparkConfig, *, shared_as: str | None = None) -> SparkSession:
    """Return this process's Spark Connect session for ``settings.remote``, connecting on first use.

    A session cached by an earlier call is checked with one round trip (milliseconds) and replaced when the server
    lost it (a restarted server, an expired session), so a long-lived process (the demo, a test session) survives
    a server restart between runs.

    With ``shared_as`` (and ``settings.session_per_pipeline``), the server session is named after it, the server,
    the token's presence and ``settings.conf``: every process giving the same name attaches to the same session,
    and none releases it on closing, so the classes Spark generated and compiled for one process's queries serve
    the next (the server keeps a session until it has been idle for its
    ``spark.connect.session.manager.defaultSessionTimeout``). Changed ``conf`` names another session, so a
    setting removed from the project never lingers in one.

    Args:
        settings: the project's ``spark`` section; ``remote`` must be set.
        shared_as: the name of a session shared across processes (a pipeline's runs: see
            :meth:`dynamic_kafka.protocol.context.PipelineContext.shared_spark_session`); None: this process's own.

    Returns:
        A Spark Connect session whose server answered a round trip.

    Raises:
        SparkConnectUnavailableError: the server is down or unreachable (retriable; nothing was read or written).
        SparkConnectAuthenticationError: the server refused the client's token, or that no token was sent.
        ConfigError: a setting in ``conf`` cannot be set on a session (a static setting belongs to the server), or
            ``token`` references a variable or file that is not there.

    Example:
        >>> spark = build_remote_session(SparkConfig(remote="sc://127.0.0.1:15002"))  # doctest: +SKIP
        >>> spark.range(3).count()  # doctest: +SKIP
        3
    """
    if settings.remote is None:
        raise ValueError("build_remote_session needs settings with remote set")
    # pyspark warns once its retries are spent, then raises; the product turns that error into its own (what
    # happened, what to do), so the warning would only print the same fact again, with pyspark's source line.
    warnings.filterwarnings("ignore", message=r"\[RETRIES_EXCEEDED\]", category=UserWarning)
    shared = shared_as if settings.session_per_pipeline else None
    key: _SessionKey = (
        settings.remote,
        settings.token,
        tuple(sorted(settings.conf.items())),
        settings.remote_retries,
        settings.remote_max_backoff_ms,
        shared,
    )
    with _lock:
        session = _sessions.pop(key, None)
        if session is None or not _still_served(session, settings):
            session = _connect(settings) if shared is None else _attach_shared(settings, shared)
        _sessions[key] = session
    _make_active(session)
    return session


def _attach_shared(settings: SparkConfig, shared_as: str) -> SparkSession:
    """The first generation of the shared session ``shared_as`` the server has not closed; after
    ``SHARED_GENERATIONS`` closed ones, a session of this process's own (a warning says why).

    The server keeps the id of a session it closed (idle past its timeout) for its lifetime and refuses it, so a
    closed generation is passed over for the next one: every process walks the same names in the same order and
    meets the others on the first one still open.
    """
    token = client_token(settings)
    for generation in range(SHARED_GENERATIONS):
        try:
            return _connect(settings, shared_session_id(settings, shared_as, token=token, generation=generation))
        except _SessionClosedError:
            continue
    logger.warning(
        "the Spark Connect server at %s closed the first %d generations of this pipeline's shared session (each was "
        "left idle past the server's spark.connect.session.manager.defaultSessionTimeout); this run uses a session "
        "of its own. Run the pipeline more often than that timeout, raise it on the server, or set "
        "spark.session_per_pipeline: false; the server forgets closed sessions when it restarts.",
        settings.shown_remote,
        SHARED_GENERATIONS,
    )
    return _connect(settings)


def _make_active(session: SparkSession) -> None:
    """Makes ``session`` the calling thread's active Connect session.

    pyspark reads some settings from the thread's active session rather than from the frame's: a ``datetime``
    literal's type, for one, as in a backfill's window. pyspark makes only the first session created active. A
    process that holds a pipeline's shared session beside its own, or that replaced a session the server lost,
    would otherwise read them from a session that may be closed.
    """
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    ConnectSession._active_session.session = session


def shared_session_id(
    settings: SparkConfig, shared_as: str | None, *, token: str | None, generation: int = 0
) -> str | None:
    """The server session id of generation ``generation`` of the shared session ``shared_as`` (a UUID, as Spark
    Connect requires), or None.

    The id is an HMAC keyed with the server's ``token``: the project's config alone does not name it, so reading
    the config is not enough to attach to a pipeline's session (the token is; see the module's notes).

    Example:
        >>> from dynamic_kafka.config.models import SparkConfig
        >>> a = shared_session_id(SparkConfig(remote="sc://h:15002"), "orders", token="t")
        >>> a == shared_session_id(SparkConfig(remote="sc://h:15002"), "orders", token="t") != shared_session_id(
        ...     SparkConfig(remote="sc://h:15002"), "orders", token="t", generation=1
        ... )
        True
    """
    if shared_as is None or settings.remote is None or "session_id=" in settings.remote:  # the URL names its own
        return None
    naming = [shared_as, settings.shown_remote, sorted(settings.conf.items()), generation]
    digest = hmac.new((token or "").encode(), repr(naming).encode(), hashlib.sha256).digest()
    return str(uuid.UUID(bytes=digest[:16], version=5))


def _still_served(session: SparkSession, settings: SparkConfig) -> bool:
    """Whether the server still holds ``session`` (a round trip per setting it states again, milliseconds).

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
            # Session calls (the server answers `version` even for a session it no longer holds), which also state
            # the session's settings again: another client may have attached to a shared session and changed them.
            _state_settings(session, settings)
    except SparkConnectUnavailableError:
        raise
    except Exception as e:
        if not (client.is_closed or any(marker in str(e) for marker in _SESSION_GONE)):
            raise
        logger.info("the Spark Connect server lost this client's session (%s); opening a new one", e)
        return False
    return not client.is_closed


def _connect(settings: SparkConfig, session_id: str | None = None) -> SparkSession:
    from pyspark.errors import PySparkException
    from pyspark.sql import SparkSession
    from pyspark.sql.connect.client.retries import DefaultPolicy

    assert settings.remote is not None
    never_close_inside_the_release_pool()
    token = client_token(settings)
    remote = settings.remote
    if session_id is not None:
        remote += (";" if "/;" in remote else "/;") + f"session_id={session_id}"
    # create(), not getOrCreate(): a process may hold sessions of several servers, and a dropped one stays dropped.
    if token is None:
        session: SparkSession = SparkSession.builder.remote(remote).create()
    else:
        session = _authenticated_session(remote, token)
    if session_id is not None:
        # Closing the client must leave the session to the next process (a released id is refused for good).
        cast("ConnectSparkSession", session).release_session_on_close = False
    # The builder is typed as the classic session's; a remote one is pyspark.sql.connect's, with a client.
    cast("ConnectSparkSession", session).client.set_retry_policies(
        [DefaultPolicy(max_retries=settings.remote_retries, max_backoff=settings.remote_max_backoff_ms)]
    )
    with _unavailable_as_error(settings):
        try:
            # One round trip: is the server there, and does it still hold this id? The settings request alone
            # did not refuse the id of a shared session the server had closed: the run failed at its first analysis.
            version = session.version
            _state_settings(session, settings)
        except PySparkException as e:
            if is_unavailable(e):
                raise
            if any(marker in str(e) for marker in _SESSION_GONE):
                _drop(session)
                if session_id is None:
                    raise SparkConnectUnavailableError(
                        f"the Spark Connect server at {settings.shown_remote} lost a new session as it was opened "
                        "(it restarted?); nothing was read or written.",
                        hint="Run again.",
                    ) from e
                raise _SessionClosedError(session_id) from e
            raise ConfigError(
                f"the Spark Connect session rejected a setting of spark.conf: {str(e).splitlines()[0][:300]}",
                hint="With spark.remote, spark.conf holds session settings only; set static Spark settings "
                "(memory, jars, master) on the server's start.",
            ) from e
    logger.info(
        "connected to Spark Connect at %s (Spark %s)%s",
        settings.shown_remote,
        version,
        "" if session_id is None else f", shared session {session_id}",
    )
    return session


def _state_settings(session: SparkSession, settings: SparkConfig) -> None:
    """States the session's settings in one round trip."""
    ConnectConf(session).set({**SESSION_REDACTION, **settings.conf})


class ConnectConf:
    """A Spark Connect session's settings, each step one config request for all of them (the server makes the
    pairs of a request in order, as one by one).
    """

    def __init__(self, spark: SparkSession) -> None:
        self.client = cast("ConnectSparkSession", spark).client

    def get(self, names: list[str]) -> dict[str, str | None]:
        """The values of ``names`` (None: not set)."""
        from pyspark.sql.connect import proto

        pairs = [proto.KeyValue(key=name) for name in names]
        request = proto.ConfigRequest.GetWithDefault(pairs=pairs)
        return dict(self.client.config(proto.ConfigRequest.Operation(get_with_default=request)).pairs)

    def set(self, settings: Mapping[str, str]) -> None:
        """Sets ``settings``, in order (nothing to set: no request)."""
        from pyspark.sql.connect import proto

        if settings:
            pairs = [proto.KeyValue(key=name, value=value) for name, value in settings.items()]
            self._send(proto.ConfigRequest.Operation(set=proto.ConfigRequest.Set(pairs=pairs)))

    def unset(self, names: list[str]) -> None:
        """Unsets ``names`` (none: no request)."""
        from pyspark.sql.connect import proto

        if names:
            self._send(proto.ConfigRequest.Operation(unset=proto.ConfigRequest.Unset(keys=names)))

    def _send(self, operation: Any) -> None:
        for warning in self.client.config(operation).warnings:  # as the session's own conf.set does
            warnings.warn(warning, stacklevel=3)


def client_token(settings: SparkConfig) -> str | None:
    """The token to send to ``settings.remote``: ``settings.token`` resolved, else the URL's ``token`` parameter,
    else ``$SPARK_CONNECT_AUTHENTICATE_TOKEN``; None: none.

    Raises:
        ConfigError: ``settings.token`` references an unset variable or an unreadable file.
    """
    assert settings.remote is not None
    if settings.token is not None:
        return resolve_value(settings.token, key="spark.token", cluster_id=str(settings.shown_remote)) or None
    url = urlparse(settings.remote)
    for parameter in url.path.split(";")[1:]:
        name, _, value = parameter.partition("=")
        if name == "token" and value:
            return value
    return os.environ.get(TOKEN_ENV) or None


def _authenticated_session(remote: str, token: str) -> SparkSession:
    """A Connect session sending ``token`` as its bearer token; to a loopback server over gRPC's local
    credentials (pyspark uses them only for the name ``localhost``, and TLS for ``127.0.0.1``, which a local
    server does not speak).
    """
    import grpc
    from pyspark.sql.connect.client import DefaultChannelBuilder
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    class TokenChannel(DefaultChannelBuilder):
        @property
        def token(self) -> str:
            return token

        def toChannel(self) -> grpc.Channel:  # noqa: N802 (pyspark's name)
            if self.use_ssl or not is_loopback(self.host):
                return super().toChannel()
            credentials = grpc.composite_channel_credentials(
                grpc.local_channel_credentials(), grpc.access_token_call_credentials(token)
            )
            return self._secure_channel(self.endpoint, credentials)

    # What pyspark's builder.remote(...).create() does before creating a session: mark the process as a Connect
    # client, so pyspark's functions dispatch to Connect.
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
    return cast("SparkSession", ConnectSession.builder.channelBuilder(TokenChannel(remote)).create())


@contextmanager
def _unavailable_as_error(settings: SparkConfig) -> Iterator[None]:
    try:
        yield
    except Exception as e:
        if is_unauthenticated(e):
            why = "its token was not accepted" if client_token(settings) else "it requires a token and none was found"
            raise SparkConnectAuthenticationError(
                f"the Spark Connect server at {settings.shown_remote} refused this client: {why}; nothing was "
                "read or written.",
                hint="Set spark.token to a ${file:PATH} or ${env:NAME} reference to the server's token (the "
                "SPARK_CONNECT_AUTHENTICATE_TOKEN its start-connect-server.sh was given), or export "
                "SPARK_CONNECT_AUTHENTICATE_TOKEN; see docs/spark-connect-auth.md.",
            ) from e
        if not is_unavailable(e):
            raise
        raise SparkConnectUnavailableError(
            f"the Spark Connect server at {settings.shown_remote} did not answer ({settings.remote_retries} retries); "
            "nothing was read or written.",
            hint=START_SERVER_HINT,
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


def is_unauthenticated(error: BaseException) -> bool:
    """Whether ``error`` (from a Spark Connect call) is the server refusing the client's token (gRPC's
    UNAUTHENTICATED anywhere in the cause chain).
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        code = getattr(current, "code", None)
        if type(current).__module__.startswith("grpc") and callable(code) and _status_name(code()) == "UNAUTHENTICATED":
            return True
        current = current.__cause__ or current.__context__
    return False


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
            _drop(session)
        _sessions.clear()


def _drop(session: SparkSession) -> None:
    """Closes ``session``'s client (releasing its server session unless it is shared); never raises."""
    try:
        session.stop()
    except Exception as e:  # the server is gone or lost the session: nothing left to release
        logger.debug("closing a Spark Connect session failed: %s", type(e).__name__)


_POOL_GUARD = "_dynamic_kafka_skips_closing_inside_the_release_pool"


def never_close_inside_the_release_pool() -> None:
    """Makes a Spark Connect session collected on a thread of pyspark's release pool skip closing its client.

    pyspark's Connect session closes its client when it is garbage-collected (``__del__``), and closing a client
    shuts down the one pool of ``ReleaseExecute`` threads every Connect client of the process shares, joining its
    threads. Collected on one of those threads (any allocation there may trigger it), the thread joins its own
    pool and the process hangs: a long-lived process (a Dagster code server, the test suite) stops for good. Such a
    collection now leaves the client to the process's end, and the pool keeps serving the other clients. Idempotent.
    """
    from pyspark.sql.connect.client.reattach import ExecutePlanResponseReattachableIterator as Releases
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    with _POOL_GUARD_LOCK:
        collect = ConnectSession.__del__
        if getattr(collect, _POOL_GUARD, False):
            return

        def collected(session: ConnectSession) -> None:
            pool = Releases._release_thread_pool_instance
            if pool is not None and threading.current_thread() in getattr(pool, "_threads", ()):
                return
            collect(session)

        setattr(collected, _POOL_GUARD, True)
        setattr(ConnectSession, "__del__", collected)  # noqa: B010 - a method replaced on pyspark's class


_POOL_GUARD_LOCK = threading.Lock()
