"""Benchmark 1's "where the time goes" splits our run at its log lines (``bench.runs.ours_phases``): each line it
waits for must still be logged, by the logger it names, or the table prints "-" for every phase of ours.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from datetime import datetime

from bench.measure import Measured
from bench.runs import _MARKS, ours_phases

# A run's -v log, one line per mark, as the product writes them (each checked against the module's format strings).
_RUN_LOG = [
    ("2026-12-07 13:20:01,000", "dynamic_kafka.spark.session", "starting Spark (local[*])"),
    (
        "2026-12-07 13:20:07,000",
        "dynamic_kafka.spark.reader",
        "reading 8 partition range(s), 500000 offsets, from cluster 'east' (topics: bench2)",
    ),
    (
        "2026-12-07 13:20:35,000",
        "dynamic_kafka.sink.incremental",
        "run 1 of pipeline 'bench': 1000000 records (209026059 bytes) landed in sink at version 0, 0 dead letters, "
        "0 already there from a backfill (16 ranges checked)",
    ),
    ("2026-12-07 13:20:35,500", "dynamic_kafka.state.table", "state of bench: commit_run run 1 at version 3"),
]


def _formats(module: str) -> list[str]:
    """The format strings of the module's logging calls (``logger.info("...", ...)``)."""
    tree = ast.parse(inspect.getsource(importlib.import_module(module)))
    return [
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("debug", "info", "warning")
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ]


def _logged_by(module: str, message: str) -> bool:
    for fmt in _formats(module):
        pattern = re.sub(r"%[-\d.]*[dsrf]", ".*", re.escape(fmt).replace("%%", "%"))
        if re.fullmatch(pattern, message):
            return True
    return False


def test_every_phase_mark_is_a_line_its_module_logs() -> None:
    assert [logger for _, logger, _ in _MARKS] == [logger for _, logger, _ in _RUN_LOG]
    for (phase, _, text), (_, logger, message) in zip(_MARKS, _RUN_LOG, strict=True):
        assert text in message, phase
        assert _logged_by(logger, message), f"{phase}: {logger} logs no line like {message!r}"


def test_a_run_log_splits_into_the_phases() -> None:
    stderr = "\n".join(f"{when} INFO {logger}: {message}" for when, logger, message in _RUN_LOG)
    began = datetime.strptime("2026-12-07 13:20:00,000", "%Y-%m-%d %H:%M:%S,%f").timestamp()
    measured = Measured([], 0, 37.0, "", stderr, 0.0, None, True, 0.0, None)

    phases = ours_phases(measured, began)

    assert phases == {
        "startup_plan_s": 1.0,
        "spark_start_s": 6.0,
        "read_write_s": 28.0,
        "commit_s": 0.5,
        "exit_s": 1.5,
    }
