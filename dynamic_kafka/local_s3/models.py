"""What the local S3 tooling records and returns: the server, its endpoint and the credentials to use."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

# moto accepts any credentials; these fixed, obviously fake ones are what `status --json` tells clients to use.
LOCAL_ACCESS_KEY_ID = "local-s3-access-key"
LOCAL_SECRET_ACCESS_KEY = "local-s3-secret-key"  # noqa: S105 - a fake key the local server accepts, not a secret
LOCAL_REGION = "us-east-1"


class LocalS3Server(BaseModel):
    """The local S3 API server, as recorded in its ``server.json``.

    Example:
        >>> from dynamic_kafka.local_s3 import start_server
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
        return {
            "AWS_ACCESS_KEY_ID": LOCAL_ACCESS_KEY_ID,
            "AWS_SECRET_ACCESS_KEY": LOCAL_SECRET_ACCESS_KEY,
            "AWS_REGION": LOCAL_REGION,
            "AWS_DEFAULT_REGION": LOCAL_REGION,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ENDPOINT_URL_S3": self.endpoint,
            "AWS_ALLOW_HTTP": "true",
        }


class LocalS3Status(BaseModel):
    """The recorded local S3 server and whether its process is running now."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    server: LocalS3Server = Field(description="The recorded server.")
    running: bool = Field(description="True if the recorded server process is alive.")
