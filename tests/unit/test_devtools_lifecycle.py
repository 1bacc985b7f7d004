"""The service lifecycle every development service shares: its folder, its record, a detached start with its pid
recorded, the wait until it serves (or the reason it did not), and the stop."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

import pytest
from pydantic import BaseModel

from devtools.errors import DevtoolsError, LocalS3Error
from devtools.lifecycle import ServiceKind, is_running

if TYPE_CHECKING:
    from pathlib import Path

KIND = ServiceKind(
    label="test service",
    dir_env="DEVTOOLS_TEST_SERVICE_DIR",
    default_dir=".test-service",
    state_file="service.json",
    pid_file="service.pid",
    error=LocalS3Error,
)


class _Record(BaseModel):
    port: int


def test_base_dir_argument_then_variable_then_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(KIND.dir_env, raising=False)
    assert KIND.resolve_base_dir() == tmp_path / ".test-service"
    monkeypatch.setenv(KIND.dir_env, str(tmp_path / "from-env"))
    assert KIND.resolve_base_dir() == tmp_path / "from-env"
    assert KIND.resolve_base_dir(tmp_path / "given") == tmp_path / "given"


def test_record_round_trip_and_an_unreadable_one_names_the_file_and_the_fix(tmp_path: Path) -> None:
    assert KIND.load(tmp_path, _Record) is None
    KIND.save(tmp_path, _Record(port=9000))
    assert KIND.load(tmp_path, _Record) == _Record(port=9000)
    assert [p.name for p in tmp_path.iterdir()] == ["service.json"]  # no partial file left behind
    (tmp_path / "service.json").write_text("{not json")
    with pytest.raises(LocalS3Error, match=r"unreadable test service record .*service\.json") as info:
        KIND.load(tmp_path, _Record)
    assert info.value.hint is not None
    assert f"delete {tmp_path}" in info.value.hint


def test_spawn_wait_stop_a_real_process(tmp_path: Path) -> None:
    marker = str(tmp_path / "marker")
    argv = [sys.executable, "-c", "import sys, time; time.sleep(60)", marker]
    pid = KIND.spawn(argv, folder=tmp_path, log_file=tmp_path / "service.log")
    try:
        assert (tmp_path / "service.pid").read_text() == f"{pid}\n"
        answers = iter(["not yet", None])
        KIND.wait_until_ready(pid, marker, lambda: next(answers), deadline=time.monotonic() + 30, not_ready=_error)
        assert is_running(pid, marker)
    finally:
        assert KIND.stop(tmp_path, pid, marker, timeout_s=10) is True
    assert not is_running(pid, marker)
    assert not (tmp_path / "service.pid").exists()
    assert KIND.stop(tmp_path, pid, marker, timeout_s=10) is None  # nothing left to stop


def test_wait_reports_an_exited_process_and_a_missed_deadline(tmp_path: Path) -> None:
    marker = str(tmp_path / "marker")
    exits = KIND.spawn([sys.executable, "-c", "raise SystemExit(3)", marker], folder=tmp_path, log_file=tmp_path / "a")
    with pytest.raises(DevtoolsError, match=r"did not come up: its process exited"):
        KIND.wait_until_ready(exits, marker, lambda: "no", deadline=time.monotonic() + 30, not_ready=_error)
    sleeps = KIND.spawn(
        [sys.executable, "-c", "import time; time.sleep(60)", marker], folder=tmp_path, log_file=tmp_path / "b"
    )
    try:
        with pytest.raises(DevtoolsError, match=r"did not come up: it did not answer .*last error: refused"):
            KIND.wait_until_ready(sleeps, marker, lambda: "refused", deadline=time.monotonic() + 0.5, not_ready=_error)
    finally:
        KIND.stop(tmp_path, sleeps, marker, timeout_s=10)


def _error(reason: str) -> DevtoolsError:
    return DevtoolsError(f"test service did not come up: {reason}")
