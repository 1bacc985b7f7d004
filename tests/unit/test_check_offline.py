"""``dynamic-kafka check`` finds, offline and in one report, every problem it can know before a run: references
that cannot be resolved (secrets' included), literal secrets, pipelines sharing a table, and a duplicate key that
no longer hides the rest of its file.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from dynamic_kafka.cli.main import main

if TYPE_CHECKING:
    from pathlib import Path

METADATA = """
clusters:
  east:
    bootstrap_servers: "127.0.0.1:19092"
    properties:
      security.protocol: SASL_PLAINTEXT
      ssl.key.location: /etc/kafka/client.key
      sasl.password: "${env:DK_CHECK_PASSWORD}"
streams:
  orders: {east: [orders]}
"""

CONFIG = """
metadata_service: {type: file, path: metadata.yaml}
pipelines:
  - {id: orders, streams: [orders], sink: {path: data/orders}}
"""

LATE_PIPELINE_WITH_A_DUPLICATE_KEY_AND_A_TYPO = """  - id: late
    streams: [orders]
    streams: [payments]
    sink: {path: data/late}
    max_records_per_partiton: 5"""


def check(tmp_path: Path, capsys: pytest.CaptureFixture[str], config: str, metadata: str = METADATA) -> dict[str, Any]:
    (tmp_path / "metadata.yaml").write_text(metadata)
    (tmp_path / "dynamic_kafka.yaml").write_text(config)
    code = main(["check", "--json", "--config", str(tmp_path / "dynamic_kafka.yaml")])
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert code == (0 if report["ok"] else 3)
    return report


def problems(report: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(p["file"].rsplit("/", 1)[-1], p["location"], p["message"]) for p in report["problems"]]


def problems_with_pipelines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], *lines: str
) -> list[tuple[str, str, str]]:
    """The problems of the project with ``lines`` added to its list of pipelines."""
    return problems(check(tmp_path, capsys, CONFIG + "".join(f"{line}\n" for line in lines)))


@pytest.fixture(autouse=True)
def password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DK_CHECK_PASSWORD", "hunter2")
    monkeypatch.delenv("DK_CHECK_UNSET", raising=False)


def test_a_valid_project_with_a_secret_reference_and_a_key_file_path_is_ok(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert problems(check(tmp_path, capsys, CONFIG)) == []


def test_unresolvable_references_of_both_files_are_listed_together(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    metadata = METADATA.replace("${env:DK_CHECK_PASSWORD}", "${env:DK_CHECK_UNSET}").replace(
        '"127.0.0.1:19092"', '"${file:missing-brokers.txt}"'
    )
    config = CONFIG.replace("data/orders", '"${envv:LAKE}/orders"')

    found = problems(check(tmp_path, capsys, config, metadata))

    assert [(file, location) for file, location, _ in found] == [
        ("dynamic_kafka.yaml", "pipelines[0].sink.path"),
        ("metadata.yaml", "clusters.east.bootstrap_servers"),
        ("metadata.yaml", "clusters.east.properties.sasl.password"),
    ]
    assert "${envv:LAKE} is not a reference dynamic-kafka knows" in found[0][2]
    assert "file 'missing-brokers.txt' cannot be read" in found[1][2]
    assert "environment variable 'DK_CHECK_UNSET' is not set" in found[2][2]


def test_a_literal_secret_is_refused_unless_the_project_opts_in(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    metadata = METADATA.replace('"${env:DK_CHECK_PASSWORD}"', '"hunter2"')

    found = problems(check(tmp_path, capsys, CONFIG, metadata))
    allowed = check(tmp_path, capsys, CONFIG + "allow_literal_secrets: true\n", metadata)

    assert [(file, location) for file, location, _ in found] == [
        ("metadata.yaml", "clusters.east.properties.sasl.password")
    ]
    assert "allow_literal_secrets: true" in found[0][2]
    assert "hunter2" not in json.dumps(found)
    assert allowed["ok"] is True


def test_two_pipelines_sharing_a_sink_or_a_state_table_are_a_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    found = problems_with_pipelines(
        tmp_path,
        capsys,
        "  - {id: orders-copy, streams: [orders], sink: {path: data/orders}}",
        "  - {id: other, streams: [orders], sink: {path: data/other}, state_path: data/orders_state}",
    )

    assert [(file, location) for file, location, _ in found] == [
        ("dynamic_kafka.yaml", "pipelines[1].sink.path"),
        ("dynamic_kafka.yaml", "pipelines[1].sink.dead_letter_path"),
        ("dynamic_kafka.yaml", "pipelines[1].state_path"),
        ("dynamic_kafka.yaml", "pipelines[2].state_path"),
    ]
    assert "is also the sink table of pipeline 'orders'" in found[0][2]
    assert "is also the state table of pipeline 'orders'" in found[3][2]


def test_a_duplicate_key_does_not_hide_the_files_other_problems(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    found = problems_with_pipelines(tmp_path, capsys, LATE_PIPELINE_WITH_A_DUPLICATE_KEY_AND_A_TYPO)

    assert found == [
        (
            "dynamic_kafka.yaml",
            "(file)",
            "duplicate key 'streams' (first at line 6); YAML would keep only the last at line 7, column 5. "
            "Remove or rename one of the two entries.",
        ),
        (
            "dynamic_kafka.yaml",
            "pipelines[1].max_records_per_partiton",
            "unknown key; did you mean `max_records_per_partition`?",
        ),
    ]


def test_an_otlp_credential_header_without_a_reference_is_a_literal_secret(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    metrics = (
        "metrics:\n  otlp:\n    endpoint: http://collector:4318\n    headers:\n"
        "      Authorization: Bearer abc123\n"
        '      X-Api-Key: "${env:DK_CHECK_UNSET}"\n'
        '      Proxy-Authorization: "Basic ${env:DK_CHECK_PASSWORD}"\n'
        "      X-Scope-OrgID: tenant-1\n"
    )

    found = problems(check(tmp_path, capsys, CONFIG + metrics))

    said = {location: message for _, location, message in found}
    assert set(said) == {"metrics.otlp.headers.Authorization", "metrics.otlp.headers.X-Api-Key"}
    assert "written as a literal" in said["metrics.otlp.headers.Authorization"]
    assert "environment variable 'DK_CHECK_UNSET' is not set" in said["metrics.otlp.headers.X-Api-Key"]
    assert "abc123" not in json.dumps(found)
