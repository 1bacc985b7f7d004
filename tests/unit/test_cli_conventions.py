"""The command line's conventions, through the CLI as a subprocess, offline (a broker address where nothing listens
fails at once): distinct exit codes, ``--pipeline`` optional with one pipeline and ``--all``, a usage error for an
unknown pipeline id, ``init``, shell completion, examples in the help, tables sized to their content.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import jsonschema
import pytest
import yaml

from dynamic_kafka import schemas
from dynamic_kafka.cli.exit_codes import ExitCode
from dynamic_kafka.cli.init import scaffold
from dynamic_kafka.cli.pipeline import format_plan
from dynamic_kafka.model.plan import Plan, Split

METADATA = (
    '{clusters: {east: {bootstrap_servers: "127.0.0.1:1"}}, '
    "streams: {orders: {east: [orders]}, payments: {east: [payments]}}}"
)
TWO_PIPELINES = """
metadata_service: {type: file, path: metadata.yaml}
pipelines:
  - {id: orders, streams: [orders], sink: {path: data/orders}, kafka_timeout_seconds: 1}
  - {id: payments, streams: [payments], sink: {path: data/payments}, kafka_timeout_seconds: 1}
"""
ONE_PIPELINE = """
metadata_service: {type: file, path: metadata.yaml}
pipelines:
  - {id: orders, streams: [orders], sink: {path: data/orders}, kafka_timeout_seconds: 1}
"""
OPERATIONS = Path(__file__).parents[2] / "docs" / "operations.md"


def project(folder: Path, config: str) -> Path:
    (folder / "metadata.yaml").write_text(METADATA)
    path = folder / "dynamic_kafka.yaml"
    path.write_text(config)
    return path


@pytest.fixture
def two(tmp_path: Path) -> Path:
    return project(tmp_path, TWO_PIPELINES)


def cli(
    *args: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "dynamic_kafka.cli.main", *map(str, args)]
    environment = {**os.environ, **(env or {})}
    environment.pop("DYNAMIC_KAFKA_CONFIG", None)
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=cwd, env=environment, check=False)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def error_of(done: subprocess.CompletedProcess[str]) -> dict[str, object]:
    error: dict[str, object] = json.loads(done.stderr)["error"]
    return error


def test_each_exit_code_has_one_meaning_listed_in_the_reference() -> None:
    rows = dict(re.findall(r"^\| `(\d+)` \| (.+) \|$", OPERATIONS.read_text(), flags=re.MULTILINE))

    assert {int(code) for code in rows} == {int(code) for code in ExitCode}
    assert len({int(code) for code in ExitCode}) == len(ExitCode)


@pytest.mark.parametrize("json_output", [False, True], ids=["plain", "json"])
def test_an_unknown_pipeline_id_is_a_usage_error_naming_the_file_the_closest_id_and_every_id(
    two: Path, json_output: bool
) -> None:
    done = cli("plan", "--config", two, "--pipeline", "ordrs", *(["--json"] if json_output else []))

    assert done.returncode == ExitCode.USAGE
    said = f"{two}: no pipeline 'ordrs'; did you mean 'orders'? Configured pipelines: orders, payments."
    if json_output:
        assert error_of(done) == {
            "type": "UsageError",
            "message": said,
            "hint": "Pass one of them with --pipeline.",
            "retriable": False,
        }
    else:
        assert done.stderr == f"dynamic-kafka: error: {said} Pass one of them with --pipeline.\n"


@pytest.mark.parametrize("json_output", [False, True], ids=["plain", "json"])
def test_a_mistyped_command_or_option_gets_a_did_you_mean(json_output: bool) -> None:
    flags = ["--json"] if json_output else []

    command = cli("plna", *flags)
    option = cli("status", "--pipelines", "orders", *flags)

    assert (command.returncode, option.returncode) == (ExitCode.USAGE, ExitCode.USAGE)
    said = [str(error_of(done)["message"]) if json_output else done.stderr.rstrip() for done in (command, option)]
    # Python 3.12 and later list the choices without quotes.
    assert "invalid choice: 'plna' (choose from " in said[0]
    assert said[0].endswith("'spark-server'); did you mean 'plan'?") or said[0].endswith(
        "spark-server); did you mean 'plan'?"
    )
    assert said[1].endswith("unrecognized arguments: --pipelines orders; did you mean '--pipeline'?")


@pytest.mark.parametrize("json_output", [False, True], ids=["plain", "json"])
def test_without_pipeline_a_config_of_several_asks_which(two: Path, json_output: bool) -> None:
    done = cli("run", *(["--json"] if json_output else []), cwd=two.parent)

    assert done.returncode == ExitCode.USAGE
    said = "dynamic_kafka.yaml: the config has 2 pipelines (orders, payments): say which with --pipeline ID or --all."
    assert (error_of(done)["message"] if json_output else done.stderr) == (
        said if json_output else f"dynamic-kafka: error: {said}\n"
    )


def test_both_pipeline_and_all_is_a_usage_error(two: Path) -> None:
    both = cli("status", "--all", "--pipeline", "orders", "--config", two, "--json")

    assert both.returncode == ExitCode.USAGE
    assert "argument --pipeline: not allowed with argument --all" in str(error_of(both)["message"])


@pytest.mark.parametrize("json_output", [False, True], ids=["plain", "json"])
def test_the_only_pipeline_needs_no_pipeline_option(tmp_path: Path, json_output: bool) -> None:
    project(tmp_path, ONE_PIPELINE)

    done = cli("status", *(["--json"] if json_output else []), cwd=tmp_path)

    # Its brokers do not answer: the report is printed, and the command fails (the lag is unknown).
    assert done.returncode == ExitCode.FAILED
    if json_output:
        assert json.loads(done.stdout)["pipeline_id"] == "orders"
        assert error_of(done)["type"] == "ClusterUnreachableError"
    else:
        assert done.stdout.startswith("pipeline orders has never run")
        # stderr says the lag is unknown: stdout must not say there is none.
        assert "lag is unknown" in done.stderr
        assert "no lag" not in done.stdout


@pytest.mark.parametrize("json_output", [False, True], ids=["plain", "json"])
def test_check_with_problems_exits_3(tmp_path: Path, json_output: bool) -> None:
    config = project(tmp_path, ONE_PIPELINE.replace("[orders]", "[ordrs]"))

    done = cli("check", "--config", config, *(["--json"] if json_output else []))

    assert done.returncode == ExitCode.CHECK_FAILED
    if json_output:
        assert json.loads(done.stdout)["ok"] is False
    else:
        assert "unknown stream 'ordrs'; did you mean 'orders'?" in done.stdout


def test_health_all_runs_every_pipeline_and_a_failed_verdict_exits_3(two: Path) -> None:
    plain = cli("health", "--all", "--config", two)
    as_json = cli("health", "--all", "--config", two, "--json")

    assert (plain.returncode, as_json.returncode) == (ExitCode.CHECK_FAILED, ExitCode.CHECK_FAILED)
    assert re.findall(r"^pipeline (\w+): 1 check\(s\) failed", plain.stdout, flags=re.MULTILINE) == [
        "orders",
        "payments",
    ]
    reports = json.loads(as_json.stdout)
    assert [(r["pipeline_id"], all(v["passed"] for v in r["verdicts"])) for r in reports] == [
        ("orders", False),
        ("payments", False),
    ]
    assert as_json.stderr == ""


def test_status_all_reports_each_pipeline_and_each_failure(two: Path) -> None:
    plain = cli("status", "--all", "--config", two)
    as_json = cli("status", "--all", "--config", two, "--json")

    assert (plain.returncode, as_json.returncode) == (ExitCode.FAILED, ExitCode.FAILED)
    assert [line.split()[1] for line in plain.stdout.splitlines()] == ["orders", "payments"]
    failed = re.findall(r"^dynamic-kafka: error: pipeline (\w+): cluster 'east': no answer", plain.stderr, re.MULTILINE)
    assert failed == ["orders", "payments"]
    documents = json.loads(as_json.stdout)
    assert [(d["pipeline_id"], d["error"]["type"]) for d in documents] == [
        ("orders", "ClusterUnreachableError"),
        ("payments", "ClusterUnreachableError"),
    ]


@pytest.mark.parametrize("json_output", [False, True], ids=["plain", "json"])
def test_init_writes_a_project_that_check_passes_and_never_overwrites(tmp_path: Path, json_output: bool) -> None:
    folder = tmp_path / "new-project"
    flags = ["--json"] if json_output else []

    made = cli("init", folder, *flags)

    assert made.returncode == ExitCode.OK, made.stderr
    config, metadata = folder / "dynamic_kafka.yaml", folder / "metadata.yaml"
    if json_output:
        assert json.loads(made.stdout) == {"files": [str(config), str(metadata)]}
    else:
        assert f"dynamic-kafka check --config {config}" in made.stdout
    assert "# " in config.read_text()
    assert "# " in metadata.read_text()
    checked = cli("check", *flags, cwd=folder)
    assert checked.returncode == ExitCode.OK, checked.stdout
    if json_output:
        assert json.loads(checked.stdout)["pipelines"] == ["events"]

    config.write_text(config.read_text() + "# mine\n")
    again = cli("init", folder, *flags)

    assert again.returncode == ExitCode.FAILED
    said = f"{config} and {metadata} exist already: init writes nothing over a file, so nothing was written."
    assert said in (str(error_of(again)["message"]) if json_output else again.stderr)
    assert config.read_text().endswith("# mine\n")


def test_the_files_init_writes_are_valid_for_the_editor_schemas_they_name(tmp_path: Path) -> None:
    for written in scaffold(tmp_path):
        text = written.read_text()
        schema = Path(text.splitlines()[0].removeprefix("# yaml-language-server: $schema="))
        assert schema.is_file()
        jsonschema.Draft202012Validator(schemas.shipped(schema.name)).validate(yaml.safe_load(text))


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("dynamic-kafka pl", ["plan"]),
        ("dynamic-kafka run --pipeline ", ["orders", "payments"]),
    ],
)
def test_shell_completion_completes_commands_and_pipeline_ids(
    two: Path, tmp_path: Path, line: str, expected: list[str]
) -> None:
    out = tmp_path / "completions"
    env = {
        "_ARGCOMPLETE": "1",
        "_ARGCOMPLETE_IFS": "\n",
        "COMP_LINE": line,
        "COMP_POINT": str(len(line)),
        "_ARGCOMPLETE_STDOUT_FILENAME": str(out),
    }

    done = cli(cwd=two.parent, env=env)

    assert done.returncode == 0, done.stderr
    assert [c.strip() for c in out.read_text().splitlines()] == expected


def test_help_shows_examples_and_the_exit_codes() -> None:
    top = cli("--help")
    run = cli("run", "--help")

    assert "  3   a check failed" in top.stdout
    assert 'eval "$(register-python-argcomplete dynamic-kafka)"' in top.stdout
    assert "examples:\n  dynamic-kafka run " in run.stdout
    assert "  dynamic-kafka run --all --json" in run.stdout


def test_tables_are_as_wide_as_their_content() -> None:
    long_topic = "orders.europe-west.checkout-completed.v2"
    splits = tuple(
        Split(
            cluster_id=cluster,
            topic=topic,
            partition=partition,
            start_offset=0,
            stop_offset=stop,
            stream_ids=("orders",),
            bootstrap_servers="b:9092",
        )
        for cluster, topic, partition, stop in [("eu", long_topic, 0, 12), ("us-central", "o", 11, 1_234_567_890)]
    )

    plan = Plan(pipeline_id="p", run_seq=1, splits=splits, planned_at=datetime(2026, 12, 7, tzinfo=UTC))

    lines = format_plan(plan).splitlines()[1:]

    assert lines == [
        "  cluster     topic                                     part  start        stop     records  stream",
        "  eu          orders.europe-west.checkout-completed.v2     0      0          12          12  orders",
        "  us-central  o                                           11      0  1234567890  1234567890  orders",
    ]
