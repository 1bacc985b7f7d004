"""A planned range is only ever cut within itself: nothing may read outside its plan."""

from __future__ import annotations

import pytest

from dynamic_kafka.model.plan import Split


def _split(start: int, stop: int) -> Split:
    return Split(
        cluster_id="east",
        bootstrap_servers="east:9092",
        topic="orders",
        partition=0,
        start_offset=start,
        stop_offset=stop,
        stream_ids=("a",),
    )


def test_a_range_cut_within_itself_keeps_its_partition_and_stream() -> None:
    cut = _split(10, 20).narrowed(12, 15)
    assert (cut.key, cut.stream_ids, cut.start_offset, cut.stop_offset) == (_split(0, 0).key, ("a",), 12, 15)
    assert _split(10, 20).narrowed(10, 10).record_count == 0


@pytest.mark.parametrize(("start", "stop"), [(9, 15), (12, 21), (15, 12)])
def test_a_cut_outside_the_range_or_backwards_is_refused(start: int, stop: int) -> None:
    with pytest.raises(ValueError, match=r"is not within \[10, 20\)"):
        _split(10, 20).narrowed(start, stop)
