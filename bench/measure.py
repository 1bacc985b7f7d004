"""Measuring one command in a fresh process: wall time, its output, and the peak memory of it and of its JVM.

Peak memory is the kernel's high-water mark of resident memory (``VmHWM`` in ``/proc/<pid>/status``), read every
50 ms for the process and for every descendant; the JVM is the ``java`` descendant with the highest mark (pyspark
runs ``spark-submit``, which execs the JVM in the process pyspark started). A high-water mark only grows, so the
last reading before the process exits is its peak, give or take the last 50 ms. CPU time (user + system, from
``/proc/<pid>/stat``) is sampled the same way: on a shared machine it moves much less than wall time does.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

_SAMPLE_S = 0.05


@dataclass
class Measured:
    """One finished command."""

    argv: list[str]
    returncode: int
    wall_s: float
    stdout: str
    stderr: str
    driver_peak_mb: float
    jvm_peak_mb: float | None
    java_started: bool
    driver_cpu_s: float
    jvm_cpu_s: float | None
    samples: int = 0
    extra: dict[str, float] = field(default_factory=dict)

    def check(self) -> Measured:
        """Return the measurement, raising if the measured process failed."""
        if self.returncode != 0:
            tail = "\n".join(self.stderr.strip().splitlines()[-25:])
            raise RuntimeError(f"`{' '.join(self.argv)}` failed (exit {self.returncode}):\n{tail}")
        return self


def _status_kb(pid: int, key: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(key):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return None


_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float | None:
    """User plus system CPU time of ``pid`` so far (its own threads, not its children)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _TICK


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            text = Path(f"/proc/{pid}/task/{task}/children").read_text()
        except OSError:
            continue
        found.extend(int(c) for c in text.split())
    return found


def descendants(pid: int) -> list[int]:
    """Every living descendant of ``pid``."""
    result, todo = [], [pid]
    while todo:
        for child in _children(todo.pop()):
            result.append(child)
            todo.append(child)
    return result


class _Sampler(threading.Thread):
    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.stop = threading.Event()
        self.driver_kb = 0
        self.driver_cpu = 0.0
        self.java_kb: dict[int, int] = {}
        self.java_cpu: dict[int, float] = {}
        self.samples = 0

    def run(self) -> None:
        while not self.stop.is_set():
            self.sample()
            self.stop.wait(_SAMPLE_S)

    def sample(self) -> None:
        self.samples += 1
        mark = _status_kb(self.pid, "VmHWM:")
        if mark is not None:
            self.driver_kb = max(self.driver_kb, mark)
        self.driver_cpu = max(self.driver_cpu, cpu_seconds(self.pid) or 0.0)
        for child in descendants(self.pid):
            if _comm(child) == "java":
                mark = _status_kb(child, "VmHWM:")
                if mark is not None:
                    self.java_kb[child] = max(self.java_kb.get(child, 0), mark)
                self.java_cpu[child] = max(self.java_cpu.get(child, 0.0), cpu_seconds(child) or 0.0)


def run_measured(
    argv: Sequence[str], *, cwd: Path | None = None, env: Mapping[str, str] | None = None, timeout_s: float = 1800
) -> Measured:
    """Runs ``argv`` to completion in a fresh process, sampling its memory and its JVM's."""
    began = time.perf_counter()
    proc = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=dict(env) if env is not None else None,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    sampler = _Sampler(proc.pid)
    sampler.start()
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
        stderr += f"\n(killed after {timeout_s:.0f}s)"
    wall = time.perf_counter() - began
    sampler.stop.set()
    sampler.join()
    jvm = max(sampler.java_kb, key=lambda pid: sampler.java_kb[pid], default=None)
    return Measured(
        argv=list(argv),
        returncode=proc.returncode,
        wall_s=wall,
        stdout=stdout,
        stderr=stderr,
        driver_peak_mb=sampler.driver_kb / 1024,
        jvm_peak_mb=sampler.java_kb[jvm] / 1024 if jvm is not None else None,
        java_started=bool(sampler.java_kb),
        driver_cpu_s=sampler.driver_cpu,
        jvm_cpu_s=sampler.java_cpu.get(jvm) if jvm is not None else None,
        samples=sampler.samples,
    )


def load_average() -> tuple[float, float, float]:
    """The machine's 1, 5 and 15 minute load averages."""
    return os.getloadavg()


def cpu_busy_fraction(seconds: float = 1.0) -> float:
    """How busy the machine's CPUs were over ``seconds`` (0..1), from ``/proc/stat``."""

    def read() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
        idle = fields[3] + fields[4]
        return sum(fields), idle

    total0, idle0 = read()
    time.sleep(seconds)
    total1, idle1 = read()
    return 1 - (idle1 - idle0) / max(1, total1 - total0)
