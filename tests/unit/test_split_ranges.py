"""A planned range is only ever cut within itself: nothing may read outside its plan. A split, as every value
model, changes only through its typed methods, and the copy under them refuses a field the model does not declare."""

from __future__ import annotations

import pytest

from dynamic_kafka.frozen import replaced
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


def test_a_copy_naming_a_field_the_model_does_not_declare_is_refused() -> None:
    with pytest.raises(TypeError, match="Split has no field stop_ofset"):
        replaced(_split(10, 20), stop_ofset=15)
    assert replaced(_split(10, 20), stop_offset=15).stop_offset == 15


def test_a_split_led_by_a_stream_keeps_its_other_streams_in_order() -> None:
    split = replaced(_split(10, 20), stream_ids=("a", "b", "c"))
    assert split.led_by("b").stream_ids == ("b", "a", "c")
    assert split.led_by("a").stream_ids == ("a", "b", "c")
