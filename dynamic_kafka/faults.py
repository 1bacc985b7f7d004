"""Fault injection points, so crash safety is tested by really killing a run at a chosen step.

Set ``DYNAMIC_KAFKA_FAULT`` to a point's name (``after_plan``, ``during_write``, ``after_sink``) and the process
kills itself with SIGKILL there: no cleanup, no ``finally``, exactly like ``kill -9``. ``during_write:SECONDS``
kills that many seconds after the Spark write starts. Unset, these calls cost one environment lookup.
"""

from __future__ import annotations

import os
import signal
import threading

ENV = "DYNAMIC_KAFKA_FAULT"


def _kill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def crash_point(name: str) -> None:
    """Dies here if ``DYNAMIC_KAFKA_FAULT`` names this point."""
    if os.environ.get(ENV) == name:
        _kill()


def arm_timer(name: str) -> None:
    """If ``DYNAMIC_KAFKA_FAULT`` is ``name:SECONDS``, dies that many seconds from now, wherever the run is."""
    wanted, _, seconds = os.environ.get(ENV, "").partition(":")
    if wanted == name and seconds:
        timer = threading.Timer(float(seconds), _kill)
        timer.daemon = True
        timer.start()
