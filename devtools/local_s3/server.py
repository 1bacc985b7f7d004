"""Start, stop and inspect one real local S3 API server (moto's standalone server) under a base folder.

Layout under the base folder (``./.local-s3`` unless ``$DYNAMIC_KAFKA_LOCAL_S3_DIR`` or an argument says otherwise)::

    server.json       the LocalS3Server, as JSON
    credentials.json  the access key the server accepts (mode 0600; a new one at each start)
    s3.pid            the server's pid while it runs
    s3.log            the server's log (stdout and stderr: one line per request, no credentials)

The server speaks the S3 HTTP API on 127.0.0.1 (path-style addressing) and, like real S3, checks every request's
signature: at start, an IAM user allowed ``s3:*`` and an access key for it are made through the server's own IAM
API, then moto's request authentication is switched on (``POST /moto-api/reset-auth``). From then on a request
signed with an unknown key id gets ``InvalidAccessKeyId``, one signed with a wrong secret
``SignatureDoesNotMatch``, an unsigned one is refused. The server keeps every bucket and object (and that access key)
in memory: ``down`` loses them. That is a decision, not an accident: moto's only persistence is its
request recorder, which appends every request body to one file and replays it on demand, doubling every byte
written and making a restart as slow as the history is long. Tests and benchmarks want a clean store per start;
a demo that must survive a restart keeps its tables on local disk.

Invariants: ``start_server`` on a running server on the same port changes nothing (and creates any missing
bucket it is asked for); a running server is never restarted on another port silently.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import time
import urllib.request
from importlib import metadata
from typing import TYPE_CHECKING

from devtools.errors import LocalS3Error
from devtools.lifecycle import ServiceKind, is_running
from devtools.local_s3.models import (
    CREDENTIALS_FILE,
    LOCAL_REGION,
    LocalS3Credentials,
    LocalS3Server,
    LocalS3Status,
)
from dynamic_kafka._toolchain import process
from dynamic_kafka._toolchain.filelock import exclusive_lock

if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

logger = logging.getLogger(__name__)

LOCAL_S3_DIR_ENV = "DYNAMIC_KAFKA_LOCAL_S3_DIR"
DEFAULT_PORT = 9000
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
KIND = ServiceKind(
    label="local S3 server",
    dir_env=LOCAL_S3_DIR_ENV,
    default_dir=".local-s3",
    state_file="server.json",
    pid_file="s3.pid",
    error=LocalS3Error,
)
_LOG_FILE = "s3.log"
_HTTP_TIMEOUT_S = 2.0
_IAM_USER = "local-s3"
_S3_ALL = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}


def resolve_base_dir(base_dir: Path | None = None) -> Path:
    """Return the base folder: the argument, else ``$DYNAMIC_KAFKA_LOCAL_S3_DIR``, else ``./.local-s3``."""
    return KIND.resolve_base_dir(base_dir)


def start_server(
    *,
    port: int | None = None,
    base_dir: Path | None = None,
    buckets: tuple[str, ...] | list[str] = (),
    start_timeout_s: float = START_TIMEOUT_S,
) -> LocalS3Server:
    """Start the local S3 API server on ``127.0.0.1:port`` (no-op if it runs there) and create ``buckets``.

    Args:
        port: the port; None reuses the running server's port, else ``DEFAULT_PORT``.
        base_dir: folder of the server (see :func:`resolve_base_dir`).
        buckets: buckets to create if missing.
        start_timeout_s: how long the server may take to answer S3 requests.

    Returns:
        The running server.

    Raises:
        LocalS3Error: moto's server is not installed, the server already runs on another port, the port is in
            use, the server did not answer in time (the message holds the end of its log), or a bucket could not
            be created.

    Example:
        >>> server = start_server(port=19000, buckets=["lake"])  # doctest: +SKIP
        >>> server.environment()["AWS_ENDPOINT_URL"]  # doctest: +SKIP
        'http://127.0.0.1:19000'
    """
    base = resolve_base_dir(base_dir)
    base.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(base / ".lock"):
        current = _load(base)
        if current is not None and _is_running(current):
            if port is not None and port != current.port:
                raise LocalS3Error(
                    f"the local S3 server under {base} already runs on port {current.port}, not {port}.",
                    hint="Stop it first (`python -m devtools local-s3 down`) or use its port.",
                )
            logger.info("local S3 server already runs at %s", current.endpoint)
            server = current
        else:
            server = _launch(base, port if port is not None else DEFAULT_PORT, start_timeout_s)
    for bucket in buckets:
        create_bucket(server, bucket)
    return server


def stop_server(
    *, base_dir: Path | None = None, purge: bool = False, stop_timeout_s: float = STOP_TIMEOUT_S
) -> LocalS3Server | None:
    """Stop the local S3 server (SIGTERM, then SIGKILL); its buckets and objects are gone with it.

    Args:
        base_dir: folder of the server (see :func:`resolve_base_dir`).
        purge: also delete the server's folder (record and log).
        stop_timeout_s: how long the server may take to exit before it is killed.

    Returns:
        The recorded server, or None if there was none under the base folder.
    """
    base = resolve_base_dir(base_dir)
    if not base.is_dir():
        return None
    with exclusive_lock(base / ".lock"):
        server = _load(base)
        KIND.stop(base, server.pid if server else None, _marker(base), timeout_s=stop_timeout_s)
    if purge:
        shutil.rmtree(base, ignore_errors=True)
    return server


def server_status(base_dir: Path | None = None) -> LocalS3Status | None:
    """Return the recorded server and whether it runs, or None if none was ever started under the base folder."""
    server = _load(resolve_base_dir(base_dir))
    return None if server is None else LocalS3Status(server=server, running=_is_running(server))


def create_bucket(server: LocalS3Server, bucket: str) -> None:
    """Create ``bucket`` on the local server unless it exists (signed with the server's access key).

    Raises:
        LocalS3Error: the server refused (an invalid bucket name, for one) or did not answer.
    """
    from botocore.exceptions import BotoCoreError, ClientError

    s3 = _client(server, "s3", server.credentials())
    try:
        s3.head_bucket(Bucket=bucket)
        return
    except ClientError as e:
        if e.response.get("Error", {}).get("Code") not in ("404", "NoSuchBucket"):
            raise LocalS3Error(f"local S3 server at {server.endpoint}: HEAD bucket {bucket!r} failed: {e}.") from e
    except BotoCoreError as e:
        raise LocalS3Error(f"local S3 server at {server.endpoint} did not answer: {e}.") from e
    try:
        s3.create_bucket(Bucket=bucket)
    except (ClientError, BotoCoreError) as e:
        raise LocalS3Error(f"local S3 server could not create bucket {bucket!r}: {e}") from e
    logger.info("local S3 server: bucket %s created", bucket)


def _enforce_credentials(server: LocalS3Server) -> None:
    """Make the server check credentials as real S3 does, and keep the one access key it accepts.

    moto checks nothing until told to: its IAM API is open, so the user, its ``s3:*`` policy and its access key
    are made unsigned (the bootstrap key below is never checked); then ``reset-auth`` with 0 turns moto's request
    authentication on for every later request. The new key goes to a 0600 file, never to a log or a command line.
    """
    from botocore.exceptions import BotoCoreError, ClientError

    bootstrap = LocalS3Credentials(access_key_id="bootstrap", secret_access_key="bootstrap")  # noqa: S106 - unchecked
    iam = _client(server, "iam", bootstrap)
    try:
        iam.create_user(UserName=_IAM_USER)
        iam.put_user_policy(UserName=_IAM_USER, PolicyName="s3-all", PolicyDocument=json.dumps(_S3_ALL))
        key = iam.create_access_key(UserName=_IAM_USER)["AccessKey"]
    except (ClientError, BotoCoreError) as e:
        raise LocalS3Error(f"local S3 server at {server.endpoint}: could not make its access key: {e}.") from e
    path = server.server_dir / CREDENTIALS_FILE
    path.unlink(missing_ok=True)
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8") as out:
        json.dump({"access_key_id": key["AccessKeyId"], "secret_access_key": key["SecretAccessKey"]}, out)
    # Not form-encoded (urllib's default), or the server parses the body as a form and reads no count.
    url = f"{server.endpoint}/moto-api/reset-auth"
    request = urllib.request.Request(url, data=b"0", headers={"Content-Type": "text/plain"}, method="POST")  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=_HTTP_TIMEOUT_S):  # noqa: S310 - loopback
            pass
    except OSError as e:
        raise LocalS3Error(f"local S3 server at {server.endpoint}: could not switch authentication on: {e}.") from e


def _client(server: LocalS3Server, service: str, credentials: LocalS3Credentials) -> Any:
    import boto3

    return boto3.client(
        service,
        endpoint_url=server.endpoint,
        region_name=LOCAL_REGION,
        aws_access_key_id=credentials.access_key_id,
        aws_secret_access_key=credentials.secret_access_key.get_secret_value(),
    )


def _launch(base: Path, port: int, start_timeout_s: float) -> LocalS3Server:
    try:
        moto_version = metadata.version("moto")
        import moto.server  # noqa: F401 - fails without the [server] extra's Flask and werkzeug
    except (metadata.PackageNotFoundError, ImportError) as e:
        raise LocalS3Error(
            "the local S3 server needs moto's standalone server, which is not installed.",
            hint="Install the repository's dev dependency group (`uv sync`, which `make setup` runs) or "
            "`pip install 'moto[server]'`.",
        ) from e
    if not process.port_is_free(port):
        raise LocalS3Error(
            f"port {port} is already in use on 127.0.0.1 by another process.",
            hint="Pick another port (`python -m devtools local-s3 up --port P`) or stop what holds it (`ss -ltnp`).",
        )
    log_file = base / _LOG_FILE
    argv = [sys.executable, "-m", "devtools.local_s3._serve", "--dir", _marker(base), "--port", str(port)]
    # Credentials in the environment would only show up in the server's log lines: never pass them on.
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    pid = KIND.spawn(argv, folder=base, log_file=log_file, env=env)
    server = LocalS3Server(port=port, pid=pid, server_dir=base, log_file=log_file, moto_version=moto_version)
    KIND.save(base, server)
    try:
        _wait_until_serving(server, time.monotonic() + start_timeout_s)
        _enforce_credentials(server)
    except BaseException:
        KIND.stop(base, pid, _marker(base), timeout_s=STOP_TIMEOUT_S)
        raise
    logger.info("local S3 server: pid %d serving at %s (moto %s)", pid, server.endpoint, moto_version)
    return server


def _wait_until_serving(server: LocalS3Server, deadline: float) -> None:
    def probe() -> str | None:
        if not process.accepts_connections(server.port):
            return "the port never accepted a connection"
        try:
            with urllib.request.urlopen(f"{server.endpoint}/", timeout=_HTTP_TIMEOUT_S) as response:  # noqa: S310
                body = response.read()
        except OSError as e:
            return str(e)
        return None if b"ListAllMyBucketsResult" in body else f"GET / did not list buckets: {body[:200]!r}"

    assert server.pid is not None  # a server just launched has its pid
    KIND.wait_until_ready(
        server.pid,
        _marker(server.server_dir),
        probe,
        deadline=deadline,
        not_ready=lambda why: _not_serving(server, why),
    )


def _not_serving(server: LocalS3Server, reason: str) -> LocalS3Error:
    return LocalS3Error(
        f"the local S3 server at {server.endpoint} did not come up: {reason}. "
        f"Last lines of {server.log_file}:\n{process.tail(server.log_file, 30)}"
    )


def _is_running(server: LocalS3Server) -> bool:
    return is_running(server.pid, _marker(server.server_dir))


def _marker(base: Path) -> str:
    return str(base)


def _load(base: Path) -> LocalS3Server | None:
    return KIND.load(base, LocalS3Server)
