"""A user's own starting or stopping initializer: how it is called, and every bad answer it can give."""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

import pytest

from dynamic_kafka import initializers as offsets
from dynamic_kafka.errors import ConfigError, KafkaClientError
from dynamic_kafka.initializers import CustomOffsets, PartitionBounds
from dynamic_kafka.kafka.custom_offsets import resolve_custom
from dynamic_kafka.kafka.requests import run_requests
from dynamic_kafka.metadata.memory import InMemoryMetadataService
from dynamic_kafka.metadata.models import ClusterMetadata, KafkaStream, metadata_fingerprint
from dynamic_kafka.metadata.snapshot import MetadataSnapshot
from dynamic_kafka.model.plan import TopicPartition
from dynamic_kafka.model.snapshots import PartitionState, StateSnapshot
from tests.unit.test_planner import pipeline

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence

BOUNDS = [
    PartitionBounds(cluster_id="east", topic="orders", partition=0, earliest=2, latest=10),
    PartitionBounds(cluster_id="east", topic="orders", partition=1, earliest=0, latest=4),
]


class Lookups:
    """The brokers' answers a function may ask for, fixed."""

    def offsets_for_times(self, timestamp_ms: int) -> dict[tuple[str, int], int | None]:
        return {("orders", 0): 7, ("orders", 1): None}

    def committed(self, group_id: str) -> dict[tuple[str, int], int | None]:
        if group_id == "down":
            raise KafkaClientError("coordinator not available", cluster_id="east")
        return {("orders", 0): 3, ("orders", 1): None}


@pytest.fixture
def user_module() -> Iterator[Callable[[Callable[..., Any]], CustomOffsets]]:
    """Installs a function as ``user_offsets:start`` and returns the initializer naming it."""

    def install(function: Callable[..., Any], **args: Any) -> CustomOffsets:
        module = types.ModuleType("user_offsets")
        module.start = function  # type: ignore[attr-defined]
        sys.modules["user_offsets"] = module
        return offsets.custom("user_offsets:start", **args)

    yield install
    sys.modules.pop("user_offsets", None)


def test_the_function_gets_the_partitions_the_lookups_and_its_args(
    user_module: Callable[..., CustomOffsets],
) -> None:
    def start(partitions: Sequence[PartitionBounds], lookups: Lookups, back: int) -> Mapping[tuple[str, int], int]:
        at = lookups.offsets_for_times(1_000)
        return {
            (p.topic, p.partition): at[(p.topic, p.partition)] or max(p.earliest, p.latest - back) for p in partitions
        }

    assert resolve_custom(user_module(start, back=1), BOUNDS, Lookups()) == {("orders", 0): 7, ("orders", 1): 3}


@pytest.mark.parametrize(
    ("answer", "complaint"),
    [
        ([1, 2], r"returned list for cluster 'east', not a mapping"),
        ({("orders", 0): 2}, r"orders\[1\] missing"),
        ({("orders", 0): 1, ("orders", 1): 5}, r"orders\[0\] is 1, outside \[2, 10\]; orders\[1\] is 5, outside"),
        ({("orders", 0): "3", ("orders", 1): True}, r"orders\[0\] is '3', not an integer; orders\[1\] is True"),
        ({("orders", 0): 2, ("orders", 1): 0, 0: 1}, r"0 not asked about"),
    ],
)
def test_a_bad_answer_fails_naming_the_function_and_each_partition(
    user_module: Callable[..., CustomOffsets], answer: object, complaint: str
) -> None:
    initializer = user_module(lambda partitions, lookups: answer)
    with pytest.raises(ConfigError, match=r"'user_offsets:start' .*" + complaint):
        resolve_custom(initializer, BOUNDS, Lookups())


def test_an_exception_in_the_function_fails_naming_it_and_a_lookups_error_passes_as_it_is(
    user_module: Callable[..., CustomOffsets],
) -> None:
    def start(partitions: Sequence[PartitionBounds], lookups: Lookups, group: str) -> dict[tuple[str, int], int]:
        committed = lookups.committed(group)
        return {(p.topic, p.partition): committed[(p.topic, p.partition)] + 1 for p in partitions}  # type: ignore[operator]

    with pytest.raises(ConfigError, match=r"'user_offsets:start' raised TypeError for cluster 'east'") as raised:
        resolve_custom(user_module(start, group="g"), BOUNDS, Lookups())
    assert isinstance(raised.value.__cause__, TypeError)
    with pytest.raises(KafkaClientError, match="coordinator not available"):
        resolve_custom(user_module(start, group="down"), BOUNDS, Lookups())


def test_a_function_that_cannot_be_loaded_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"starting_offsets.custom.function 'no_such_module:start' cannot be loaded"):
        resolve_custom(offsets.custom("no_such_module:start"), BOUNDS, Lookups())


def test_no_partitions_no_call() -> None:
    assert resolve_custom(offsets.custom("no_such_module:start"), [], Lookups()) == {}


def test_only_the_pipeline_config_names_a_custom_function_never_the_metadata() -> None:
    custom = {"custom": {"function": "pkg.mod:start", "args": {"back": 2}}}
    assert pipeline(starting_offsets=custom).starting_offsets == offsets.custom("pkg.mod:start", back=2)
    assert pipeline(stopping_offsets=custom).stopping_offsets == offsets.custom("pkg.mod:start", back=2)
    for role in ("starting_offsets", "stopping_offsets"):
        with pytest.raises(ValueError, match="custom"):
            ClusterMetadata(cluster_id="east", bootstrap_servers="e:1", **{role: custom})


def test_a_stopping_functions_bad_answer_names_it_as_a_stopping_point(
    user_module: Callable[..., CustomOffsets],
) -> None:
    initializer = user_module(lambda partitions, lookups: {("orders", 0): 11, ("orders", 1): 4})
    with pytest.raises(ConfigError, match=r"stopping_offsets function 'user_offsets:start'.*orders\[0\] is 11"):
        resolve_custom(initializer, BOUNDS, Lookups(), role="stopping_offsets")


def test_the_function_is_asked_only_about_topics_no_run_has_read_on_that_cluster() -> None:
    stream = KafkaStream(
        stream_id="orders",
        clusters={
            cid: ClusterMetadata(cluster_id=cid, bootstrap_servers=f"{cid}:1", topics=frozenset({"orders", "refunds"}))
            for cid in ("east", "west")
        },
    )
    meta = MetadataSnapshot(streams={"orders": stream}, fingerprint=metadata_fingerprint([stream]))
    row = PartitionState(cluster_id="east", topic="orders", partition=3, next_offset=5, status="removed")
    state = StateSnapshot(
        pipeline_id="p", partitions={TopicPartition(cluster_id="east", topic="orders", partition=3): row}
    )
    requests = run_requests(pipeline(), meta, state, InMemoryMetadataService())
    assert {r.cluster.cluster_id: r.started_topics for r in requests} == {"east": {"orders"}, "west": frozenset()}
