"""Offsets initializers: how a partition with no committed state gets a concrete start (or stop) offset.

Initializers are specifications, not numbers. The broker snapshot resolves the lookups they need (offsets for a
timestamp, a consumer group's committed offsets) in one batched call per cluster, and the planner turns them into
resolved offsets. In config files they are written in their short forms::

    starting_offsets: earliest
    starting_offsets: latest
    starting_offsets: {timestamp: "2026-01-01T00:00:00Z"}     # or epoch milliseconds
    starting_offsets: {committed: {group_id: g, reset: earliest}}
    starting_offsets: {specific: {offsets: {orders: {0: 42}}, fallback: earliest}}
    starting_offsets: {specific: {offsets: {orders: {0: 42}}, group_id: g, fallback: earliest}}
    starting_offsets: {custom: {function: "my_package.offsets:start"}}
    stopping_offsets: {custom: {function: "my_package.offsets:stop"}}

Example:
    >>> from dynamic_kafka import initializers as offsets
    >>> offsets.timestamp(1_700_000_000_000).timestamp_ms
    1700000000000
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal, Protocol

from pydantic import BeforeValidator, Field, field_validator

from dynamic_kafka.frozen import FrozenModel
from dynamic_kafka.model.plan import TopicPartition

ResetStrategy = Literal["earliest", "latest", "none"]


class _Initializer(FrozenModel):
    """Where reading starts or stops in a partition: one kind of the initializers below."""


class EarliestOffsets(_Initializer):
    """The earliest offset the broker still has."""

    kind: Literal["earliest"] = "earliest"


class LatestOffsets(_Initializer):
    """The latest offset; under ``read_committed`` (the default) the last stable offset."""

    kind: Literal["latest"] = "latest"


class TimestampOffsets(_Initializer):
    """The first offset whose record timestamp is >= ``timestamp_ms``; latest when there is none."""

    kind: Literal["timestamp"] = "timestamp"
    timestamp_ms: int = Field(ge=0, description="Epoch milliseconds, inclusive.")

    @field_validator("timestamp_ms", mode="before")
    @classmethod
    def _parse_time(cls, value: Any) -> Any:
        if isinstance(value, datetime | str) and not isinstance(value, bool):
            return to_epoch_ms(value)
        return value


class CommittedOffsets(_Initializer):
    """The consumer group's committed offset; ``reset`` applies where the group has none.

    Without ``reset``, a partition the group has no offset for fails the plan (``none``), as Flink's
    ``OffsetsInitializer.committedOffsets()`` does: silently starting at earliest would re-read a whole topic
    (or, at latest, skip it) because of a typo in the group id.

    As a stopping point (Flink's ``setBounded(committedOffsets())``) each partition's run stops at the group's
    committed offset: a run never passes where another consumer group has got to. ``reset`` then says where a
    partition the group has no offset for stops: ``earliest`` reads none of it, ``latest`` all of it.
    """

    kind: Literal["committed"] = "committed"
    group_id: str = Field(min_length=1, description="Consumer group whose committed offsets are used.")
    reset: ResetStrategy = Field(
        "none", description="Where to start when the group has no offset: earliest, latest, or none (fail)."
    )


class SpecificOffsets(_Initializer):
    """Explicit offsets per topic and partition (Flink's ``OffsetsInitializer.offsets(Map, OffsetResetStrategy)``).

    A partition not listed starts at ``group_id``'s committed offset when a group is named, and at ``fallback``
    where there is none (or no group): Flink's order, which looks up the source's group first.
    """

    kind: Literal["specific"] = "specific"
    offsets: dict[str, dict[int, Annotated[int, Field(ge=0)]]] = Field(
        description="{topic: {partition: offset}}; offsets are non-negative."
    )
    group_id: str | None = Field(
        None,
        min_length=1,
        description="Consumer group whose committed offsets place the partitions not listed (before fallback).",
    )
    fallback: ResetStrategy = Field(
        "earliest", description="For partitions not listed (and, with group_id, without a committed offset)."
    )


class CustomOffsets(_Initializer):
    """A user's own initializer (Flink's ``OffsetsInitializer`` implemented by the user): a Python function,
    ``package.module:function``, asked once per cluster and run.

    It is called as ``function(partitions, lookups, **args)``: ``partitions`` a list of
    :class:`PartitionBounds` (cluster, topic, partition, earliest, latest), ``lookups`` an :class:`OffsetLookups`
    (offsets for a timestamp, a consumer group's committed offsets), and it returns ``{(topic, partition): offset}``
    for every partition given, each within its ``[earliest, latest]``. Anything else fails the plan naming the
    function. Only in the pipeline's config (a metadata service's answer never names code to run).

    As a starting point it is given the partitions no run has read yet, and only places their first start: a
    partition with committed state resumes from it, so a function that answers differently on another day never
    moves a running pipeline. As a stopping point it is given every partition at every run and says where that run
    stops (never before where the run starts, never beyond latest); the answer is written into the plan, so a
    crashed run is finished where it was planned to stop, without asking the function again.
    """

    kind: Literal["custom"] = "custom"
    function: str = Field(
        pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$",
        description="'package.module:function' on PYTHONPATH, called as function(partitions, lookups, **args).",
    )
    args: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments passed to the function.")


class PartitionBounds(TopicPartition):
    """One partition as a custom initializer is given it: where it is and what the broker holds."""

    earliest: int = Field(ge=0, description="The earliest offset the broker still has.")
    latest: int = Field(ge=0, description="The latest offset (the last stable offset under read_committed).")


class OffsetLookups(Protocol):
    """What a custom initializer may ask the cluster about the partitions it was given (Flink's
    ``PartitionOffsetsRetriever``); each call is one batched request.
    """

    def offsets_for_times(self, timestamp_ms: int) -> dict[tuple[str, int], int | None]:
        """Per (topic, partition), the first offset whose record timestamp is >= ``timestamp_ms``; None: none."""
        ...

    def committed(self, group_id: str) -> dict[tuple[str, int], int | None]:
        """Per (topic, partition), ``group_id``'s committed offset; None where it has none."""
        ...


def _expand_short_form(value: Any) -> Any:
    """Accepts the config file's short forms (``earliest``, ``{timestamp: ...}``) as well as the full form."""
    if isinstance(value, str):
        return {"kind": value}
    if isinstance(value, dict) and "kind" not in value and len(value) == 1:
        ((kind, body),) = value.items()
        if kind == "timestamp":
            return {"kind": "timestamp", "timestamp_ms": body}
        if isinstance(body, dict):
            return {"kind": kind, **body}
    return value


StartingOffsets = Annotated[
    EarliestOffsets | LatestOffsets | TimestampOffsets | CommittedOffsets | SpecificOffsets,
    Field(discriminator="kind"),
    BeforeValidator(_expand_short_form),
]
PipelineStartingOffsets = Annotated[
    EarliestOffsets | LatestOffsets | TimestampOffsets | CommittedOffsets | SpecificOffsets | CustomOffsets,
    Field(discriminator="kind"),
    BeforeValidator(_expand_short_form),
]
"""A pipeline's starting initializer: the metadata's per-cluster ones (:data:`StartingOffsets`) or a custom one."""
StoppingOffsets = Annotated[
    LatestOffsets | TimestampOffsets | CommittedOffsets | SpecificOffsets,
    Field(discriminator="kind"),
    BeforeValidator(_expand_short_form),
]
PipelineStoppingOffsets = Annotated[
    LatestOffsets | TimestampOffsets | CommittedOffsets | SpecificOffsets | CustomOffsets,
    Field(discriminator="kind"),
    BeforeValidator(_expand_short_form),
]
"""A pipeline's stopping initializer: the metadata's per-cluster ones (:data:`StoppingOffsets`) or a custom one."""
Isolation = Literal["read_committed", "read_uncommitted"]
"""Which records a read sees: ``read_committed`` stops at the last stable offset and skips aborted transactions.
The one isolation-level type: the pipeline config, the broker offsets and the Spark read all use it."""

AnyInitializer = EarliestOffsets | LatestOffsets | TimestampOffsets | CommittedOffsets | SpecificOffsets | CustomOffsets


def earliest() -> EarliestOffsets:
    """Start (or stop) at the earliest available offset."""
    return EarliestOffsets()


def latest() -> LatestOffsets:
    """Start (or stop) at the latest (last stable) offset."""
    return LatestOffsets()


def timestamp(ms: int | str | datetime) -> TimestampOffsets:
    """The first offset with a record timestamp >= ``ms`` (epoch ms, ISO-8601 text, or an aware datetime)."""
    return TimestampOffsets(timestamp_ms=to_epoch_ms(ms) if not isinstance(ms, int) else ms)


def committed(group_id: str, reset: ResetStrategy = "none") -> CommittedOffsets:
    """The consumer group's committed offsets, ``reset`` where it has none (default: fail, as Flink does)."""
    return CommittedOffsets(group_id=group_id, reset=reset)


def specific(
    offsets: dict[str, dict[int, int]], fallback: ResetStrategy = "earliest", *, group_id: str | None = None
) -> SpecificOffsets:
    """Explicit ``{topic: {partition: offset}}``; elsewhere ``group_id``'s committed offset if given, else
    ``fallback``.
    """
    return SpecificOffsets(offsets=offsets, fallback=fallback, group_id=group_id)


def custom(function: str, **args: Any) -> CustomOffsets:
    """A user's own starting or stopping initializer, ``package.module:function`` (see :class:`CustomOffsets`)."""
    return CustomOffsets(function=function, args=args)


def to_epoch_ms(value: int | str | datetime) -> int:
    """Converts epoch milliseconds, ISO-8601 text (``Z`` allowed; naive means UTC) or a datetime to epoch ms."""
    if isinstance(value, int):
        return value
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(value.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)
