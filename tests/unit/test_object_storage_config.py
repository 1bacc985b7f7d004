"""Pipelines on object storage: locations in the config, commit-safety refusals, per-bucket Spark settings and
the storage error messages (phase 2 of issue 14)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
import yaml

from dynamic_kafka.config.loader import load_project_config
from dynamic_kafka.config.models import ProjectConfig, SparkConfig
from dynamic_kafka.errors import ConfigError, ObjectStoreError
from dynamic_kafka.protocol.guard import RUN_LOCK_DIR_ENV
from dynamic_kafka.protocol.guard import run_lock_path as _run_lock_path
from dynamic_kafka.spark.session import S3A_EXCLUDES, S3A_PACKAGES, object_storage_conf, requested_packages
from dynamic_kafka.storage import (
    StorageConfig,
    TableRef,
    check_environment,
    classify_storage_error,
    parse_location,
)

if TYPE_CHECKING:
    from pathlib import Path

SECRET = "wJalrXUtnFEMI-phase2-secret"
STORAGE = {"endpoint": "http://127.0.0.1:9000", "region": "us-east-1", "path_style": True}


def _project(tmp_path: Path, *pipelines: dict[str, Any]) -> Path:
    path = tmp_path / "dynamic_kafka.yaml"
    document = {"metadata_service": {"type": "file", "path": "metadata.yaml"}, "pipelines": list(pipelines)}
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def _pipeline(pipeline_id: str, sink: str, **more: Any) -> dict[str, Any]:
    return {"id": pipeline_id, "streams": ["orders"], "sink": {"path": sink}, **more}


def test_a_storage_section_loads_and_the_state_defaults_to_a_sibling_uri(tmp_path: Path) -> None:
    config = load_project_config(_project(tmp_path, _pipeline("orders", "s3://lake/orders", storage=STORAGE)))
    p = config.pipeline("orders")
    assert p.sink.path.uri == "s3://lake/orders"
    assert p.resolved_state_path.uri == "s3://lake/orders_state"
    assert p.sink.resolved_dead_letter_path.uri == "s3://lake/orders_dead_letter"
    assert p.sink_table.spark_uri == "s3a://lake/orders"
    assert p.state_table.delta_rs_uri == "s3://lake/orders_state"
    assert p.state_table.storage_options() == {
        "AWS_CONDITIONAL_PUT": "etag",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
        "AWS_ALLOW_HTTP": "true",
        "AWS_REGION": "us-east-1",
        "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
    }
    assert config.object_store_buckets() == {"lake": p.storage}


def test_local_locations_stay_relative_to_the_config_file(tmp_path: Path) -> None:
    config = load_project_config(
        _project(
            tmp_path,
            {**_pipeline("a", "data/a", state_path="st/a"), "sink": {"path": "data/a", "dead_letter_path": "dl"}},
        )
    )
    p = config.pipeline("a")
    assert p.sink.path.local_path == tmp_path / "data/a"
    assert p.sink.resolved_dead_letter_path.local_path == tmp_path / "dl"
    assert p.resolved_state_path.local_path == tmp_path / "st/a"
    assert p.sink_table.storage_options() is None
    assert config.object_store_buckets() == {}


@pytest.mark.parametrize(
    ("pipelines", "message"),
    [
        (
            [_pipeline("a", "s3://lake/orders"), _pipeline("b", "s3a://lake/orders")],
            "s3a://lake/orders is the sink table of pipeline 'b' and also the sink table of pipeline 'a'",
        ),
        (
            [
                _pipeline("a", "s3://lake/orders"),
                _pipeline("b", "s3://lake/other", state_path="s3a://lake/orders_state"),
            ],
            "S3SingleDriverLogStore",
        ),
        (
            [_pipeline("a", "s3://lake/x", storage=STORAGE), _pipeline("b", "s3://lake/y")],
            "bucket 'lake' is used by pipelines 'a' and 'b' with different storage blocks",
        ),
        (
            [_pipeline("a", "s3://lake/x", storage={**STORAGE, "options": {"AWS_CONDITIONAL_PUT": "disabled"}})],
            "AWS_CONDITIONAL_PUT=disabled would let two runs commit the same state version",
        ),
        (
            [_pipeline("a", "s3://lake/x", storage={"options": {"AWS_S3_ALLOW_UNSAFE_RENAME": "true"}})],
            "ignored by delta-rs 1.x",
        ),
        (
            [_pipeline("a", "s3://lake/x", storage={"options": {"aws_s3_locking_provider": "dynamodb"}})],
            "leftover of delta-rs before 1.0",
        ),
        (
            [_pipeline("a", "s3://lake/x", storage={"options": {"AWS_SECRET_ACCESS_KEY": SECRET}})],
            "looks like a credential",
        ),
        ([_pipeline("a", "hdfs://nn/x")], "scheme 'hdfs', which dynamic-kafka does not support"),
        ([_pipeline("a", "s3://no_such_Bucket/x")], "no valid S3 bucket"),
        ([_pipeline("a", "s3:/lake/x")], "missing slash"),
    ],
)
def test_unsafe_or_bad_object_store_configs_are_refused(
    tmp_path: Path, pipelines: list[dict[str, Any]], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        load_project_config(_project(tmp_path, *pipelines))
    assert SECRET not in str(caught.value)


def test_local_tables_may_still_be_shared(tmp_path: Path) -> None:
    config = load_project_config(_project(tmp_path, _pipeline("a", "data/x"), _pipeline("b", "data/x")))
    assert len(config.pipelines) == 2


def test_unsafe_aws_environment_variables_are_refused() -> None:
    check_environment({"AWS_REGION": "us-east-1", "AWS_CONDITIONAL_PUT": "etag"})
    with pytest.raises(ConfigError, match="Unset AWS_S3_ALLOW_UNSAFE_RENAME"):
        check_environment({"AWS_S3_ALLOW_UNSAFE_RENAME": "true"})
    with pytest.raises(ConfigError, match="AWS_CONDITIONAL_PUT=disabled"):
        check_environment({"AWS_CONDITIONAL_PUT": "disabled"})


def test_spark_gets_per_bucket_s3a_settings_and_the_connector_only_for_s3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DK_KEY", "AKID")
    monkeypatch.setenv("DK_SECRET", SECRET)
    credentials = {"access_key_id": "${env:DK_KEY}", "secret_access_key": "${env:DK_SECRET}"}
    config = ProjectConfig.model_validate(
        {
            "metadata_service": {"type": "file", "path": str(tmp_path / "m.yaml")},
            "pipelines": [
                _pipeline("a", "s3://lake/a", storage={**STORAGE, **credentials}),
                _pipeline("b", "s3://other-lake/b", storage={"endpoint": "https://minio.example:9000"}),
            ],
        }
    )
    conf = object_storage_conf(config.object_store_buckets())
    assert conf["spark.hadoop.fs.s3a.bucket.lake.endpoint"] == "http://127.0.0.1:9000"
    assert conf["spark.hadoop.fs.s3a.bucket.lake.secret.key"] == SECRET
    assert conf["spark.hadoop.fs.s3a.bucket.other-lake.endpoint"] == "https://minio.example:9000"
    assert conf["spark.hadoop.fs.s3a.bucket.other-lake.connection.ssl.enabled"] == "true"
    assert "spark.hadoop.fs.s3a.bucket.other-lake.secret.key" not in conf
    assert not any(k.startswith("spark.hadoop.fs.s3a.endpoint") for k in conf)  # nothing global
    local_packages, local_exclusions = requested_packages(SparkConfig(), "4.1.3")
    s3_packages, s3_exclusions = requested_packages(SparkConfig(), "4.1.3", s3a=True)
    assert not set(S3A_PACKAGES) & set(local_packages)
    assert set(S3A_PACKAGES) <= set(s3_packages)
    assert S3A_EXCLUDES[0] in s3_exclusions
    assert S3A_EXCLUDES[0] not in local_exclusions


def test_object_store_run_locks_live_in_the_lock_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RUN_LOCK_DIR_ENV, str(tmp_path / "locks"))
    s3 = _run_lock_path(parse_location("s3://lake/orders_state"), "p")
    assert s3.parent == tmp_path / "locks"
    assert s3 == _run_lock_path(parse_location("s3a://lake/orders_state"), "p")  # one table, one lock
    # Local state's lock is there too: it is how one machine plays two hosts.
    assert _run_lock_path(parse_location(tmp_path / "st"), "p").parent == tmp_path / "locks"


@pytest.mark.parametrize(
    ("text", "problem", "message"),
    [
        (
            "Error performing GET http://h/nobucket ... 404 Not Found <Code>NoSuchBucket</Code>",
            "missing_bucket",
            "does not exist",
        ),
        ("... 403 Forbidden <Code>InvalidAccessKeyId</Code>", "credentials", "refused the credentials"),
        (
            "error sending request ... tcp connect error ... Connection refused (os error 111)",
            "unreachable",
            "unreachable",
        ),
        ("something else entirely", "other", None),
    ],
)
def test_storage_errors_name_the_location_and_endpoint(text: str, problem: str, message: str | None) -> None:
    assert classify_storage_error(OSError(text)) == problem
    ref = TableRef(parse_location("s3://nobucket/t"), StorageConfig(endpoint="http://127.0.0.1:9"))
    error = ref.failure(OSError(text), "opening the state")
    if message is None:
        assert error is None
        return
    assert isinstance(error, ObjectStoreError)
    assert message in str(error)
    assert "s3://nobucket/t" in str(error)
    assert "http://127.0.0.1:9" in str(error)
    assert str(error).startswith("the pipeline, opening the state: ")
    assert error.retriable == (problem == "unreachable")
