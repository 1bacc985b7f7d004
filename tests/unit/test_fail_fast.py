"""What cannot get better by waiting fails at once and is not retriable (so Dagster does not retry it either): a
missing metadata file.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

import pytest

from dynamic_kafka.cli.main import main
from dynamic_kafka.errors import MetadataServiceError
from dynamic_kafka.metadata.file import FileMetadataService

if TYPE_CHECKING:
    from pathlib import Path


def test_a_missing_metadata_file_is_not_retriable(tmp_path: Path) -> None:
    with pytest.raises(MetadataServiceError) as raised:
        FileMetadataService(tmp_path / "gone.yaml").get_all_streams()

    assert raised.value.retriable is False


def test_plan_with_a_missing_metadata_file_fails_at_the_first_attempt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "dynamic_kafka.yaml"
    config.write_text(
        "metadata_service: {type: file, path: gone.yaml}\n"
        "pipelines: [{id: p, streams: [orders], sink: {path: data/orders}, "
        "metadata_retries: {attempts: 3, backoff_seconds: 5}}]\n"
    )

    with caplog.at_level(logging.WARNING):
        assert main(["plan", "--json", "--config", str(config), "--pipeline", "p"]) == 1

    error = json.loads(capsys.readouterr().err)["error"]
    assert (error["type"], error["retriable"]) == ("MetadataServiceError", False)
    assert "gone.yaml' does not exist" in error["message"]
    assert not [r for r in caplog.records if "retrying" in r.getMessage()]
