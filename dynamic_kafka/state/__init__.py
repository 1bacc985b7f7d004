"""The pipeline's committed state in Delta: current offsets plus run history, with a write-ahead protocol.

A run is recorded in three steps, each one Delta commit against the exact version its caller read:
``begin_run`` (the plan, "planned"), then after the sink write ``commit_run`` (offsets + "committed"), or
``commit_empty_run`` for a run with nothing to read. See ``store.py`` for the invariants and ``rows.py`` for
the table layout.
"""

from dynamic_kafka.state.store import StateStore

__all__ = ["StateStore"]
