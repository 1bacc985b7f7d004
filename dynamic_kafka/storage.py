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

Why one module of this size: the URI rules and both engines' option translations are kept in one place on
purpose, so Spark and delta-rs can never disagree about where a table is or how it is reached.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Literal
from urllib.parse import unquote, urlparse

from pydantic import Field, SecretStr, field_validator

from dynamic_kafka.errors import ConfigError, DynamicKafkaError, ObjectStoreError
from dynamic_kafka.frozen import FrozenModel
from dynamic_kafka.references import UnresolvableReferenceError, substitute

if TYPE_CHECKING:
    from collections.abc import Mapping

S3_SCHEMES = frozenset({"s3", "s3a"})
# Schemes both engines reach: Spark through a Hadoop connector (s3a for S3, gcs-connector for gs, hadoop-azure for
# abfs/abfss) and delta-rs through object_store. Anything else would work in one engine only.
SUPPORTED_SCHEMES = frozenset({"file", *S3_SCHEMES, "gs", "abfs", "abfss"})
# delta-rs storage options that would weaken or pretend to configure the state table's commit guard (see
# docs/object-storage.md): conditional put must stay "etag"; the rename and locking switches are pre-1.0 leftovers.
_CONDITIONAL_PUT_KEYS = frozenset({"aws_conditional_put", "conditional_put"})
_LEFTOVER_KEYS = frozenset({"aws_s3_allow_unsafe_rename", "aws_s3_locking_provider", "dynamo_lock_table_name"})
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_SECRET_OPTION = re.compile(r"(?i)secret|token|password|access_key|account_key|sas_key|service_account_key")
# Bucket names per the S3 rules that matter for addressing: 3-63 of lowercase letters, digits, dots and hyphens.
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


class TableLocation(FrozenModel):
    """A parsed table location: a local folder or an object-store URI.

    Example:
        >>> loc = parse_location("s3://lake/orders")
        >>> (loc.scheme, loc.bucket, loc.key, loc.spark_uri, loc.delta_rs_uri)
        ('s3', 'lake', 'orders', 's3a://lake/orders', 's3://lake/orders')
        >>> parse_location("data/orders").is_local
        True
    """

    uri: str = Field(description="The location as given, normalised (local paths absolute, no trailing slash).")
    scheme: str = Field(description='"file" for local folders, else the URI scheme in lower case (s3a stays s3a).')
    bucket: str | None = Field(default=None, description="Bucket (or container) of an object-store URI.")
    key: str = Field(default="", description="Path inside the bucket, without leading or trailing slash.")

    def __str__(self) -> str:
        return self.uri

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


def parsed_location(value: object) -> object:
    """A config field's value as a :class:`TableLocation` when written as text (a path or URI); for a pydantic
    ``before`` validator, so an invalid location is that field's validation error.
    """
    if isinstance(value, str | Path):
        try:
            return parse_location(value)
        except ConfigError as e:
            raise ValueError(str(e)) from None
    return value


# Kernel file systems: they take no folders from anyone, root included (whom os.access would wave through).
_PSEUDO_FILE_SYSTEMS = (Path("/proc"), Path("/sys"))


def uncreatable(location: TableLocation, what: str) -> str | None:
    """Why the local table ``location`` cannot be created (its nearest existing folder is a file, a kernel file
    system, or not writable), or None; ``what`` names the table in the message ("the sink table"). Object-store
    locations, and tables that exist, are not judged. A per-stream template is judged by its fixed part.

    Example:
        >>> uncreatable(parse_location("/proc/lake/orders"), "the sink table")
        '/proc takes no folders: the sink table /proc/lake/orders cannot be created under it'
    """
    if not location.is_local:
        return None
    folder = Path(location.uri.split("{", 1)[0])
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    pseudo = next((p for p in _PSEUDO_FILE_SYSTEMS if folder == p or p in folder.parents), None)
    if pseudo is not None:
        return f"{pseudo} takes no folders: {what} {location.uri} cannot be created under it"
    if not folder.is_dir():
        return f"{folder} is a file, not a folder: {what} {location.uri} cannot be created under it"
    if Path(location.uri).exists() or os.access(folder, os.W_OK | os.X_OK):
        return None
    return f"this user may not write the folder {folder}: {what} {location.uri} cannot be created under it"


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
    if scheme not in SUPPORTED_SCHEMES:
        raise ConfigError(
            f"table location {text!r} has scheme {scheme!r}, which dynamic-kafka does not support.",
            hint="Use a local path, file://, s3:// (or s3a://), gs://, abfs:// or abfss://.",
        )
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


class StorageConfig(FrozenModel):
    """How a pipeline's tables on S3 (or an S3-compatible store) are reached: one block for Spark and delta-rs.

    Example:
        >>> cfg = StorageConfig(endpoint="http://127.0.0.1:9000", path_style=True,
        ...                     access_key_id="${env:AWS_ACCESS_KEY_ID}",
        ...                     secret_access_key="${env:AWS_SECRET_ACCESS_KEY}")
        >>> cfg.secret_access_key
        SecretStr('**********')
    """

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
    options: dict[str, str] = Field(
        default_factory=dict,
        description="More delta-rs (object_store) storage options, passed as given, e.g. "
        "{AWS_S3_EXPRESS: 'true'} or, for gs:// / abfss://, that store's options. Spark's own connector settings "
        "go in the project's spark.conf (spark.hadoop.fs.<scheme>.*). No credentials here: use the fields above.",
    )

    @field_validator("options")
    @classmethod
    def _check_options(cls, value: dict[str, str]) -> dict[str, str]:
        for key, option in value.items():
            refusal = unsafe_option(key, option)
            if refusal is not None:
                raise ValueError(refusal)
            if _SECRET_OPTION.search(key):
                raise ValueError(
                    f"storage option {key!r} looks like a credential; set access_key_id / secret_access_key / "
                    "session_token (as ${env:NAME} references) instead, so it stays masked"
                )
        return value

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
    """Replace the references in a storage secret (see :mod:`dynamic_kafka.references`); errors name the reference
    only.
    """
    try:
        return substitute(secret.get_secret_value())
    except UnresolvableReferenceError as e:
        raise ConfigError(f"storage option {field!r} of {owner}: {e}.") from e


def _credentials(storage: StorageConfig, owner: str) -> tuple[str, str, str | None] | None:
    if storage.access_key_id is None or storage.secret_access_key is None:
        return None
    key_id = _resolve(storage.access_key_id, field="access_key_id", owner=owner)
    secret = _resolve(storage.secret_access_key, field="secret_access_key", owner=owner)
    token = _resolve(storage.session_token, field="session_token", owner=owner) if storage.session_token else None
    return key_id, secret, token


def spark_s3a_conf(
    storage: StorageConfig | None, *, owner: str = "the pipeline", bucket: str | None = None
) -> dict[str, str]:
    """The Spark settings (``spark.hadoop.fs.s3a.*``) that point Hadoop's S3A connector at ``storage``.

    ``s3://`` paths are mapped to S3A too (``fs.s3.impl``), so a table URI works in Spark whichever S3 scheme it
    uses. With ``bucket``, the settings are S3A's per-bucket ones (``fs.s3a.bucket.BUCKET.*``), which apply to that
    bucket only: pipelines with different endpoints or credentials share one Spark session that way. Resolves
    secret references: call only where the Spark session is built. Spark redacts the key and secret settings in
    its UI, logs and plans (``spark.redaction.regex`` covers ``secret`` and ``access.key``).

    Args:
        storage: the pipeline's storage block; None gives the scheme mapping only (AWS chain, AWS endpoints).
        owner: named in errors about unresolvable references, e.g. ``"pipeline 'orders'"``.
        bucket: give the settings for this bucket only.

    Raises:
        ConfigError: a referenced environment variable is unset or a referenced file unreadable.

    Example:
        >>> conf = spark_s3a_conf(StorageConfig(endpoint="http://127.0.0.1:9000", path_style=True))
        >>> conf["spark.hadoop.fs.s3a.path.style.access"], conf["spark.hadoop.fs.s3a.connection.ssl.enabled"]
        ('true', 'false')
        >>> sorted(spark_s3a_conf(StorageConfig(region="eu-west-1"), bucket="lake"))[1]
        'spark.hadoop.fs.s3a.bucket.lake.endpoint.region'
    """
    prefix = f"spark.hadoop.fs.s3a.bucket.{bucket}." if bucket else "spark.hadoop.fs.s3a."
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
    options.update(storage.options)
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
    # Last, so no extra option can switch the commit guard off (the model refuses such options anyway).
    options["AWS_CONDITIONAL_PUT"] = "etag"
    return options


def unsafe_option(key: str, value: str) -> str | None:
    """Why a delta-rs storage option (or AWS environment variable) is refused, or None when it is safe.

    Example:
        >>> unsafe_option("AWS_CONDITIONAL_PUT", "disabled")[:44]
        'storage option AWS_CONDITIONAL_PUT=disabled '
        >>> unsafe_option("AWS_REGION", "eu-west-1") is None
        True
    """
    name = key.strip().lower()
    if name in _CONDITIONAL_PUT_KEYS and value.strip().lower() != "etag":
        return (
            f"storage option {key}={value} would let two runs commit the same state version; dynamic-kafka needs "
            "conditional puts (If-None-Match) on S3. Remove it: AWS S3, MinIO, Ceph and R2 support them"
        )
    if name in _LEFTOVER_KEYS:
        return (
            f"storage option {key} is a leftover of delta-rs before 1.0 (locking provider / unsafe rename) and is "
            "ignored by delta-rs 1.x, which commits with conditional puts instead. Remove it"
        )
    return None


def check_environment(environ: Mapping[str, str] | None = None) -> None:
    """Refuse AWS environment variables that name an unsafe or obsolete commit setting (see :func:`unsafe_option`).

    delta-rs reads ``AWS_*`` variables as storage options; a leftover ``AWS_S3_ALLOW_UNSAFE_RENAME`` in a
    deployment's environment suggests a setup that no longer does what its name says.

    Raises:
        ConfigError: naming the variable and what to unset.
    """
    environ = os.environ if environ is None else environ
    for key, value in sorted(environ.items()):
        if key.upper().startswith("AWS_"):
            refusal = unsafe_option(key, value)
            if refusal is not None:
                raise ConfigError(
                    f"environment variable {refusal.removeprefix('storage option ')}.", hint=f"Unset {key}."
                )


StorageProblem = Literal["missing_bucket", "credentials", "unreachable", "other"]


def classify_storage_error(error: BaseException) -> StorageProblem:
    """What an object-store error from delta-rs or Spark's S3A connector says went wrong.

    Example:
        >>> classify_storage_error(OSError("... 404 Not Found <Code>NoSuchBucket</Code> ..."))
        'missing_bucket'
    """
    text = str(error)
    if re.search(r"NoSuchBucket|bucket does not exist|UnknownStoreException", text):
        return "missing_bucket"
    if re.search(
        r"InvalidAccessKeyId|SignatureDoesNotMatch|AccessDenied|ExpiredToken|InvalidToken|403 Forbidden|"
        r"No AWS Credentials|NoAuthWithAWSException|Unable to load AWS credentials|status code: 403",
        text,
    ):
        return "credentials"
    if re.search(
        r"error sending request|Connection refused|tcp connect error|dns error|UnknownHostException|"
        r"ConnectException|Unable to execute HTTP request|timed out|Connect to .* failed",
        text,
    ):
        return "unreachable"
    return "other"


def storage_error_message(error: BaseException, location: TableLocation, storage: StorageConfig | None) -> str | None:
    """A clear sentence for an object-store failure at ``location`` (naming the location and the endpoint, never a
    credential), or None when ``error`` is not one of the recognised problems.
    """
    endpoint = storage.endpoint if storage and storage.endpoint else "the store's default endpoint"
    problem = classify_storage_error(error)
    if problem == "missing_bucket":
        return (
            f"bucket {location.bucket!r} of {location.uri} does not exist at {endpoint}. "
            "Create the bucket (dynamic-kafka creates tables, not buckets) or fix the location"
        )
    if problem == "credentials":
        return (
            f"the object store at {endpoint} refused the credentials for {location.uri}. Check "
            "storage.access_key_id / secret_access_key (or the AWS_* environment variables) and the bucket's policy"
        )
    if problem == "unreachable":
        return (
            f"the object store at {endpoint} is unreachable for {location.uri}. Check storage.endpoint, the network, "
            "and that the store runs"
        )
    return None


class TableRef:
    """One Delta table as both engines reach it: its location, the storage block and who owns it (for errors).

    Cheap and secret-free: the storage options are resolved on each :meth:`storage_options` call, at the moment a
    delta-rs table is opened, and never kept.

    Example:
        >>> ref = TableRef(parse_location("s3a://lake/orders"), StorageConfig(region="us-east-1"))
        >>> (str(ref), ref.spark_uri, ref.delta_rs_uri)
        ('s3a://lake/orders', 's3a://lake/orders', 's3://lake/orders')
    """

    __slots__ = ("location", "owner", "storage")

    def __init__(
        self, location: TableLocation, storage: StorageConfig | None = None, *, owner: str = "the pipeline"
    ) -> None:
        self.location = location
        self.storage = storage
        self.owner = owner

    @classmethod
    def of(cls, table: TableRef | TableLocation | str | Path) -> TableRef:
        """``table`` as a TableRef (a bare location or path gets no storage block: the AWS chain)."""
        if isinstance(table, TableRef):
            return table
        return cls(table if isinstance(table, TableLocation) else parse_location(table))

    def __str__(self) -> str:
        return self.location.uri

    def __repr__(self) -> str:
        return f"TableRef({self.location.uri!r})"

    @property
    def spark_uri(self) -> str:
        """The URI Spark is given (``s3a://`` for S3)."""
        return self.location.spark_uri

    @property
    def delta_rs_uri(self) -> str:
        """The URI delta-rs is given (``s3://`` for S3)."""
        return self.location.delta_rs_uri

    def storage_options(self) -> dict[str, str] | None:
        """delta-rs ``storage_options`` for this table (resolved secrets inside; pass straight to delta-rs)."""
        if self.location.is_local:
            return None
        if self.location.is_s3:
            return delta_rs_storage_options(self.storage, owner=self.owner)
        return dict(self.storage.options) if self.storage is not None else None

    def failure(self, error: BaseException, doing: str) -> DynamicKafkaError | None:
        """The error to raise for an object-store failure while ``doing`` something with this table, or None
        when ``error`` is not a recognised storage problem (the caller wraps it its own way). It names the owner
        (``pipeline 'orders'``) unless ``doing`` does already: the operator learns whose storage block to fix.
        """
        where = doing if self.owner in doing else f"{self.owner}, {doing}"
        return object_store_failure(error, self.location, self.storage, where)


def object_store_failure(
    error: BaseException, location: TableLocation, storage: StorageConfig | None, doing: str
) -> ObjectStoreError | None:
    """An :class:`ObjectStoreError` for a missing bucket, refused credentials or an unreachable store at
    ``location`` while ``doing`` something; None for a local location or an unrecognised error.
    """
    if location.is_local:
        return None
    message = storage_error_message(error, location, storage)
    if message is None:
        return None
    return ObjectStoreError(f"{doing}: {message}.", retriable=classify_storage_error(error) == "unreachable")
