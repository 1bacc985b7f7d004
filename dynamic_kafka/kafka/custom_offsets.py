"""A user's own starting or stopping initializer (:class:`~dynamic_kafka.initializers.CustomOffsets`): calling it and
checking its answer before the planner uses it.

The function is user code, so nothing it returns is trusted: every partition it was given must get an integer
offset inside the broker's ``[earliest, latest]``. A start outside that range would plan a read Spark cannot do
(below earliest) or one that skips offsets no later run reads (beyond latest), so it fails the plan instead of
being clamped as a built-in initializer's timestamp is: the author's arithmetic is wrong and should be told.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal

from dynamic_kafka.errors import ConfigError, DynamicKafkaError
from dynamic_kafka.imports import load_callable

if TYPE_CHECKING:
    from collections.abc import Sequence

    from dynamic_kafka.initializers import CustomOffsets, OffsetLookups, PartitionBounds

_HINT = "Return {(topic, partition): offset} for every partition given, each within its [earliest, latest]."


def resolve_custom(
    initializer: CustomOffsets,
    partitions: Sequence[PartitionBounds],
    lookups: OffsetLookups,
    *,
    role: Literal["starting_offsets", "stopping_offsets"] = "starting_offsets",
) -> dict[tuple[str, int], int]:
    """The start (or, as ``stopping_offsets``, the stop) offset of each of ``partitions`` (one cluster's), as
    ``initializer``'s function answers.

    Raises:
        ConfigError: the function cannot be loaded, raised, or answered badly (not a mapping, a partition
            missing or not asked about, an offset not an integer or outside the partition's bounds); the message
            names the function and every bad partition.
        DynamicKafkaError: a lookup it made failed (raised as the lookup raised it, retriable or not).
    """
    if not partitions:
        return {}
    name = initializer.function
    function = load_callable(name, f"{role}.custom.function")
    cluster = partitions[0].cluster_id
    try:
        answer = function(list(partitions), lookups, **initializer.args)
    except DynamicKafkaError:
        raise
    except Exception as e:
        raise ConfigError(
            f"{role} function {name!r} raised {type(e).__name__} for cluster {cluster!r}: {e}",
            hint="Nothing was read. Fix the function"
            + ("; partitions already read are not asked about again." if role == "starting_offsets" else "."),
        ) from e
    if not isinstance(answer, Mapping):
        raise ConfigError(
            f"{role} function {name!r} returned {type(answer).__name__} for cluster {cluster!r}, not a mapping.",
            hint=_HINT,
        )
    bounds = {(p.topic, p.partition): p for p in partitions}
    problems = [f"{key!r} not asked about" for key in answer if key not in bounds]
    starts: dict[tuple[str, int], int] = {}
    for key, p in bounds.items():
        offset = answer.get(key)
        where = f"{p.topic}[{p.partition}]"
        if offset is None:
            problems.append(f"{where} missing")
        elif not isinstance(offset, int) or isinstance(offset, bool):
            problems.append(f"{where} is {offset!r}, not an integer")
        elif not p.earliest <= offset <= p.latest:
            problems.append(f"{where} is {offset}, outside [{p.earliest}, {p.latest}]")
        else:
            starts[key] = offset
    if problems:
        raise ConfigError(
            f"{role} function {name!r} answered badly for cluster {cluster!r}: {'; '.join(problems)}.",
            hint=_HINT,
        )
    return starts
