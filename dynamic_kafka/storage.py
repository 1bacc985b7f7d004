"""Where tables live (local paths or object-store URIs) and how Spark and delta-rs reach them, from one place.

A table location is a local path, a ``file://`` URI or an object-store URI (``s3://`` and ``s3a://`` name the same
S3 object; other schemes such as ``gs://`` or ``abfss://`` are passed through unchanged to both engines). Spark
reads and writes S3 through Hadoop's S3A connector, so :meth:`TableLocation.spark_uri` says ``s3a://``; delta-rs
says ``s3://``. Both URIs name the same bucket and key, so the two engines always see the same table.

A pipeline's ``storage`` block (:class:`StorageConfig`) holds the endpoint, region, addressing style and
credentials. Credentials are usually ``${env:NAME}`` / ``${file:PATH}`` references, kept as references (and masked
as ``SecretStr``) in every model, log line and error; :func:`spark_s3a_conf` and :func:`delta_rs_storage_options`
resolve them, and are called only where a Spark session or a delta-rs table is built. Without credentials in
``storage``, neither function sets any: Spark's S3A and delta-rs then use the standard AWS chain (the
``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN`` environment variables, profiles, instance
roles), as every AWS tool does.

Commit safety (see docs/object-storage.md): delta-rs commits on S3 with a conditional put (``If-None-Match: *``), set
explicitly here so a library default cannot silently change it; the product never enables delta-rs's unsafe rename.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Literal
from urllib.parse import unquote, urlparse

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from dynamic_kafka.errors import ConfigError

S3_SCHEMES = frozenset({"s3", "s3a"})
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_REFERENCE = re.compile(r"\$\{(env|file):([^}]+)\}")
# Bucket names per the S3 rules that matter for addressing: 3-63 of lowercase letters, digits, dots and hyphens.
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


class TableLocation(BaseModel):
    """A parsed table location: a local folder or an object-store URI.

    Example:
        >>> loc = parse_location("s3://lake/orders")
        >>> (loc.scheme, loc.bucket, loc.key, loc.spark_uri, loc.delta_rs_uri)
        ('s3', 'lake', 'orders', 's3a://lake/orders', 's3://lake/orders')
        >>> parse_location("data/orders").is_local
        True
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    uri: str = Field(description="The location as given, normalised (local paths absolute, no trailing slash).")
    scheme: str = Field(description='"file" for local folders, else the URI scheme in lower case (s3a stays s3a).')
    bucket: str | None = Field(default=None, description="Bucket (or container) of an object-store URI.")
    key: str = Field(default="", description="Path inside the bucket, without leading or trailing slash.")

    @property
    def is_local(self) -> bool:
        """True for a folder on a local (or mounted) file system."""
        return self.scheme == "file"

    @property
    def is_s3(self) -> bool:
        """True for ``s3://`` and ``s3a://`` locations."""
        return self.scheme in S3_SCHEMES

    @property
    def local_path(self) -> Path:
        """The folder of a local location.

        Raises:
            ConfigError: the location is not local.
        """
        if not self.is_local:
            raise ConfigError(f"table location {self.uri!r} is not a local folder.")
        return Path(self.uri)

    @property
    def spark_uri(self) -> str:
        """The URI Spark is given: S3 through Hadoop's S3A connector (``s3a://``), anything else unchanged."""
        return f"s3a://{self.bucket}/{self.key}".rstrip("/") if self.is_s3 else self.uri

    @property
    def delta_rs_uri(self) -> str:
        """The URI delta-rs is given: ``s3://`` for S3, anything else unchanged."""
        return f"s3://{self.bucket}/{self.key}".rstrip("/") if self.is_s3 else self.uri

    def sibling(self, suffix: str) -> TableLocation:
        """The location next to this one with ``suffix`` appended to its last segment (``orders`` -> ``orders_state``).

        Example:
            >>> parse_location("s3://lake/orders").sibling("_state").uri
            's3://lake/orders_state'
        """
        if self.is_local:
            return parse_location(self.uri + suffix)
        if not self.key:
            raise ConfigError(
                f"table location {self.uri!r} is a bucket root; a table there has no sibling for {suffix!r}.",
                hint="Put the table under a prefix (s3://bucket/orders) or give the other location explicitly.",
            )
        return parse_location(self.uri + suffix)


def parse_location(value: str | Path) -> TableLocation:
    """Parse a table location: a local path, ``file://`` URI, ``s3://``/``s3a://`` URI or another scheme's URI.

    Raises:
        ConfigError: empty, an S3 URI without a valid bucket, or a ``file://`` URI naming a remote host.

    Example:
        >>> parse_location("s3a://lake/raw/orders/").uri
        's3a://lake/raw/orders'
        >>> parse_location("file:///tmp/orders").uri
        '/tmp/orders'
    """
    text = str(value).strip()
    if not text:
        raise ConfigError("table location is empty.", hint="Give a local path or a URI such as s3://bucket/table.")
    match = _SCHEME.match(text)
    if match is None:
        # A path, or a mistyped URI ("s3:/lake/x" is what Path("s3://lake/x") prints): refuse the latter.
        if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:/", text) and not re.match(r"^[A-Za-z]:[\\/]", text):
            raise ConfigError(
                f"table location {text!r} looks like a URI with a missing slash.",
                hint="Write the scheme with two slashes, e.g. s3://bucket/table.",
            )
        return TableLocation(uri=str(Path(text).expanduser().absolute()).rstrip("/") or "/", scheme="file")
    scheme = match.group(1).lower()
    parsed = urlparse(text)
    if scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise ConfigError(f"table location {text!r} names host {parsed.netloc!r}; file:// URIs must be local.")
        return TableLocation(uri=str(Path(unquote(parsed.path)).absolute()).rstrip("/") or "/", scheme="file")
    bucket = parsed.netloc
    key = parsed.path.strip("/")
    if scheme in S3_SCHEMES and not _BUCKET.match(bucket):
        raise ConfigError(
            f"table location {text!r} has no valid S3 bucket ({bucket!r}).",
            hint="Write it as s3://BUCKET/PATH; bucket names are 3-63 lowercase letters, digits, dots or hyphens.",
        )
    if not bucket:
        raise ConfigError(f"table location {text!r} names no bucket or container.")
    uri = f"{scheme}://{bucket}/{key}".rstrip("/") if scheme in S3_SCHEMES else text.rstrip("/")
    return TableLocation(uri=uri, scheme=scheme, bucket=bucket, key=key)


class StorageConfig(BaseModel):
    """How a pipeline's tables on S3 (or an S3-compatible store) are reached: one block for Spark and delta-rs.

    Example:
        >>> cfg = StorageConfig(endpoint="http://127.0.0.1:9000", path_style=True,
        ...                     access_key_id="${env:AWS_ACCESS_KEY_ID}",
        ...                     secret_access_key="${env:AWS_SECRET_ACCESS_KEY}")
        >>> cfg.secret_access_key
        SecretStr('**********')
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    endpoint: str | None = Field(
        default=None,
        description="S3 API endpoint URL (MinIO, Ceph, a local server...); unset means AWS S3 for the region.",
    )
    region: str | None = Field(default=None, description="AWS region of the bucket; unset means the AWS chain's.")
    path_style: bool = Field(
        default=False,
        description="Address buckets as ENDPOINT/BUCKET/KEY instead of BUCKET.ENDPOINT/KEY; most S3-compatible "
        "servers need it.",
    )
    access_key_id: SecretStr | None = Field(
        default=None, description="Access key id, usually ${env:NAME}; unset means the AWS credential chain."
    )
    secret_access_key: SecretStr | None = Field(
        default=None, description="Secret access key, usually ${env:NAME} or ${file:PATH}; set with access_key_id."
    )
    session_token: SecretStr | None = Field(
        default=None, description="Session token of temporary credentials, usually ${env:AWS_SESSION_TOKEN}."
    )

    @field_validator("endpoint")
    @classmethod
    def _check_endpoint(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parsed = urlparse(value)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"endpoint {value!r} must be an http:// or https:// URL with a host")
        return value.rstrip("/")

    def model_post_init(self, context: object, /) -> None:
        """Credentials come in pairs: a key id without its secret (or the reverse) is a config mistake."""
        if (self.access_key_id is None) != (self.secret_access_key is None):
            raise ValueError("storage: set both access_key_id and secret_access_key, or neither (AWS chain)")
        if self.session_token is not None and self.access_key_id is None:
            raise ValueError("storage: session_token needs access_key_id and secret_access_key")

    @property
    def allow_http(self) -> bool:
        """True when the endpoint is plain HTTP (a local or in-cluster server)."""
        return self.endpoint is not None and self.endpoint.startswith("http://")


def _resolve(secret: SecretStr, *, field: str, owner: str) -> str:
    """Replace ``${env:NAME}`` / ``${file:PATH}`` references in a storage secret; errors name the reference only."""

    def substitute(match: re.Match[str]) -> str:
        kind, name = match.group(1), match.group(2).strip()
        if kind == "env":
            found = os.environ.get(name)
            if found is None:
                raise ConfigError(
                    f"storage option {field!r} of {owner} references environment variable {name!r}, which is not set.",
                    hint=f"Export {name} before running.",
                )
            return found
        try:
            return Path(name).expanduser().read_text(encoding="utf-8").strip()
        except OSError as e:
            raise ConfigError(
                f"storage option {field!r} of {owner} references file {name!r}, which cannot be read ({e.strerror}).",
                hint="Create the file or fix the path.",
            ) from e

    return _REFERENCE.sub(substitute, secret.get_secret_value())


def _credentials(storage: StorageConfig, owner: str) -> tuple[str, str, str | None] | None:
    if storage.access_key_id is None or storage.secret_access_key is None:
        return None
    key_id = _resolve(storage.access_key_id, field="access_key_id", owner=owner)
    secret = _resolve(storage.secret_access_key, field="secret_access_key", owner=owner)
    token = _resolve(storage.session_token, field="session_token", owner=owner) if storage.session_token else None
    return key_id, secret, token


def spark_s3a_conf(storage: StorageConfig | None, *, owner: str = "the pipeline") -> dict[str, str]:
    """The Spark settings (``spark.hadoop.fs.s3a.*``) that point Hadoop's S3A connector at ``storage``.

    ``s3://`` paths are mapped to S3A too (``fs.s3.impl``), so a table URI works in Spark whichever S3 scheme it
    uses. Resolves secret references: call only where the Spark session is built. Spark redacts the key and
    secret settings in its UI, logs and plans (``spark.redaction.regex`` covers ``secret`` and ``access.key``).

    Args:
        storage: the pipeline's storage block; None gives the scheme mapping only (AWS chain, AWS endpoints).
        owner: named in errors about unresolvable references, e.g. ``"pipeline 'orders'"``.

    Raises:
        ConfigError: a referenced environment variable is unset or a referenced file unreadable.

    Example:
        >>> conf = spark_s3a_conf(StorageConfig(endpoint="http://127.0.0.1:9000", path_style=True))
        >>> conf["spark.hadoop.fs.s3a.path.style.access"], conf["spark.hadoop.fs.s3a.connection.ssl.enabled"]
        ('true', 'false')
    """
    prefix = "spark.hadoop.fs.s3a."
    conf = {"spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem"}
    if storage is None:
        return conf
    if storage.endpoint is not None:
        conf[prefix + "endpoint"] = storage.endpoint
        conf[prefix + "connection.ssl.enabled"] = str(not storage.allow_http).lower()
    if storage.region is not None:
        conf[prefix + "endpoint.region"] = storage.region
    conf[prefix + "path.style.access"] = str(storage.path_style).lower()
    credentials = _credentials(storage, owner)
    if credentials is not None:
        key_id, secret, token = credentials
        conf[prefix + "access.key"] = key_id
        conf[prefix + "secret.key"] = secret
        if token is None:
            conf[prefix + "aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
        else:
            conf[prefix + "session.token"] = token
            conf[prefix + "aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
    return conf


ConditionalPut = Literal["etag"]


def delta_rs_storage_options(storage: StorageConfig | None, *, owner: str = "the pipeline") -> dict[str, str]:
    """The delta-rs ``storage_options`` for ``storage``, with safe commits on S3 made explicit.

    ``conditional_put=etag`` makes every commit a put-if-absent (``If-None-Match: *``), so two writers racing for
    one table version cannot both succeed. Resolves secret references: call only where a table is opened.

    Args:
        storage: the pipeline's storage block; None gives the commit-safety option only (AWS chain).
        owner: named in errors about unresolvable references.

    Raises:
        ConfigError: a referenced environment variable is unset or a referenced file unreadable.

    Example:
        >>> opts = delta_rs_storage_options(StorageConfig(endpoint="http://127.0.0.1:9000", region="us-east-1"))
        >>> opts["AWS_ENDPOINT_URL"], opts["AWS_ALLOW_HTTP"], opts["AWS_CONDITIONAL_PUT"]
        ('http://127.0.0.1:9000', 'true', 'etag')
    """
    options = {"AWS_CONDITIONAL_PUT": "etag"}
    if storage is None:
        return options
    if storage.endpoint is not None:
        options["AWS_ENDPOINT_URL"] = storage.endpoint
        options["AWS_ALLOW_HTTP"] = str(storage.allow_http).lower()
    if storage.region is not None:
        options["AWS_REGION"] = storage.region
    # object_store addresses buckets path-style unless told otherwise.
    options["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = str(not storage.path_style).lower()
    credentials = _credentials(storage, owner)
    if credentials is not None:
        key_id, secret, token = credentials
        options["AWS_ACCESS_KEY_ID"] = key_id
        options["AWS_SECRET_ACCESS_KEY"] = secret
        if token is not None:
            options["AWS_SESSION_TOKEN"] = token
    return options
