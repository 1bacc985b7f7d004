"""The benchmark warms a Spark Connect server until its JIT has settled: the methods compiled per run no longer fall
by a fifth from one window of runs to the next (``bench.connect._settled``).
"""

from __future__ import annotations

from bench.connect import _settled


def test_a_server_still_compiling_less_each_window_is_not_settled() -> None:
    # A fresh server's small runs, as measured: 9,520 methods compiled by the first, ~700 by the 10th, ~400 by the 15th.
    falling = [9520, 1789, 1248, 1090, 943, 890, 664, 852, 671, 718, 782, 462, 399, 428, 485]

    assert not _settled(falling[:10], window=5)
    assert not _settled(falling, window=5)


def test_a_server_compiling_as_much_as_the_window_before_is_settled() -> None:
    assert _settled([700, 650, 400, 420, 380, 390, 410, 360, 400, 370], window=5)


def test_too_few_runs_to_compare_two_windows_is_not_settled() -> None:
    assert not _settled([5, 5, 5], window=2)


def test_without_jstat_the_least_runs_are_enough() -> None:
    assert _settled([None, None], window=5)
