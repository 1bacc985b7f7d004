"""What the local S3 tooling records and returns: the server, its endpoint and the credentials to use."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from devtools.errors import LocalS3Error

LOCAL_REGION = "us-east-1"
# The server's access key, written by `up` (mode 0600) and read by `status`; never in server.json or a log.
CREDENTIALS_FILE = "credentials.json"


class LocalS3Credentials(BaseModel):
    """The access key the local server accepts: an IAM user's, made at ``up``, allowed ``s3:*``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    access_key_id: str = Field(description="The IAM user's access key id.")
    secret_access_key: SecretStr = Field(description="Its secret access key.")


class LocalS3Server(BaseModel):
    """The local S3 API server, as recorded in its ``server.json``.

    Example:
        >>> from devtools.local_s3 import start_server
        >>> start_server(port=19000).endpoint  # doctest: +SKIP
        'http://127.0.0.1:19000'
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    port: int = Field(description="Port of the S3 API on 127.0.0.1.")
    pid: int | None = Field(default=None, description="Server process id at the last start.")
    server_dir: Path = Field(description="The server's folder (record, pid, log).")
    log_file: Path = Field(description="The server's log file.")
    moto_version: str = Field(description="Version of moto that serves the S3 API.")

    @property
    def endpoint(self) -> str:
        """The endpoint URL clients pass (path-style addressing: http://127.0.0.1:PORT/BUCKET/KEY)."""
        return f"http://127.0.0.1:{self.port}"

    def environment(self) -> dict[str, str]:
        """The environment variables that point AWS tools, delta-rs and dynamic-kafka at this server.

        ``AWS_ENDPOINT_URL`` is read by boto3 and the AWS CLI, ``AWS_ENDPOINT_URL_S3`` by AWS SDKs that take
        per-service endpoints, and ``AWS_ALLOW_HTTP`` lets delta-rs (object_store) talk plain HTTP.
        """
        credentials = self.credentials()
        return {
            "AWS_ACCESS_KEY_ID": credentials.access_key_id,
            "AWS_SECRET_ACCESS_KEY": credentials.secret_access_key.get_secret_value(),
            "AWS_REGION": LOCAL_REGION,
            "AWS_DEFAULT_REGION": LOCAL_REGION,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ENDPOINT_URL_S3": self.endpoint,
            "AWS_ALLOW_HTTP": "true",
        }

    def credentials(self) -> LocalS3Credentials:
        """The access key the server accepts (every request must be signed with it).

        Raises:
            LocalS3Error: the credentials file is missing or unreadable (the server was started by an older
                version, or its folder was tampered with).
        """
        path = self.server_dir / CREDENTIALS_FILE
        try:
            return LocalS3Credentials.model_validate_json(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise LocalS3Error(
                f"the local S3 server's credentials file {path} cannot be read ({type(e).__name__}).",
                hint="Restart the server (`python -m devtools local-s3 down` then `up`): `up` makes a new access key.",
            ) from e


class LocalS3Status(BaseModel):
    """The recorded local S3 server and whether its process is running now."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    server: LocalS3Server = Field(description="The recorded server.")
    running: bool = Field(description="True if the recorded server process is alive.")
