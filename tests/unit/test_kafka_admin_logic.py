"""KafkaAdmin's argument handling and the broker snapshot's assembly and failure policy, without a broker.

The snapshot tests replace KafkaAdmin (our own interface) with a fake; the real client is covered by
tests/integration/test_kafka_admin.py.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from dynamic_kafka import initializers as offsets
from dynamic_kafka.config.models import PipelineConfig
from dynamic_kafka.errors import (
    ClusterUnreachableError,
    ConfigError,
    KafkaAuthenticationError,
    KafkaClientError,
)
from dynamic_kafka.kafka import ClusterRequest, KafkaAdmin, TopicDescription, take_broker_snapshot
from dynamic_kafka.kafka import snapshot as snapshot_module
from dynamic_kafka.kafka.client import OffsetAnswer, _offset_spec_value
from dynamic_kafka.kafka.connection import _ErrorSink
from dynamic_kafka.kafka.epochs import CommittedPosition, outcome
from dynamic_kafka.kafka.requests import run_requests
from dynamic_kafka.metadata.memory import InMemoryMetadataService
from dynamic_kafka.metadata.models import ClusterMetadata, KafkaStream, metadata_fingerprint
from dynamic_kafka.metadata.snapshot import MetadataSnapshot
from dynamic_kafka.model.snapshots import PartitionOffsets, PartitionState, StateSnapshot

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping
    from types import TracebackType

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
# Nothing listens there; the tests below must fail or return before any connection matters.
DEAD = "127.0.0.1:9"


def _cluster(cluster_id: str = "east", **properties: str) -> ClusterMetadata:
    return ClusterMetadata(cluster_id=cluster_id, bootstrap_servers=DEAD, properties=properties)


# -- KafkaAdmin ------------------------------------------------------------------------------------------------


def test_empty_questions_create_no_client() -> None:
    with KafkaAdmin(_cluster()) as admin:
        assert admin.describe_topics([]) == {}
        assert admin.list_offsets([], "latest") == {}
        assert admin.list_offsets_many([], {"a": "earliest", "b": 5}) == {"a": {}, "b": {}}
        assert admin.committed_offsets("g", []) == {}
        admin.commit_group_offsets("g", {})
        assert admin._admin is None
        assert admin._consumers == {}


def test_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="timeout_s"):
        KafkaAdmin(_cluster(), timeout_s=0)


@pytest.mark.parametrize("query", [-1, True, "newest", 1.5])
def test_offset_query_is_validated(query: Any) -> None:
    with pytest.raises(ValueError, match="offset query"):
        _offset_spec_value(query)


def test_unset_secret_reference_fails_before_any_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KA_TEST_UNSET_PW", raising=False)
    admin = KafkaAdmin(_cluster(**{"sasl.password": "${env:KA_TEST_UNSET_PW}"}))
    with pytest.raises(ConfigError, match="KA_TEST_UNSET_PW"):
        admin.describe_topics(["orders"])
    assert admin._admin is None


def test_bad_client_property_is_a_non_retriable_client_error_without_the_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KA_TEST_PW", "pw-from-env-123")
    monkeypatch.setenv("KA_TEST_BAD", "jaas-pw-456")
    # librdkafka echoes the value it refuses ("Invalid value ... for configuration property"): here a secret one.
    admin = KafkaAdmin(
        _cluster(
            **{"sasl.password": "${env:KA_TEST_PW}", "ssl.endpoint.identification.algorithm": "${env:KA_TEST_BAD}"}
        )
    )
    with pytest.raises(KafkaClientError) as caught:
        admin.describe_topics(["orders"])
    assert caught.value.retriable is False
    assert caught.value.cluster_id == "east"
    assert caught.value.kafka_error == "_INVALID_ARG"
    assert "pw-from-env-123" not in str(caught.value)
    assert "jaas-pw-456" not in str(caught.value)


# -- take_broker_snapshot --------------------------------------------------------------------------------------


class FakeAdmin:
    """Answers like KafkaAdmin from canned data, per cluster id; a cluster id in ``failures`` raises."""

    topics: dict[str, dict[str, list[tuple[int, int, int]]]] = {}  # cluster -> topic -> [(partition, lo, hi)]
    failures: dict[str, Exception] = {}
    epochs: dict[tuple[str, int], int] = {}  # the leader epoch of a partition (default: none given)
    diverged: dict[tuple[str, int], int] = {}  # what the divergence check answers for a partition asked
    calls: list[tuple[str, str, object]] = []
    rendezvous: threading.Barrier | None = None  # every cluster's describe call waits here for the others

    def __init__(self, cluster: ClusterMetadata, *, timeout_s: float = 10.0) -> None:
        self.cluster_id = cluster.cluster_id

    def __enter__(self) -> FakeAdmin:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        return None

    def describe_topics(self, topics: Collection[str]) -> dict[str, TopicDescription]:
        if self.rendezvous is not None:
            self.rendezvous.wait()
        if self.cluster_id in self.failures:
            raise self.failures[self.cluster_id]
        known = self.topics[self.cluster_id]
        return {
            t: TopicDescription(topic=t, exists=True, topic_id=f"id-{t}", partitions=tuple(p for p, _, _ in known[t]))
            if t in known
            else TopicDescription(topic=t, exists=False)
            for t in topics
        }

    def offset_answers(
        self, partitions: Collection[tuple[str, int]], specs: Mapping[str, object], *, isolation_level: str
    ) -> dict[str, dict[tuple[str, int], OffsetAnswer]]:
        self.calls.append((self.cluster_id, "list_offsets", (sorted(specs.values(), key=str), isolation_level)))
        bounds = {(t, p): (lo, hi) for t, parts in self.topics[self.cluster_id].items() for p, lo, hi in parts}
        answers: dict[str, dict[tuple[str, int], OffsetAnswer]] = {}
        for name, spec in specs.items():
            if spec == "earliest":
                found = {k: bounds[k][0] for k in partitions}
            elif spec == "latest":
                found = {k: bounds[k][1] for k in partitions}
            else:  # a timestamp: pretend offset == timestamp, None past the end
                assert isinstance(spec, int)
                found = {k: spec if spec < bounds[k][1] else None for k in partitions}
            answers[name] = {k: OffsetAnswer(v, self.epochs.get(k)) for k, v in found.items()}
        return answers

    def diverged_offsets(self, positions: Collection[CommittedPosition]) -> dict[tuple[str, int], int]:
        if positions:
            self.calls.append((self.cluster_id, "diverged", sorted((p.topic, p.partition) for p in positions)))
        asked = {(p.topic, p.partition) for p in positions}
        return {k: v for k, v in self.diverged.items() if k in asked}

    def committed_offsets(self, group_id: str, partitions: Collection[tuple[str, int]]) -> dict[Any, int | None]:
        self.calls.append((self.cluster_id, "committed", group_id))
        return {k: (7 if k[1] == 0 else None) for k in partitions}


@pytest.fixture
def fake_admin(monkeypatch: pytest.MonkeyPatch) -> type[FakeAdmin]:
    monkeypatch.setattr(snapshot_module, "KafkaAdmin", FakeAdmin)
    FakeAdmin.topics = {
        "east": {"orders": [(0, 0, 10), (1, 5, 20)]},
        "west": {"orders-v2": [(0, 2, 3)]},
    }
    FakeAdmin.failures = {}
    FakeAdmin.epochs = {}
    FakeAdmin.diverged = {}
    FakeAdmin.calls = []
    FakeAdmin.rendezvous = None
    return FakeAdmin


def _request(cluster_id: str, *topics: str, **fields: Any) -> ClusterRequest:
    return ClusterRequest(cluster=_cluster(cluster_id), topics=frozenset(topics), **fields)


def test_snapshot_offsets_and_missing_topics(fake_admin: type[FakeAdmin]) -> None:
    snap = take_broker_snapshot(
        [_request("east", "orders", "gone"), _request("west", "orders-v2")], isolation_level="read_committed", now=NOW
    )
    assert snap.taken_at == NOW
    east = snap.clusters["east"]
    assert east.reachable
    assert east.topics["orders"].topic_id == "id-orders"
    assert east.topics["orders"].partitions == {
        0: PartitionOffsets(earliest=0, latest=10),
        1: PartitionOffsets(earliest=5, latest=20),
    }
    assert east.topics["orders"].start_lookups == {}
    assert east.topics["orders"].stop_lookups == {}
    assert not east.topics["gone"].exists
    assert east.topics["gone"].partitions == {}
    assert snap.clusters["west"].topics["orders-v2"].partitions == {0: PartitionOffsets(earliest=2, latest=3)}
    assert ("east", "list_offsets", (["earliest", "latest"], "read_committed")) in fake_admin.calls


def test_snapshot_queries_clusters_concurrently(fake_admin: type[FakeAdmin]) -> None:
    # Both clusters' calls must be in flight at once to pass the barrier; one after the other, the first waits
    # alone until the barrier breaks.
    fake_admin.rendezvous = threading.Barrier(2, timeout=30)
    snap = take_broker_snapshot(
        [_request("east", "orders"), _request("west", "orders-v2")], isolation_level="read_committed", now=NOW
    )
    assert set(snap.clusters) == {"east", "west"}
    assert not fake_admin.rendezvous.broken


def test_snapshot_timestamp_lookups(fake_admin: type[FakeAdmin]) -> None:
    request = _request("east", "orders", starting=offsets.timestamp(8), stopping=offsets.timestamp(15))
    topic = (
        take_broker_snapshot([request], isolation_level="read_uncommitted", now=NOW).clusters["east"].topics["orders"]
    )
    assert topic.start_lookups == {0: 8, 1: 8}
    assert topic.stop_lookups == {0: None, 1: 15}
    # One list_offsets round for all kinds together.
    assert fake_admin.calls == [("east", "list_offsets", ([15, 8, "earliest", "latest"], "read_uncommitted"))]


def test_snapshot_committed_lookups(fake_admin: type[FakeAdmin]) -> None:
    request = _request("east", "orders", starting=offsets.committed("grp"))
    topic = take_broker_snapshot([request], isolation_level="read_committed", now=NOW).clusters["east"].topics["orders"]
    assert topic.start_lookups == {0: 7, 1: None}
    assert ("east", "committed", "grp") in fake_admin.calls


def test_required_cluster_failure_raises(fake_admin: type[FakeAdmin]) -> None:
    fake_admin.failures["west"] = ClusterUnreachableError("down", cluster_id="west")
    with pytest.raises(ClusterUnreachableError) as caught:
        take_broker_snapshot(
            [_request("east", "orders"), _request("west", "orders-v2")], isolation_level="read_committed", now=NOW
        )
    assert caught.value.cluster_id == "west"


def test_skip_unreachable_records_the_skip(fake_admin: type[FakeAdmin]) -> None:
    fake_admin.failures["west"] = ClusterUnreachableError("brokers 127.0.0.1:9 did not answer", cluster_id="west")
    snap = take_broker_snapshot(
        [_request("east", "orders"), _request("west", "orders-v2", skip_unreachable=True)],
        isolation_level="read_committed",
        now=NOW,
    )
    assert snap.clusters["east"].reachable
    west = snap.clusters["west"]
    assert not west.reachable
    assert west.topics == {}
    assert west.error is not None
    assert "did not answer" in west.error


def test_skip_unreachable_does_not_hide_bad_credentials(fake_admin: type[FakeAdmin]) -> None:
    fake_admin.failures["west"] = KafkaAuthenticationError("refused", cluster_id="west")
    with pytest.raises(KafkaAuthenticationError):
        take_broker_snapshot(
            [_request("west", "orders-v2", skip_unreachable=True)], isolation_level="read_committed", now=NOW
        )


def test_best_effort_cluster_failure_is_recorded(fake_admin: type[FakeAdmin]) -> None:
    fake_admin.failures["west"] = KafkaAuthenticationError("refused", cluster_id="west")
    snap = take_broker_snapshot(
        [_request("west", "orders-v2", required=False)], isolation_level="read_committed", now=NOW
    )
    assert not snap.clusters["west"].reachable
    assert "refused" in (snap.clusters["west"].error or "")


def _position(partition: int, next_offset: int, epoch: int, topic_id: str | None = "id-orders") -> CommittedPosition:
    return CommittedPosition(
        topic="orders", partition=partition, topic_id=topic_id, next_offset=next_offset, leader_epoch=epoch
    )


def test_snapshot_checks_only_positions_whose_leader_epoch_changed(fake_admin: type[FakeAdmin]) -> None:
    """Issue 11 (a truncation refilled before the next run): a changed epoch is checked, its divergence reported;
    the same epoch (no leader change), another topic id, nothing below the position, or latest below it (the
    planner's own truncation rule) ask nothing."""
    fake_admin.topics = {"east": {"orders": [(0, 0, 10), (1, 0, 20), (2, 0, 5), (3, 0, 9), (4, 0, 9)]}}
    fake_admin.epochs = {("orders", 0): 4, ("orders", 1): 2, ("orders", 2): 4, ("orders", 3): 4, ("orders", 4): 4}
    fake_admin.diverged = {("orders", 0): 3}
    positions = (
        _position(0, 8, 2),  # epoch 2 -> 4: checked, diverged at 3
        _position(1, 8, 2),  # same epoch: no leader change, nothing to check
        _position(2, 8, 2),  # latest 5 < 8: the planner sees the truncation by offsets
        _position(3, 8, 2, topic_id="id-old"),  # an earlier incarnation of the topic
        _position(4, 0, 2),  # nothing below offset 0
    )
    snap = take_broker_snapshot(
        [_request("east", "orders", positions=positions)], isolation_level="read_committed", now=NOW
    )
    assert ("east", "diverged", [("orders", 0)]) in fake_admin.calls
    parts = snap.clusters["east"].topics["orders"].partitions
    assert parts[0] == PartitionOffsets(earliest=0, latest=10, leader_epoch=4, diverged_at=3)
    assert [parts[p].diverged_at for p in (1, 2, 3, 4)] == [None] * 4


def test_snapshot_without_positions_asks_no_epoch_check(fake_admin: type[FakeAdmin]) -> None:
    take_broker_snapshot([_request("east", "orders")], isolation_level="read_committed", now=NOW)
    assert not [c for c in fake_admin.calls if c[1] == "diverged"]


def test_divergence_outcome_reads_librdkafka_answers() -> None:
    """The consumer events of the check, as librdkafka 2.16 words them against Kafka 4.1."""
    truncated = KafkaError(
        KafkaError._AUTO_OFFSET_RESET,
        "Partition log truncation detected at offset 5 (leader epoch 0): broker end offset is 2 (offset leader "
        "epoch 0). Reset to INVALID.: Local: Partition log truncation detected (broker 1)",
    )
    no_epoch = KafkaError(
        KafkaError._AUTO_OFFSET_RESET,
        "No epoch found less or equal to offset 5 (leader epoch 9): broker end offset is -1 (offset leader epoch "
        "-1). Reset using configured policy.: Local: Partition log truncation detected (broker 1)",
    )
    assert outcome(truncated, 5) == 2
    assert outcome(truncated, 2) is None  # an end at or beyond the position is no divergence
    assert outcome(no_epoch, 5) is None
    assert outcome(None, 5) is True  # a record fetched from the position
    assert outcome(KafkaError(KafkaError._PARTITION_EOF), 5) is True
    assert outcome(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED), 5) is None


def test_one_request_per_cluster(fake_admin: type[FakeAdmin]) -> None:
    with pytest.raises(ValueError, match="repeated: east"):
        take_broker_snapshot([_request("east", "a"), _request("east", "b")], isolation_level="read_committed", now=NOW)


def test_no_requests_no_clusters() -> None:
    assert take_broker_snapshot([], isolation_level="read_committed", now=NOW).clusters == {}


def test_cluster_request_accepts_config_short_forms() -> None:
    request = ClusterRequest.model_validate(
        {"cluster": _cluster(), "topics": ["t"], "starting": {"timestamp": 5}, "stopping": "latest"}
    )
    assert request.starting == offsets.timestamp(5)
    assert request.required is True
    assert request.skip_unreachable is False


# -- waiting and error callback ---------------------------------------------------------------------------------


class _NoClient:
    """Stands in for a librdkafka client in the waiting logic: polling serves nothing."""

    def poll(self, timeout: float) -> None:
        return None


def _kafka_exception(code: int, text: str = "x") -> KafkaException:
    return KafkaException(KafkaError(code, text))


def test_error_sink_keeps_the_first_authentication_error_and_the_most_telling_connection_error() -> None:
    sink = _ErrorSink()
    sink(KafkaError(KafkaError._TRANSPORT, "Connect to ipv4#127.0.0.1:9 failed: Connection refused"))
    sink(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    sink(KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error: first"))
    sink(KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error: second"))
    assert sink.transport is not None
    assert sink.transport.code() == KafkaError._TRANSPORT
    assert sink.authentication is not None
    assert sink.authentication.str().endswith("first")


def test_blocking_call_retries_timeouts_until_the_deadline() -> None:
    admin = KafkaAdmin(_cluster(), timeout_s=0.3)
    attempts: list[float] = []

    def call(timeout_s: float) -> None:
        attempts.append(timeout_s)
        time.sleep(timeout_s)
        raise _kafka_exception(KafkaError._TIMED_OUT, "Local: Timed out")

    started = time.monotonic()
    with pytest.raises(ClusterUnreachableError, match=DEAD):
        admin._blocking("listing topics", _NoClient(), call)
    assert 0.3 <= time.monotonic() - started < 1.5
    assert len(attempts) >= 1
    assert all(a <= 0.5 for a in attempts)


def test_blocking_call_stops_at_an_authentication_error() -> None:
    admin = KafkaAdmin(_cluster(), timeout_s=30)
    calls = 0

    def call(timeout_s: float) -> None:
        nonlocal calls
        calls += 1
        admin._errors(KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error: Invalid password"))
        raise _kafka_exception(KafkaError._TIMED_OUT)

    with pytest.raises(KafkaAuthenticationError):
        admin._blocking("listing topics", _NoClient(), call)
    assert calls == 1


def test_blocking_call_does_not_retry_other_errors() -> None:
    admin = KafkaAdmin(_cluster(), timeout_s=30)
    calls = 0

    def call(timeout_s: float) -> None:
        nonlocal calls
        calls += 1
        raise _kafka_exception(KafkaError.GROUP_AUTHORIZATION_FAILED, "Broker: Group authorization failed")

    with pytest.raises(KafkaClientError) as caught:
        admin._blocking("reading committed offsets", _NoClient(), call)
    assert calls == 1
    assert caught.value.retriable is False
    assert caught.value.__cause__ is None


def test_request_timeout_ends_before_the_deadline() -> None:
    deadline = time.monotonic() + 5
    assert 3.5 < KafkaAdmin._request_timeout(deadline) <= 4.0
    assert KafkaAdmin._request_timeout(time.monotonic()) == 0.1


def test_run_requests_carry_the_committed_positions_that_recorded_a_leader_epoch() -> None:
    """Only rows of the request's cluster and topics with an epoch are checked: a row written before epochs were
    recorded (None) is not, until its next commit records one."""
    stream = KafkaStream(
        stream_id="orders",
        clusters={"east": ClusterMetadata(cluster_id="east", bootstrap_servers="east:9092", topics=frozenset({"o"}))},
    )
    metadata = MetadataSnapshot(streams={"orders": stream}, fingerprint=metadata_fingerprint([stream]))
    rows = [
        PartitionState(cluster_id="east", topic="o", partition=0, next_offset=5, topic_id="t", leader_epoch=3),
        PartitionState(cluster_id="east", topic="o", partition=1, next_offset=4, topic_id="t"),  # older state
        PartitionState(cluster_id="west", topic="o", partition=0, next_offset=9, leader_epoch=1),
    ]
    state = StateSnapshot(pipeline_id="p", partitions={r.key: r for r in rows})
    config = PipelineConfig.model_validate({"id": "p", "streams": ["orders"], "sink": {"path": "/tmp/s"}})
    requests = run_requests(config, metadata, state, InMemoryMetadataService())
    east = next(r for r in requests if r.cluster.cluster_id == "east")
    assert east.positions == (CommittedPosition(topic="o", partition=0, topic_id="t", next_offset=5, leader_epoch=3),)
