"""Crash points are a closed set: a misspelled one is refused at once instead of never firing."""

from __future__ import annotations

import pytest

from dynamic_kafka.errors import ConfigError
from dynamic_kafka.faults import ENV, CrashPoint, acting_at, arm_timer, crash_point


def test_an_action_at_a_misspelled_point_is_refused_naming_the_points() -> None:
    with pytest.raises(ConfigError) as refused, acting_at("after_snik", lambda: None):
        pass

    assert "acting_at: 'after_snik' is no crash point" in str(refused.value)
    assert "after_sink" in (refused.value.hint or "")
    assert "replay_after_sink" in (refused.value.hint or "")


def test_a_misspelled_fault_in_the_environment_is_refused_at_the_first_point(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "afterplan")

    with pytest.raises(ConfigError, match=f"{ENV}: 'afterplan' is no crash point"):
        crash_point(CrashPoint.AFTER_PLAN)
    with pytest.raises(ConfigError, match=f"{ENV}: 'afterplan' is no crash point"):
        arm_timer(CrashPoint.DURING_WRITE)


def test_an_action_named_by_its_text_runs_at_its_point_and_only_there(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    reached: list[str] = []

    with acting_at("replay_after_sink", lambda: reached.append("replay")):
        crash_point(CrashPoint.AFTER_SINK)
        crash_point(CrashPoint.REPLAY_AFTER_SINK)
    crash_point(CrashPoint.REPLAY_AFTER_SINK)

    assert reached == ["replay"]
