"""The local S3 API server: a real S3 HTTP API (boto3 against it), idempotent start, clear failures, the CLI."""

from __future__ import annotations

import json
import socket
import uuid
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from botocore.exceptions import ClientError

from devtools.cli.main import main
from devtools.errors import LocalS3Error
from devtools.local_s3 import LocalS3Server, server_status, start_server, stop_server
from devtools.testing.clusters import distinct_free_ports

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalS3Server]:
    base = tmp_path_factory.mktemp("local-s3")
    (port,) = distinct_free_ports(1)
    server = start_server(port=port, base_dir=base, buckets=["lake"])
    yield server
    stop_server(base_dir=base, purge=True)


def _client(server: LocalS3Server) -> Any:
    env = server.environment()
    return boto3.client(
        "s3",
        endpoint_url=server.endpoint,
        region_name=env["AWS_REGION"],
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
    )


def test_it_speaks_s3_over_http(s3_server: LocalS3Server) -> None:
    s3 = _client(s3_server)
    key = f"t/{uuid.uuid4().hex}"
    s3.put_object(Bucket="lake", Key=key, Body=b"hello")
    assert s3.get_object(Bucket="lake", Key=key)["Body"].read() == b"hello"
    listed = s3.list_objects_v2(Bucket="lake", Prefix="t/")["Contents"]
    assert key in {o["Key"] for o in listed}
    with pytest.raises(ClientError) as caught:
        s3.list_objects_v2(Bucket="no-such-bucket")
    assert caught.value.response["Error"]["Code"] == "NoSuchBucket"


def test_put_if_absent_is_honoured(s3_server: LocalS3Server) -> None:
    s3 = _client(s3_server)
    key = f"log/{uuid.uuid4().hex}.json"
    s3.put_object(Bucket="lake", Key=key, Body=b"first", IfNoneMatch="*")
    with pytest.raises(ClientError) as caught:
        s3.put_object(Bucket="lake", Key=key, Body=b"second", IfNoneMatch="*")
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert s3.get_object(Bucket="lake", Key=key)["Body"].read() == b"first"


def test_up_again_changes_nothing_and_adds_buckets(s3_server: LocalS3Server) -> None:
    again = start_server(base_dir=s3_server.server_dir, buckets=["second-bucket"])
    assert again == s3_server
    assert "second-bucket" in {b["Name"] for b in _client(s3_server).list_buckets()["Buckets"]}
    status = server_status(s3_server.server_dir)
    assert status is not None
    assert status.running


def test_up_refuses_another_port_while_running(s3_server: LocalS3Server) -> None:
    with pytest.raises(LocalS3Error, match=rf"already runs on port {s3_server.port}.*local-s3 down"):
        start_server(port=s3_server.port + 1, base_dir=s3_server.server_dir)


def test_a_port_in_use_is_refused(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(LocalS3Error, match=rf"port {port} is already in use"):
            start_server(port=port, base_dir=tmp_path)


def test_a_server_that_does_not_come_up_reports_its_log(tmp_path: Path) -> None:
    (port,) = distinct_free_ports(1)
    with pytest.raises(LocalS3Error, match=r"did not come up: it did not answer .*Last lines of .*s3.log"):
        start_server(port=port, base_dir=tmp_path, start_timeout_s=0.01)
    status = server_status(tmp_path)
    assert status is not None
    assert not status.running


def test_cli_up_status_down(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (port,) = distinct_free_ports(1)
    base = ["--base-dir", str(tmp_path)]
    try:
        assert main(["local-s3", "up", "--port", str(port), "--bucket", "lake", *base]) == 0
        capsys.readouterr()
        assert main(["local-s3", "status", "--json", *base]) == 0
        shown = json.loads(capsys.readouterr().out)
        assert shown["running"] is True
        assert shown["endpoint"] == f"http://127.0.0.1:{port}"
        env = shown["env"]
        assert env["AWS_ENDPOINT_URL"] == shown["endpoint"]
        assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_ALLOW_HTTP"} <= set(env)
        s3 = boto3.client(
            "s3",
            endpoint_url=env["AWS_ENDPOINT_URL"],
            region_name=env["AWS_REGION"],
            aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        )
        assert [b["Name"] for b in s3.list_buckets()["Buckets"]] == ["lake"]
        assert main(["local-s3", "status", "--env", *base]) == 0
        assert f"export AWS_ENDPOINT_URL=http://127.0.0.1:{port}" in capsys.readouterr().out
    finally:
        assert main(["local-s3", "down", *base]) == 0
    assert "stopped" in capsys.readouterr().out
    assert main(["local-s3", "status", "--json", *base]) == 0
    assert json.loads(capsys.readouterr().out)["running"] is False
