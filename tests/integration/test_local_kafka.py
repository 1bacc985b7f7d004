"""Real local Kafka clusters: identity, idempotent start, restart on kept data, SASL/PLAIN, startup failures."""

from __future__ import annotations

import json
import stat
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from devtools.cli.main import main
from devtools.errors import LocalKafkaError
from devtools.local_kafka import ClusterEndpoint, LocalCluster, cluster_status, start_clusters, stop_clusters
from devtools.testing.clusters import distinct_free_ports
from devtools.testing.kafka import Record, create_topic, produce, unique_name, wait_for

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.integration


def _started_here(clusters: dict[str, ClusterEndpoint]) -> dict[str, LocalCluster]:
    local = {name: c for name, c in clusters.items() if isinstance(c, LocalCluster)}
    if len(local) != len(clusters):
        pytest.skip("needs clusters started by this session, not brought by $DYNAMIC_KAFKA_TEST_CLUSTERS")
    return local


def _consume_values(config: dict[str, Any], topic: str, count: int) -> list[bytes | None]:
    consumer = Consumer(
        {
            **config,
            "group.id": unique_name("g"),
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([topic])
    values: list[bytes | None] = []
    try:

        def got_all() -> bool:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                values.append(msg.value())
            return len(values) >= count

        wait_for(got_all, timeout_s=60, interval_s=0, what=f"{count} records from {topic}")
    finally:
        consumer.close()
    return values


def test_each_cluster_has_its_own_kafka_cluster_id(kafka_clusters: dict[str, ClusterEndpoint]) -> None:
    admins = {name: AdminClient(c.client_config()) for name, c in kafka_clusters.items()}
    reported = {name: admin.describe_cluster(request_timeout=30).result().cluster_id for name, admin in admins.items()}
    assert len(set(reported.values())) == len(reported) >= 2
    for name, cluster in kafka_clusters.items():
        if isinstance(cluster, LocalCluster):
            assert reported[name] == cluster.cluster_id


def test_up_on_running_clusters_changes_nothing(kafka_clusters: dict[str, ClusterEndpoint]) -> None:
    local = _started_here(kafka_clusters)
    base_dir = next(iter(local.values())).cluster_dir.parent
    again = start_clusters([(c.name, c.port) for c in local.values()], base_dir=base_dir)
    assert again == local
    statuses = {s.cluster.name: s.running for s in cluster_status(base_dir)}
    assert statuses == dict.fromkeys(local, True)


def test_up_refuses_a_running_cluster_with_other_settings(kafka_clusters: dict[str, ClusterEndpoint]) -> None:
    east = _started_here(kafka_clusters)["east"]
    with pytest.raises(LocalKafkaError, match=r"'east' already runs with other settings .*down east"):
        start_clusters([("east", east.port + 1)], base_dir=east.cluster_dir.parent)
    with pytest.raises(LocalKafkaError, match=r"'east' already runs with other settings"):
        start_clusters([("east", east.port)], base_dir=east.cluster_dir.parent, sasl_plain=("ingest", "pw"))


@pytest.mark.timeout(300)
def test_cli_down_keeps_data_and_up_restarts_the_same_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (port,) = distinct_free_ports(1)
    base = ["--base-dir", str(tmp_path)]
    try:
        assert main(["local-kafka", "up", f"solo:{port}", "--json", *base]) == 0
        assert json.loads(capsys.readouterr().out) == {"solo": f"127.0.0.1:{port}"}
        (before,) = cluster_status(tmp_path)
        topic = unique_name("kept")
        create_topic(before.cluster.bootstrap_servers, topic, 1)
        produce(before.cluster.bootstrap_servers, topic, [Record(value=b"a"), Record(value=b"b")])

        assert main(["local-kafka", "down", "solo", *base]) == 0
        assert capsys.readouterr().out == "solo\tstopped\n"
        (stopped,) = cluster_status(tmp_path)
        assert not stopped.running

        assert main(["local-kafka", "up", f"solo:{port}", *base]) == 0
        assert capsys.readouterr().out == f"solo\t127.0.0.1:{port}\n"
        (after,) = cluster_status(tmp_path)
        assert after.running
        assert after.cluster.cluster_id == before.cluster.cluster_id
        assert after.cluster.pid != before.cluster.pid
        assert _consume_values(after.cluster.client_config(), topic, 2) == [b"a", b"b"]
    finally:
        stop_clusters(base_dir=tmp_path, purge=True)
    assert not (tmp_path / "solo").exists()


@pytest.mark.timeout(300)
def test_a_broker_that_misses_its_deadline_is_stopped_and_reported_with_its_log(tmp_path: Path) -> None:
    (port,) = distinct_free_ports(1)
    with pytest.raises(LocalKafkaError, match=r"'slow' at 127\.0\.0\.1:\d+ did not come up") as info:
        start_clusters([("slow", port)], base_dir=tmp_path, start_timeout_s=0.5)
    assert f"Last lines of {tmp_path / 'slow' / 'kafka.log'}:" in str(info.value)
    (status,) = cluster_status(tmp_path)
    assert not status.running
    stop_clusters(base_dir=tmp_path, purge=True)


def test_sasl_cluster_serves_clients_with_the_right_password(sasl_cluster: LocalCluster, sasl_password: str) -> None:
    config = sasl_cluster.client_config(sasl_password)
    topic = unique_name("sasl")
    create_topic(config, topic, 1)
    # A transaction commit makes the broker send markers to itself over its SASL inter-broker listener.
    producer = Producer({**config, "transactional.id": unique_name("tx")})
    producer.init_transactions(30)
    producer.begin_transaction()
    for value in (b"one", b"two", b"three"):
        producer.produce(topic, value=value)
    producer.commit_transaction(30)
    assert _consume_values(config, topic, 3) == [b"one", b"two", b"three"]


def test_sasl_cluster_rejects_a_wrong_password_with_an_authentication_error(sasl_cluster: LocalCluster) -> None:
    errors: list[KafkaError] = []
    config = {**sasl_cluster.client_config("wrong-password"), "error_cb": errors.append}
    admin = AdminClient(config)

    def authentication_error() -> KafkaError | None:
        admin.poll(0.1)
        return next((e for e in errors if e.code() == KafkaError._AUTHENTICATION), None)

    error = wait_for(authentication_error, timeout_s=30, what="an authentication error")
    assert "Invalid username or password" in error.str()
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=1)


def test_sasl_password_is_kept_only_in_the_owner_only_broker_config(
    sasl_cluster: LocalCluster, sasl_password: str
) -> None:
    assert sasl_cluster.sasl_user == "ingest"
    props = sasl_cluster.cluster_dir / "server.properties"
    assert stat.S_IMODE(props.stat().st_mode) == 0o600
    assert sasl_password in props.read_text()
    for path in sasl_cluster.cluster_dir.iterdir():
        if path.is_file() and path != props:
            assert sasl_password not in path.read_text(errors="replace"), path
    assert sasl_password not in repr(sasl_cluster)
