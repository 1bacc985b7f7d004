"""Every secured listener mode, end to end, from one stream: plan on the driver (librdkafka), read in Spark (the
Java client), commit the consumer group, with each cluster written in another language (PEM files, PKCS12 and JKS
stores, librdkafka's SASL keys or the Java ``sasl.jaas.config``). All clusters are listeners of the one session
broker ``secured_broker``; each has its own topic. Secrets (the SCRAM password, the stores' password, the
resolved JAAS line) must appear in no log (DEBUG on), plan, exception or process's command line.
"""

from __future__ import annotations

import contextlib
import io
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from test_secrets_and_bad_input import assert_absent, crawl

from devtools.local_kafka.security import store_password
from devtools.testing.clusters import SecuredForm, secured_properties
from devtools.testing.kafka import Record, create_topic, produce, unique_name
from devtools.testing.leaks import run_texts
from devtools.testing.pipeline import PipelineHarness, Row
from dynamic_kafka.errors import DynamicKafkaError
from dynamic_kafka.kafka.client import KafkaAdmin
from dynamic_kafka.metadata.models import ClusterMetadata
from dynamic_kafka.spark.reader import read_splits

if TYPE_CHECKING:
    from devtools.local_kafka import LocalCluster
    from devtools.local_spark_connect import ServerInfo
    from dynamic_kafka.model.summary import RunSummary

pytestmark = pytest.mark.integration

SCRAM_VAR = "DYNAMIC_KAFKA_TEST_SCRAM_PASSWORD"
# cluster id -> (listener mode, how its properties are written)
IN_PROCESS: dict[str, tuple[str, SecuredForm]] = {
    "tls-pem": ("tls", "pem"),
    "mtls-pkcs12": ("mtls", "pkcs12"),
    "mtls-jks": ("mtls", "jks"),
    "scram-jaas": ("scram", "jaas"),
    "oauth-librdkafka": ("oauthbearer", "pem"),
    "oauth-jaas": ("oauthbearer", "jaas"),
}
OVER_CONNECT: dict[str, tuple[str, SecuredForm]] = {"scram-pem": ("scram", "pem"), "mtls-pem": ("mtls", "pem")}


def _harness(folder: Path, broker: LocalCluster, modes: dict[str, tuple[str, SecuredForm]], **kwargs: Any) -> Any:
    clusters = {
        cluster_id: {
            "bootstrap_servers": broker.secure_listeners[mode],
            "properties": secured_properties(broker, mode, form=form, scram_password_ref=f"${{env:{SCRAM_VAR}}}"),
        }
        for cluster_id, (mode, form) in modes.items()
    }
    harness = PipelineHarness(folder, clusters=clusters, value={"format": "string"}, **kwargs)
    # Topics are made and filled over the broker's PLAINTEXT listener; each cluster id reads its own.
    topics = {cluster_id: unique_name(cluster_id.replace("-", "_")) for cluster_id in modes}
    expected: list[Row] = []
    for cluster_id, topic in topics.items():
        create_topic(broker.client_config(), topic, 2)
        sent = produce(broker.client_config(), topic, [Record(value=f"{cluster_id}-{i}".encode()) for i in range(3)])
        expected += [(cluster_id, topic, r.partition or 0, r.offset or 0, r.value) for r in sent]
    harness.set_streams({"orders": {cluster_id: [topic] for cluster_id, topic in topics.items()}})
    return harness, topics, sorted(expected)


def _assert_group_committed(
    harness: PipelineHarness, summary: RunSummary, topics: dict[str, str], expected: list[Row]
) -> None:
    """The run committed the pipeline's consumer group on every cluster (a failure there is only a warning, so
    the summary is asked first, for a clear message), and the group holds each partition's end offset, read back
    over the secured listener.
    """
    assert {c.cluster_id: c.error for c in summary.group_commits if not c.committed} == {}
    assert sorted(c.cluster_id for c in summary.group_commits) == sorted(topics)
    group = harness.face().config.consumer_group
    assert group is not None
    for cluster_id, topic in topics.items():
        entry = harness.clusters[cluster_id]
        cluster = ClusterMetadata(cluster_id=cluster_id, **entry)
        ends: dict[tuple[str, int], int] = {}
        for c, t, partition, offset, _ in expected:
            if c == cluster_id:
                ends[(t, partition)] = max(ends.get((t, partition), 0), offset + 1)
        with KafkaAdmin(cluster, timeout_s=30) as admin:
            committed = admin.committed_offsets(group, [(topic, 0), (topic, 1)])
        assert {k: v for k, v in committed.items() if v} == ends, cluster_id


@pytest.mark.timeout(600)
def test_one_stream_reads_every_security_mode_in_process_and_no_secret_shows(
    secured_broker: LocalCluster,
    scram_password: str,
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv(SCRAM_VAR, scram_password)
    harness, topics, expected = _harness(tmp_path, secured_broker, IN_PROCESS)
    harness.spark = lambda: spark
    caplog.set_level(logging.DEBUG)

    face = harness.face()
    plan, metadata = face.plan(), face.resolve()
    assert sum(s.stop_offset - s.start_offset for s in plan.splits) == len(expected)
    summary = face.run()

    assert summary.records == len(expected)
    assert harness.sink_rows() == expected
    _assert_group_committed(harness, summary, topics, expected)
    assert secured_broker.tls_dir is not None
    store = store_password(secured_broker.tls_dir).read_text()
    jaas = harness.clusters["scram-jaas"]["properties"]["sasl.jaas.config"].replace(f"${{env:{SCRAM_VAR}}}", "")
    outputs = run_texts(caplog, plan=plan, metadata=metadata, summary=summary)
    for secret in (scram_password, store, jaas):
        for where, text in outputs.items():
            assert secret not in text, f"a secret appears in the {where}"


@pytest.mark.timeout(600)
def test_a_missing_client_certificate_is_refused_naming_the_cluster(
    secured_broker: LocalCluster, spark: Any, tmp_path: Path
) -> None:
    """The mutual-TLS listener really requires the client's certificate: the TLS-only properties are refused."""
    harness, _topics, _expected = _harness(tmp_path, secured_broker, {"mtls-no-cert": ("mtls", "pem")})
    entry = harness.clusters["mtls-no-cert"]
    entry["properties"] = secured_properties(secured_broker, "tls")
    harness.set_cluster("mtls-no-cert", **entry)
    harness.spark = lambda: spark

    with pytest.raises(DynamicKafkaError) as raised:
        harness.face().plan()
    assert "mtls-no-cert" in str(raised.value)


@pytest.mark.timeout(600)
def test_secured_clusters_read_over_spark_connect(
    secured_broker: LocalCluster,
    scram_password: str,
    spark_connect_server: ServerInfo,
    spark_connect_ui: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The secured clusters' options travel to the server inside each query plan: the SCRAM password, the stores'
    password and the resolved JAAS line must then show in no plan ``explain`` prints, UI page (the Connect and SQL
    tabs) or server log line."""
    monkeypatch.setenv(SCRAM_VAR, scram_password)
    # pyspark dispatches its functions on one process-wide switch (see tests/conftest.py `spark_mode`): this test
    # process also holds an in-process session, so the switch is set for this Connect run and restored after it.
    monkeypatch.setenv("SPARK_CONNECT_MODE_ENABLED", "1")
    harness, topics, expected = _harness(
        tmp_path, secured_broker, OVER_CONNECT, spark_config={"remote": spark_connect_server.remote}
    )
    caplog.set_level(logging.DEBUG)

    summary = harness.face().run()

    assert summary.records == len(expected)
    assert harness.sink_rows() == expected
    _assert_group_committed(harness, summary, topics, expected)
    runner = harness.runner()  # the read of the run again: its planned splits and connections
    last = runner.store.load().last_run
    assert last is not None
    frame = read_splits(
        runner.context.spark(),
        last.plan.read_splits,
        runner.context.connections(last.plan),
        isolation_level="read_committed",
        min_partitions=None,
    )
    with io.StringIO() as shown, contextlib.redirect_stdout(shown):
        frame.explain(mode="extended")
        frame.explain(mode="formatted")
        explained = shown.getvalue()
    assert "kafka" in explained.lower()
    pages = crawl(spark_connect_ui)
    assert any("/SQL/execution" in url for url in pages), sorted(pages)[:20]
    assert secured_broker.tls_dir is not None
    texts: dict[str, str | bytes] = {
        **run_texts(caplog, summary=summary),
        "explain": explained,
        "server log": Path(spark_connect_server.log_file).read_bytes(),
        **{f"UI {url}": text for url, text in pages.items()},
    }
    assert_absent([scram_password, store_password(secured_broker.tls_dir).read_text()], texts)
