"""``dynamic-kafka check`` judges schedules without Dagster (the library never imports it): its verdict on each
cron expression must be the one Dagster gives when it loads the schedule.
"""

from __future__ import annotations

import pytest
from dagster._utils.schedules import is_valid_cron_string

from dynamic_kafka.config.cron import cron_problem


@pytest.mark.parametrize(
    "expression",
    [
        "*/15 * * * *",
        "0 6 * * mon-fri",
        "0 0 1 JAN-MAR *",
        "0 22-2 * * *",
        "0 0 L * *",
        "0 0 ? * *",
        "0 0 * * 5#2",
        "0 0 1-31/2 * 0,7",
        "@daily",
        "@HOURLY",
        "every hour",
        "* * * *",
        "* * * * * *",
        "60 * * * *",
        "0 0 0 * *",
        "0 0 * 13 *",
        "0 0 * * 8",
        "*/0 * * * *",
        "0 0 30 2 *",
        "0 0 31 feb *",
        "H * * * *",
        "@every",
        "0 0 * * 5L",
    ],
)
def test_cron_verdicts_agree_with_dagster(expression: str) -> None:
    assert (cron_problem(expression) is None) == is_valid_cron_string(expression)
