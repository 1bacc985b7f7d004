"""Table locations and the storage block: parsing, refusals, and the Spark / delta-rs settings built from one place."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from dynamic_kafka.errors import ConfigError
from dynamic_kafka.storage import (
    StorageConfig,
    delta_rs_storage_options,
    parse_location,
    spark_s3a_conf,
)

SECRET = "wJalrXUtnFEMI-known-secret-value"


@pytest.mark.parametrize(
    ("given", "uri", "scheme", "bucket", "key", "spark", "delta_rs"),
    [
        ("s3://lake/orders", "s3://lake/orders", "s3", "lake", "orders", "s3a://lake/orders", "s3://lake/orders"),
        ("s3a://lake/a/b/", "s3a://lake/a/b", "s3a", "lake", "a/b", "s3a://lake/a/b", "s3://lake/a/b"),
        ("S3://lake/x", "s3://lake/x", "s3", "lake", "x", "s3a://lake/x", "s3://lake/x"),
        ("gs://bucket/t", "gs://bucket/t", "gs", "bucket", "t", "gs://bucket/t", "gs://bucket/t"),
        (
            "abfss://c@acct.dfs.core.windows.net/t",
            "abfss://c@acct.dfs.core.windows.net/t",
            "abfss",
            "c@acct.dfs.core.windows.net",
            "t",
            "abfss://c@acct.dfs.core.windows.net/t",
            "abfss://c@acct.dfs.core.windows.net/t",
        ),
    ],
)
def test_object_store_uris(given: str, uri: str, scheme: str, bucket: str, key: str, spark: str, delta_rs: str) -> None:
    loc = parse_location(given)
    assert (loc.uri, loc.scheme, loc.bucket, loc.key) == (uri, scheme, bucket, key)
    assert (loc.spark_uri, loc.delta_rs_uri) == (spark, delta_rs)
    assert not loc.is_local


def test_local_paths_and_file_uris_become_absolute_folders(tmp_path: Path) -> None:
    for given in (tmp_path / "orders", f"file://{tmp_path}/orders/", str(tmp_path / "orders") + "/"):
        loc = parse_location(given)
        assert loc.is_local
        assert loc.scheme == "file"
        assert loc.local_path == tmp_path / "orders"
        assert loc.spark_uri == loc.delta_rs_uri == str(tmp_path / "orders")
    assert parse_location("rel/orders").local_path == Path.cwd() / "rel" / "orders"


def test_state_defaults_next_to_the_sink() -> None:
    assert parse_location("s3://lake/orders").sibling("_state").uri == "s3://lake/orders_state"
    assert parse_location("/data/orders").sibling("_state").uri == "/data/orders_state"
    with pytest.raises(ConfigError, match="bucket root"):
        parse_location("s3://lake").sibling("_state")


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("", "empty"),
        ("s3:/lake/orders", "missing slash"),  # what Path("s3://lake/orders") prints
        ("s3://", "no valid S3 bucket"),
        ("s3://Lake_Bad/x", "no valid S3 bucket"),
        ("s3a:///x", "no valid S3 bucket"),
        ("file://otherhost/x", "must be local"),
    ],
)
def test_bad_locations_are_refused(given: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_location(given)


def _storage(**kwargs: object) -> StorageConfig:
    return StorageConfig.model_validate(
        {
            "endpoint": "http://127.0.0.1:9000",
            "region": "us-east-1",
            "path_style": True,
            "access_key_id": "${env:DK_TEST_KEY_ID}",
            "secret_access_key": "${env:DK_TEST_SECRET}",
            **kwargs,
        }
    )


def test_the_user_shape_resolves_late_for_both_engines(monkeypatch: pytest.MonkeyPatch) -> None:
    storage = _storage()
    monkeypatch.setenv("DK_TEST_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("DK_TEST_SECRET", SECRET)
    assert spark_s3a_conf(storage) == {
        "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:9000",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.access.key": "AKIDEXAMPLE",
        "spark.hadoop.fs.s3a.secret.key": SECRET,
        "spark.hadoop.fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
    }
    assert delta_rs_storage_options(storage) == {
        "AWS_CONDITIONAL_PUT": "etag",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
        "AWS_ALLOW_HTTP": "true",
        "AWS_REGION": "us-east-1",
        "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
        "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
        "AWS_SECRET_ACCESS_KEY": SECRET,
    }


def test_file_references_and_session_tokens(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET + "\n")
    monkeypatch.setenv("DK_TEST_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("DK_TEST_TOKEN", "tok")
    storage = _storage(secret_access_key=f"${{file:{secret_file}}}", session_token="${env:DK_TEST_TOKEN}")
    conf = spark_s3a_conf(storage)
    assert conf["spark.hadoop.fs.s3a.secret.key"] == SECRET
    assert conf["spark.hadoop.fs.s3a.session.token"] == "tok"
    assert conf["spark.hadoop.fs.s3a.aws.credentials.provider"].endswith("TemporaryAWSCredentialsProvider")
    assert delta_rs_storage_options(storage)["AWS_SESSION_TOKEN"] == "tok"


def test_without_credentials_the_aws_chain_applies() -> None:
    storage = StorageConfig(region="eu-west-1")
    conf = spark_s3a_conf(storage)
    options = delta_rs_storage_options(storage)
    assert not any("key" in k or "provider" in k for k in conf)
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "false"
    assert options == {
        "AWS_CONDITIONAL_PUT": "etag",
        "AWS_REGION": "eu-west-1",
        "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "true",
    }
    assert spark_s3a_conf(None) == {"spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem"}
    assert delta_rs_storage_options(None) == {"AWS_CONDITIONAL_PUT": "etag"}
    assert StorageConfig(endpoint="https://minio.example:9000/").allow_http is False


def test_unset_references_name_the_reference_never_a_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DK_TEST_KEY_ID", SECRET)
    monkeypatch.delenv("DK_TEST_SECRET", raising=False)
    with pytest.raises(ConfigError, match=r"'secret_access_key' of pipeline 'orders': .*'DK_TEST_SECRET'") as caught:
        delta_rs_storage_options(_storage(), owner="pipeline 'orders'")
    assert SECRET not in str(caught.value)


def test_secrets_are_masked_in_repr_and_dumps(monkeypatch: pytest.MonkeyPatch) -> None:
    storage = _storage(secret_access_key=SECRET)
    for text in (repr(storage), str(storage), storage.model_dump_json(), str(storage.model_dump())):
        assert SECRET not in text


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"endpoint": "127.0.0.1:9000"}, "http:// or https://"),
        ({"secret_access_key": None}, "both access_key_id and secret_access_key"),
        ({"bucket": "lake"}, "Extra inputs are not permitted"),
    ],
)
def test_bad_storage_blocks_are_refused(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        _storage(**fields)
