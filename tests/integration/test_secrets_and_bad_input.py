"""Secrets never leak, and bad input fails before any work: through the CLI in fresh processes and PipelineRunner.

The SASL tests use a cluster whose client listener requires SASL/PLAIN; the password reaches the pipeline only as
``${env:...}`` in the metadata file. Every output that could carry it (CLI stdout and stderr with ``-v`` logs, the
library's log records, exception chains, the state and sink tables as files and as rows) is searched for it.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import traceback
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from deltalake import DeltaTable

from devtools.local_kafka import ClusterEndpoint, LocalCluster
from devtools.testing.kafka import Record, create_topic, produce, unique_name
from devtools.testing.pipeline import PipelineHarness, Row
from dynamic_kafka.errors import DynamicKafkaError, KafkaAuthenticationError, ObjectStoreError
from dynamic_kafka.spark.reader import read_splits
from tests.support.secrets import PASSWORD_VAR, assert_absent, sasl_harness, secured_topic

if TYPE_CHECKING:
    from devtools.local_kafka import ClusterEndpoint, LocalCluster
    from devtools.local_s3 import LocalS3Server

# Exported by the local_s3 fixture (tests/conftest.py).
S3_KEY_ENV = "DYNAMIC_KAFKA_TEST_S3_KEY_ID"
S3_SECRET_ENV = "DYNAMIC_KAFKA_TEST_S3_SECRET"
pytestmark = pytest.mark.integration


def expected_rows(topic: str, records: list[Record]) -> list[Row]:
    return sorted(("secured", topic, r.partition or 0, r.offset or 0, r.value) for r in records)


def table_texts(path: Path) -> Iterator[tuple[str, bytes]]:
    """Every file of a Delta table as bytes, then every row as text (Parquet pages may be compressed)."""
    for file in sorted(path.rglob("*")):
        if file.is_file():
            yield str(file), file.read_bytes()
    yield f"{path} rows", repr(DeltaTable(str(path)).to_pyarrow_table().to_pylist()).encode()


def exception_texts(error: BaseException) -> str:
    """The formatted traceback of ``error`` with its whole chain, plus every ``repr`` and ``args`` in it."""
    texts = ["".join(traceback.format_exception(error))]
    seen: BaseException | None = error
    while seen is not None:
        texts += [repr(seen), repr(seen.args), repr(vars(seen))]
        seen = seen.__cause__ or seen.__context__
    return "\n".join(texts)


# The logger of the progress lines a run writes on stderr when it is no terminal (dynamic_kafka.cli.progress).
PROGRESS = " INFO dynamic_kafka.progress: "

CLI_COMMANDS = [
    ("-v", "plan"),
    ("-v", "plan", "--json"),
    ("-v", "run", "--json"),
    ("-v", "run"),
    ("-v", "status"),
    ("-v", "status", "--json"),
]


# --- 9. SASL secrets ---------------------------------------------------------------------------------------------


@pytest.mark.timeout(480)
def test_sasl_run_through_the_cli_works_and_the_password_appears_nowhere(
    sasl_cluster: LocalCluster, sasl_password: str, tmp_path: Path
) -> None:
    topic, sent = secured_topic(sasl_cluster, sasl_password, 5)
    harness = sasl_harness(tmp_path, sasl_cluster, topic)

    outputs: dict[str, str | bytes] = {}
    results = {}
    for command in CLI_COMMANDS:
        result = harness.cli(*command, env={PASSWORD_VAR: sasl_password})
        assert result.returncode == 0, result.stderr
        results[command] = result
        outputs[f"{' '.join(command)} stdout"] = result.stdout
        outputs[f"{' '.join(command)} stderr"] = result.stderr

    plan = json.loads(results[("-v", "plan", "--json")].stdout)
    assert sum(s["stop_offset"] - s["start_offset"] for s in plan["splits"]) == len(sent)
    first = json.loads(results[("-v", "run", "--json")].stdout)
    assert (first["status"], first["records"], first["spark_started"]) == ("committed", len(sent), True)
    assert "run 2 empty" in results[("-v", "run")].stdout
    assert json.loads(results[("-v", "status", "--json")].stdout)["total_lag"] == 0
    # -v really logged (the library's INFO lines and Spark's own output), so the search below means something.
    assert "INFO dynamic_kafka" in results[("-v", "run", "--json")].stderr
    assert harness.sink_rows() == expected_rows(topic, sent)
    outputs.update(table_texts(tmp_path / "sink_state"))
    outputs.update(table_texts(harness.sink_path))
    assert_absent([sasl_password], outputs)


@pytest.mark.timeout(480)
def test_a_wrong_password_fails_with_an_authentication_error_that_shows_no_password(
    sasl_cluster: LocalCluster,
    sasl_password: str,
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    topic, sent = secured_topic(sasl_cluster, sasl_password, 3)
    harness = sasl_harness(tmp_path, sasl_cluster, topic)
    harness.spark = lambda: spark
    monkeypatch.setenv(PASSWORD_VAR, sasl_password)
    assert harness.face().run().records == len(sent)  # a state whose partitions `status` asks the cluster about
    produce(sasl_cluster.client_config(sasl_password), topic, [Record(value=b"later")])
    wrong = "wrong-" + sasl_password[::-1]
    monkeypatch.setenv(PASSWORD_VAR, wrong)
    state_before = harness.runner().store.load().table_version

    with pytest.raises(KafkaAuthenticationError) as raised:
        harness.face().run()

    assert raised.value.cluster_id == "secured"
    assert not raised.value.retriable
    assert "sasl" in str(raised.value).lower()
    assert harness.runner().store.load().table_version == state_before
    assert harness.sink_rows() == expected_rows(topic, sent)
    outputs: dict[str, str | bytes] = {"exception": exception_texts(raised.value), "logs": caplog.text}
    for command in CLI_COMMANDS:
        result = harness.cli(*command, env={PASSWORD_VAR: wrong})
        name = " ".join(command)
        outputs[f"{name} stdout"], outputs[f"{name} stderr"] = result.stdout, result.stderr
        assert result.returncode != 0
        assert "Traceback" not in result.stderr
        if "status" in command:
            # The report is printed, naming the cluster that refuses the credentials, then status fails.
            assert "secured" in result.stdout
            continue
        if "--json" in command:
            error = json.loads(result.stderr)["error"]
            assert error["type"] == "KafkaAuthenticationError", result.stderr
            message = error["message"]
        else:
            # A run's progress lines come first on a stderr that is no terminal; the error is the last paragraph.
            message = result.stderr.rpartition("dynamic-kafka: error: ")[2]
        assert message.startswith("cluster 'secured':"), result.stderr
        assert "authentication" in message.lower(), result.stderr
    assert json.loads(outputs["-v status --json stdout"])["unreachable_clusters"] == ["secured"]
    assert harness.runner().store.load().table_version == state_before
    outputs.update(table_texts(tmp_path / "sink_state"))
    assert_absent([wrong, sasl_password], outputs)


@pytest.mark.timeout(900)
def test_a_literal_password_with_debug_logging_everywhere_and_the_read_plan_explained_leaks_nowhere(
    sasl_cluster: LocalCluster,
    sasl_password: str,
    spark: Any,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """The password written literally (quoted) in the metadata file, not as a reference: every logger at DEBUG
    during the run, and ``explain()`` of the Kafka read (Spark 4.1 shows the relation; a Spark that printed the
    connector's options would show the JAAS line) must show it nowhere."""
    topic, sent = secured_topic(sasl_cluster, sasl_password, 3)
    harness = sasl_harness(tmp_path, sasl_cluster, topic)
    literal = {**harness.clusters["secured"]}
    literal["properties"] = {**literal["properties"], "sasl.password": sasl_password}
    harness.set_cluster("secured", **literal)
    harness.spark = lambda: spark
    caplog.set_level(logging.DEBUG)
    loggers = [logging.getLogger(name) for name in list(logging.root.manager.loggerDict)] + [logging.getLogger()]
    levels = [(logger, logger.level) for logger in loggers]
    try:
        for logger in loggers:
            logger.setLevel(logging.DEBUG)
        # py4j (whose DEBUG dumps of JVM commands would carry the JAAS line), the library and Spark's client.
        debug_on = [logging.getLogger(name).isEnabledFor(logging.DEBUG) for name in DEBUG_CONTROLS]
        face = harness.face()
        plan, metadata = face.plan(), face.resolve()
        explained = explain(
            read_splits(spark, plan.splits, metadata.clusters(), isolation_level="read_committed", min_partitions=None)
        )
        summary = face.run()
    finally:
        for logger, level in levels:
            logger.setLevel(level)

    assert summary.records == len(sent)
    assert harness.sink_rows() == expected_rows(topic, sent)
    # Spark 4.1's extended explain of a Kafka batch read names the relation, not its options, so this guards a
    # future Spark that prints them; the logs and files scanned below are where the password could leak today.
    assert "Relation" in explained  # the plans really describe the Kafka read
    assert debug_on == [True] * len(DEBUG_CONTROLS)  # DEBUG really was on
    captured = capfd.readouterr()
    outputs: dict[str, str | bytes] = {
        "explain": explained,
        "logs": caplog.text,
        "log records": repr([(r.msg, r.args) for r in caplog.records]),
        "stdout": captured.out,
        "stderr": captured.err,
        "summary": repr(summary),
        "metadata": repr(metadata),
        "plan": repr(plan),
    }
    outputs.update(table_texts(tmp_path / "sink_state"))
    outputs.update(table_texts(harness.sink_path))
    assert_absent([sasl_password], outputs)


DEBUG_CONTROLS = ("py4j.clientserver", "py4j.java_gateway", "dynamic_kafka", "pyspark", "confluent_kafka")


def explain(frame: Any) -> str:
    """Spark's extended explain text (parsed, analyzed, optimized and physical plans) of a DataFrame."""
    return str(frame._jdf.queryExecution().toString())


# --- 10. bad input -----------------------------------------------------------------------------------------------

Mutation = Callable[[PipelineHarness, str], object]


def write_config(text: str) -> Mutation:
    return lambda h, _topic: h.config_path.write_text(text)


def write_metadata(text: str) -> Mutation:
    return lambda h, _topic: h.metadata_path.write_text(text)


BAD_INPUT_CASES: list[tuple[str, Mutation, str, list[str]]] = [
    (
        "malformed-yaml-config",
        write_config("metadata_service: {type: file, path: metadata.yaml}\npipelines:\n  - id: p\n    streams: [a\n"),
        "config",
        ["malformed YAML", "line"],
    ),
    (
        "malformed-yaml-metadata",
        write_metadata("clusters:\n  east: {bootstrap_servers: x\nstreams: {}\n"),
        "metadata",
        ["malformed YAML", "line"],
    ),
    (
        "unknown-pipeline-key",
        lambda h, _t: h.configure(max_records_per_partiton=5),
        "config",
        ["pipelines[0].max_records_per_partiton", "unknown key"],
    ),
    (
        "unknown-cluster-key",
        lambda h, _t: h.set_cluster("east", **h.clusters["east"], bootstrap_server="x"),
        "metadata",
        ["clusters.east.bootstrap_server", "unknown key"],
    ),
    ("unknown-stream", lambda h, _t: h.configure(streams=["payments"]), "config", ["payments", "`streams`"]),
    (
        "invalid-regex",
        lambda h, _t: h.configure(streams=None, stream_pattern="orders-("),
        "config",
        ["pipelines[0].stream_pattern", "invalid regular expression"],
    ),
    (
        "undefined-cluster",
        lambda h, t: h.set_streams({"orders": {"north": [t]}}),
        "metadata",
        ["streams: ", "'north'", "`clusters`"],
    ),
    (
        "negative-offset",
        lambda h, t: h.configure(starting_offsets={"specific": {"offsets": {t: {0: -5}}}}),
        "config",
        ["pipelines[0].starting_offsets", "must be at least 0", "-5"],
    ),
    (
        "negative-offset-cluster-override",
        lambda h, t: h.set_cluster(
            "east", **h.clusters["east"], starting_offsets={"specific": {"offsets": {t: {0: -1}}}}
        ),
        "metadata",
        ["clusters.east.starting_offsets", "must be at least 0"],
    ),
]


@pytest.mark.parametrize(
    ("mutate", "culprit", "expected"),
    [c[1:] for c in BAD_INPUT_CASES],
    ids=[c[0] for c in BAD_INPUT_CASES],
)
def test_bad_input_fails_fast_with_a_clear_message_and_writes_nothing(
    kafka_clusters: dict[str, ClusterEndpoint], tmp_path: Path, mutate: Mutation, culprit: str, expected: list[str]
) -> None:
    topic = unique_name("never-read")
    harness = PipelineHarness(tmp_path, clusters={"east": kafka_clusters["east"].bootstrap_servers})
    harness.set_streams({"orders": {"east": [topic]}})
    mutate(harness, topic)
    files_before = set(tmp_path.rglob("*"))

    result = harness.cli("run")

    assert result.returncode != 0
    path = harness.config_path if culprit == "config" else harness.metadata_path
    # A problem found once the run started follows its progress lines (stderr is no terminal here).
    error = "".join(line for line in result.stderr.splitlines(keepends=True) if PROGRESS not in line)
    assert error.startswith(f"dynamic-kafka: error: {path}: "), result.stderr
    for fragment in expected:
        assert fragment in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    # Nothing beside the tables either: the run lock lives in the machine's run-lock folder.
    assert set(tmp_path.rglob("*")) == files_before


# --- S3 secrets ----------------------------------------------------------------------------------------------------


def s3_client(local_s3: LocalS3Server) -> Any:
    """A boto3 S3 client signing with the local server's own access key."""
    import boto3

    env = local_s3.environment()
    return boto3.client(
        "s3",
        endpoint_url=local_s3.endpoint,
        region_name=env["AWS_REGION"],
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
    )


def s3_table_texts(local_s3: LocalS3Server, prefix: str) -> dict[str, str | bytes]:
    """Every object under ``prefix`` of bucket ``lake`` (Delta logs, checkpoints, Parquet files) as bytes."""
    client = s3_client(local_s3)
    texts: dict[str, str | bytes] = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket="lake", Prefix=prefix):
        for item in page.get("Contents", []):
            texts[item["Key"]] = client.get_object(Bucket="lake", Key=item["Key"])["Body"].read()
    assert any("_delta_log" in key for key in texts), f"nothing under s3://lake/{prefix}"
    return texts


@pytest.mark.timeout(1800)
def test_s3_keys_appear_in_no_output_log_plan_state_row_or_object(
    kafka_clusters: dict[str, ClusterEndpoint],
    spark: Any,
    s3_storage: dict[str, Any],
    local_s3: LocalS3Server,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    east = kafka_clusters["east"].bootstrap_servers
    topic = unique_name("s3-secret")
    create_topic(east, topic, 1)
    sent = produce(east, topic, [Record(value=f"v{i}".encode(), key=b"k") for i in range(4)])
    prefix = f"secrets-{uuid.uuid4().hex[:8]}"
    harness = PipelineHarness(
        tmp_path,
        clusters={"east": east},
        spark=lambda: spark,
        sink={"path": f"s3://lake/{prefix}/orders"},
        storage=s3_storage,
    )
    harness.set_streams({"orders": {"east": [topic]}})
    secrets = [os.environ[S3_SECRET_ENV], os.environ[S3_KEY_ENV]]

    outputs: dict[str, str | bytes] = {}
    for command in [("-v", "plan", "--json"), ("-v", "status"), ("-v", "status", "--json")]:
        result = harness.cli(*command)
        assert result.returncode == 0, result.stderr
        outputs[f"{' '.join(command)} output"] = result.stdout + result.stderr
    summary = harness.face().run()  # in process: the shared Spark session gets the bucket's settings live
    assert summary.records == len(sent)
    sink = harness.face().config.sink_table
    plan = spark.read.format("delta").load(sink.spark_uri).where("offset > 1")._jdf.queryExecution().toString()
    assert "s3a://lake/" in plan
    outputs["explain(extended)"] = plan
    outputs["repr(pipeline)"] = repr(harness.face().config) + str(harness.face().config.model_dump())
    outputs["logs"] = caplog.text
    outputs.update(s3_table_texts(local_s3, prefix))
    state = harness.runner().store
    outputs["state rows"] = repr(state.run_history()) + repr(state.load())
    assert_absent(secrets, outputs)

    # An error from the store (a missing bucket) names the location, never a key.
    harness.configure(sink={"path": f"s3://missing-{prefix}/orders"})
    with pytest.raises(ObjectStoreError) as caught:
        harness.face().run()
    assert_absent(secrets, {"error": exception_texts(caught.value)})


@pytest.mark.parametrize("wrong", ["secret", "key_id"])
def test_wrong_s3_credentials_fail_before_anything_is_written_and_leak_nothing(
    wrong: str,
    kafka_clusters: dict[str, ClusterEndpoint],
    s3_storage: dict[str, Any],
    local_s3: LocalS3Server,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The local S3 server checks signatures as S3 does: a wrong secret (SignatureDoesNotMatch) or an unknown key
    id (InvalidAccessKeyId) is refused by the first read, before a plan, a state row or a sink file exists."""
    caplog.set_level(logging.DEBUG)
    east = kafka_clusters["east"].bootstrap_servers
    topic = unique_name("s3-auth")
    create_topic(east, topic, 1)
    produce(east, topic, [Record(value=b"v", key=b"k")])
    prefix = f"auth-{uuid.uuid4().hex[:8]}"
    bad_value = f"wrong-{uuid.uuid4().hex}" if wrong == "secret" else f"AKIA{uuid.uuid4().hex[:16].upper()}"
    monkeypatch.setenv("DYNAMIC_KAFKA_TEST_WRONG_S3", bad_value)
    field = "secret_access_key" if wrong == "secret" else "access_key_id"
    storage = {**s3_storage, field: "${env:DYNAMIC_KAFKA_TEST_WRONG_S3}"}
    harness = PipelineHarness(
        tmp_path, clusters={"east": east}, sink={"path": f"s3://lake/{prefix}/orders"}, storage=storage
    )
    harness.set_streams({"orders": {"east": [topic]}})
    secrets = [bad_value, os.environ[S3_SECRET_ENV]]

    def assert_refused(error: ObjectStoreError, doing: str, table: str) -> None:
        """Says who, where and what to fix: the pipeline, the table, the endpoint, the storage credentials."""
        said = (
            f"{doing}: the object store at {local_s3.endpoint} refused the credentials for s3://lake/{prefix}/{table}. "
            "Check storage.access_key_id / secret_access_key (or the AWS_* environment variables)"
        )
        assert said in str(error), str(error)
        assert not error.retriable

    # State beside the sink on S3: reading the state is refused.
    with pytest.raises(ObjectStoreError) as on_state:
        harness.face().run()
    assert_refused(on_state.value, "reading the state of pipeline 'p'", "orders_state")

    # State on local disk, the sink on S3: the first read of the sink refuses it, before the plan is written.
    harness.configure(state_path="state")
    with pytest.raises(ObjectStoreError) as on_sink:
        harness.face().run()
    assert_refused(on_sink.value, f"pipeline 'p', reading the Delta log of s3://lake/{prefix}/orders", "orders")
    assert harness.runner().store.load().table_version is None, "a plan was written"

    cli = harness.cli("-v", "run")
    assert cli.returncode == 1, cli.stderr
    assert "refused the credentials" in cli.stderr
    assert "Traceback" not in cli.stderr

    assert "Contents" not in s3_client(local_s3).list_objects_v2(Bucket="lake", Prefix=prefix), "S3 was written"
    assert_absent(
        secrets,
        {
            "state error": exception_texts(on_state.value),
            "sink error": exception_texts(on_sink.value),
            "logs": caplog.text,
            "cli output": cli.stdout + cli.stderr,
        },
    )


# --- 9b. SASL secrets over Spark Connect -------------------------------------------------------------------------


@pytest.mark.timeout(600)
def test_over_spark_connect_the_password_appears_in_no_log_error_plan_ui_page_or_dagster_metadata(
    sasl_cluster: LocalCluster,
    sasl_password: str,
    spark_connect_server: Any,
    spark_connect_ui: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The credentials travel to the server as Kafka reader options inside each query plan: the server must keep
    them out of its log, its UI (the Connect tab lists statements, the SQL tab plans) and the plans ``explain``
    shows, and the client out of its errors and the run's Dagster metadata."""
    from dynamic_kafka.dagster.errors import failure_metadata
    from dynamic_kafka.dagster.metadata import summary_metadata
    from dynamic_kafka.spark.reader import read_splits

    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("SPARK_CONNECT_MODE_ENABLED", "1")  # this process uses Connect (see conftest's spark_mode)
    topic, sent = secured_topic(sasl_cluster, sasl_password, 5)
    harness = sasl_harness(tmp_path, sasl_cluster, topic)
    harness.spark_config = {"remote": spark_connect_server.remote}
    harness.configure()  # rewrites the config with the `spark` section
    outputs: dict[str, str | bytes] = {}
    for command in [("-v", "run", "--json"), ("-v", "run")]:
        result = harness.cli(*command, env={PASSWORD_VAR: sasl_password})
        assert result.returncode == 0, result.stderr
        outputs[f"{' '.join(command)} stdout"], outputs[f"{' '.join(command)} stderr"] = result.stdout, result.stderr
    first = json.loads(outputs["-v run --json stdout"])
    assert (first["status"], first["records"], first["spark_started"]) == ("committed", len(sent), True)
    assert harness.sink_rows() == expected_rows(topic, sent)

    # In this process: a run (for its Dagster metadata), then the run's read explained, then a read with a wrong
    # password that fails in the server.
    monkeypatch.setenv(PASSWORD_VAR, sasl_password)
    produce(sasl_cluster.client_config(sasl_password), topic, [Record(value=b"later")])
    summary = harness.face().run()
    assert summary.records == 1
    outputs["dagster metadata"] = repr(summary_metadata(summary))
    runner = harness.runner()  # the read of the run again: its planned splits and connections
    last = runner.store.load().last_run
    assert last is not None
    plan = last.plan
    spark = runner.context.spark()
    frame = read_splits(
        spark, plan.read_splits, runner.context.connections(plan), isolation_level="read_committed", min_partitions=None
    )
    with io.StringIO() as shown, contextlib.redirect_stdout(shown):
        frame.explain(mode="extended")
        frame.explain(mode="formatted")
        outputs["explain"] = shown.getvalue()
    assert "kafka" in outputs["explain"].lower()
    wrong = "wrong-" + sasl_password[::-1]
    monkeypatch.setenv(PASSWORD_VAR, wrong)
    bad = harness.runner()
    bad_frame = read_splits(
        spark, plan.read_splits, bad.context.connections(plan), isolation_level="read_committed", min_partitions=None
    )
    from dynamic_kafka.sink.tables import spark_failures

    with pytest.raises(DynamicKafkaError) as raised, spark_failures("reading with a wrong password"):
        bad_frame.count()
    outputs["exception"] = exception_texts(raised.value)
    outputs["dagster failure metadata"] = repr(failure_metadata(raised.value, "p"))
    outputs["client logs"] = caplog.text

    outputs["server log"] = Path(spark_connect_server.log_file).read_bytes()
    pages = crawl(spark_connect_ui)
    assert any("/connect" in url for url in pages), sorted(pages)[:20]
    assert any("/SQL/execution" in url for url in pages), sorted(pages)[:20]
    assert any("kafka" in text.lower() for text in pages.values()), "the UI shows no Kafka read: crawl missed it"
    outputs.update({f"UI {url}": text for url, text in pages.items()})
    outputs.update(table_texts(tmp_path / "sink_state"))
    assert_absent([sasl_password, wrong], outputs)


def crawl(root: str, limit: int = 400) -> dict[str, str]:
    """Every page of the Spark UI at ``root`` reachable by its links (same origin), plus the REST API's SQL
    executions with their plans and the environment, as text."""
    import re
    import urllib.error
    import urllib.request
    from html import unescape

    pages: dict[str, str] = {}

    def get(url: str) -> str | None:
        try:
            with urllib.request.urlopen(url, timeout=30) as response:  # noqa: S310  # loopback test server
                return str(response.read().decode("utf-8", "replace"))
        except (urllib.error.URLError, TimeoutError):
            return None

    queue = [f"{root}/", f"{root}/connect/", f"{root}/SQL/", f"{root}/environment/", f"{root}/jobs/"]
    apps = get(f"{root}/api/v1/applications")
    for app in json.loads(apps or "[]"):
        for api in ("sql?details=true&planDescription=true", "environment", "jobs", "stages?details=true"):
            text = get(f"{root}/api/v1/applications/{app['id']}/{api}")
            if text is not None:
                pages[f"{root}/api/v1/applications/{app['id']}/{api}"] = text
    while queue and len(pages) < limit:
        url = queue.pop(0)
        if url in pages:
            continue
        text = get(url)
        if text is None:
            continue
        pages[url] = text
        for link in re.findall(r'href="([^"#]+)"', text):
            link = unescape(link)
            if link.startswith("/") and not link.startswith("//"):
                link = root + link
            if link.startswith(root) and "/static/" not in link and "kill" not in link and link not in pages:
                queue.append(link)
    return pages
