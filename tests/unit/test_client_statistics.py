"""librdkafka's statistics documents (real ones, captured from librdkafka 2.16 against a local broker) read into
per-broker figures, merged over a client's documents and over a run's clients, and turned into metric samples;
``register.consumer.metrics`` translated to ``statistics.interval.ms``."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import pytest

from dynamic_kafka.config.flink_options import translate_flink_options
from dynamic_kafka.errors import ConfigError
from dynamic_kafka.kafka.statistics import (
    ClientWatch,
    StatisticsCollector,
    collecting,
    parse_statistics,
    submit_in_context,
    watch_client,
)
from dynamic_kafka.model.client_statistics import BrokerClientStatistics, ClusterClientStatistics
from dynamic_kafka.model.summary import RunSummary
from dynamic_kafka.operations.monitoring import run_samples

DOCUMENTS = Path(__file__).parent / "librdkafka_statistics"
ADMIN = (DOCUMENTS / "admin-client.json").read_text()  # an admin client's first document: 3 requests, timed
CONSUMER = (DOCUMENTS / "consumer.json").read_text()  # an assigned consumer's: a group coordinator, topics


def test_a_document_gives_each_brokers_counters_and_round_trip_window() -> None:
    (broker,) = parse_statistics(ADMIN).items()

    name, figures = broker
    assert name == "127.0.0.1:9092/1"
    assert figures.counters == {
        "requests_sent": 3,
        "bytes_sent": 123,
        "responses_received": 3,
        "bytes_received": 898,
        "request_timeouts": 0,
        "errors": 0,
    }
    assert (figures.rtt_count, figures.rtt_sum_us, figures.rtt_p99_us) == (3, 12919, 5887)


def test_a_consumers_document_gives_the_group_coordinators_connection_and_skips_its_topics() -> None:
    found = parse_statistics(CONSUMER)

    assert set(found) == {"127.0.0.1:9092/1", "GroupCoordinator"}
    assert found["GroupCoordinator"].counters["requests_sent"] == 1
    # Only the brokers object is decoded; what it gives is what the whole document says.
    whole = json.loads(CONSUMER)["brokers"]
    assert {n: f.counters["bytes_received"] for n, f in found.items()} == {n: b["rxbytes"] for n, b in whole.items()}


def test_the_internal_broker_is_left_out_and_a_document_without_brokers_is_refused() -> None:
    document = json.loads(ADMIN)
    document["brokers"][":0/internal"] = {"name": ":0/internal", "source": "internal", "tx": 0}

    assert set(parse_statistics(json.dumps(document, indent=1))) == {"127.0.0.1:9092/1"}
    with pytest.raises(ValueError, match="brokers"):
        parse_statistics('{"name": "rdkafka#producer-1"}')


def test_a_client_keeps_its_last_counters_and_every_round_trip_window() -> None:
    watch = ClientWatch(100)
    later = json.loads(ADMIN)
    broker = later["brokers"]["127.0.0.1:9092/1"]
    broker.update(tx=5, txbytes=200, rtt={"cnt": 0, "sum": 0, "p99": 0})  # a later window without responses

    watch(ADMIN)
    watch(json.dumps(later))
    watch("not json")  # ignored: a callback must not raise

    assert watch.documents == 2
    assert watch.counters["127.0.0.1:9092/1"]["requests_sent"] == 5
    assert watch.rtt == {"127.0.0.1:9092/1": (3, 12919, 5887)}


def test_a_runs_clients_on_one_cluster_add_up_per_broker() -> None:
    collector = StatisticsCollector()
    admin, consumer, silent = (collector.watch("east", 100) for _ in range(3))
    admin(ADMIN)
    consumer(CONSUMER)
    faster = json.loads(ADMIN)
    faster["brokers"]["127.0.0.1:9092/1"]["rtt"] = {"cnt": 1, "sum": 1000, "p99": 1000}
    consumer(json.dumps(faster))  # the consumer's later document: its counters replace its first ones
    collector.watch("west", 100)  # a cluster none of whose clients reported: left out
    del silent

    (east,) = collector.result()

    assert (east.cluster_id, east.clients) == ("east", 2)
    broker, coordinator = east.brokers  # by name
    assert coordinator == BrokerClientStatistics(
        broker="GroupCoordinator", requests_sent=1, bytes_sent=68, responses_received=1, bytes_received=688
    )
    assert (broker.requests_sent, broker.bytes_sent, broker.bytes_received) == (6, 246, 1796)
    assert broker.rtt_avg_seconds == pytest.approx((12919 + 1000) / 4 * 1e-6)
    assert broker.rtt_p99_seconds == pytest.approx(5887e-6)


def test_clients_report_only_inside_a_collection_and_when_their_properties_ask() -> None:
    asked = {"statistics.interval.ms": "100"}
    assert watch_client("east", asked) is None

    with collecting() as collector:
        assert watch_client("east", {}) is None
        assert watch_client("east", {"statistics.interval.ms": "0"}) is None
        with ThreadPoolExecutor(1) as pool:
            watch = submit_in_context(pool, watch_client, "east", asked).result()  # a worker thread reports too

    assert watch is not None
    assert watch.interval_ms == 100
    watch(ADMIN)
    assert [c.cluster_id for c in collector.result()] == ["east"]


def test_register_consumer_metrics_is_translated_to_librdkafkas_statistics_interval() -> None:
    on = translate_flink_options({"register.consumer.metrics": "true"}, cluster_id="east")
    mine = translate_flink_options(
        {"register.consumer.metrics": "True", "statistics.interval.ms": "500"}, cluster_id="east"
    )
    off = translate_flink_options({"register.consumer.metrics": "false"}, cluster_id="east")

    assert (on, mine, off) == ({"statistics.interval.ms": "100"}, {"statistics.interval.ms": "500"}, {})
    with pytest.raises(ConfigError, match=r"'register\.consumer\.metrics' is 'yes'"):
        translate_flink_options({"register.consumer.metrics": "yes"}, cluster_id="east")


def test_a_runs_client_statistics_are_samples_per_cluster_and_broker() -> None:
    timed = BrokerClientStatistics(broker="b:9092/1", requests_sent=4, rtt_avg_seconds=0.002, rtt_p99_seconds=0.005)
    untimed = BrokerClientStatistics(broker="GroupCoordinator", requests_sent=1)
    statistics = (ClusterClientStatistics(cluster_id="east", clients=2, brokers=(timed, untimed)),)
    summary = RunSummary(pipeline_id="p", run_seq=1, status="empty", client_statistics=statistics)

    samples = run_samples(summary, None, finished_at=datetime.now(UTC))

    found = {(s.name, s.labels.get("broker")): s.value for s in samples if s.name.startswith("client_")}
    assert found[("client_requests_sent", "b:9092/1")] == 4
    assert found[("client_rtt_p99_seconds", "b:9092/1")] == 0.005
    assert found[("client_requests_sent", "GroupCoordinator")] == 1
    assert ("client_rtt_avg_seconds", "GroupCoordinator") not in found  # nothing timed: no value, not 0
    assert len(found) == 8 + 6
    assert not [
        s
        for s in run_samples(summary.model_copy(update={"client_statistics": ()}), None, finished_at=datetime.now(UTC))
        if s.name.startswith("client_")
    ]
