"""Offline checks of the cron expressions a pipeline's ``schedule`` holds, in the five-field form Dagster accepts.

The library does not import Dagster, so ``dynamic-kafka check`` validates schedules here: five fields (minute,
hour, day of month, month, day of week), each a ``*``, a number or name, a range ``a-b``, a step ``/n`` or a comma
list of those; the ``@hourly``-style shortcuts; and the quirks Dagster also takes (``L`` as the last day of the
month, ``?`` for either day field, ``5#2`` for a weekday's second occurrence, a range like ``22-2`` that wraps).
A unit test compares the verdicts with Dagster's own.
"""

from __future__ import annotations

import re

SHORTCUTS = frozenset({"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"})
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
# (name, lowest, highest, names whose index + offset is their number)
_FIELDS: tuple[tuple[str, int, int, tuple[str, ...], int], ...] = (
    ("minute", 0, 59, (), 0),
    ("hour", 0, 23, (), 0),
    ("day of month", 1, 31, (), 0),
    ("month", 1, 12, _MONTHS, 1),
    ("day of week", 0, 7, _DAYS, 0),
)
_ITEM = re.compile(r"^(?P<base>\*|[A-Za-z0-9]+(?:-[A-Za-z0-9]+)?)(?:/(?P<step>[0-9]+))?$")
_EXAMPLE = "write five fields: minute hour day-of-month month day-of-week, e.g. '*/15 * * * *' or '0 6 * * mon-fri'"


def cron_problem(expression: str) -> str | None:
    """What is wrong with a cron expression, in plain words, or None when it is valid.

    Example:
        >>> cron_problem("*/15 * * * *") is None
        True
        >>> cron_problem("0 24 * * *")
        "the hour field '24' is out of range: write 0-23"
        >>> cron_problem("every hour")
        "'every hour' has 2 fields; write five fields: minute hour day-of-month month day-of-week, e.g. '*/15 * * * *' or '0 6 * * mon-fri'"
    """  # noqa: E501 - a doctest's expected output is one line
    text = expression.strip()
    if text.startswith("@"):
        return None if text.lower() in SHORTCUTS else f"unknown shortcut {text!r}; write one of {sorted(SHORTCUTS)}"
    fields = text.split()
    if len(fields) != 5:
        return f"{expression!r} has {len(fields)} fields; {_EXAMPLE}"
    for value, (name, low, high, names, offset) in zip(fields, _FIELDS, strict=True):
        for item in value.split(","):
            problem = _item_problem(item, name, low, high, names, offset)
            if problem:
                return problem
    day, month = fields[2], fields[3]
    if month.lower() in ("2", "feb") and day in ("30", "31"):
        return f"day {day} of February never comes: the schedule would never run"
    return None


def _item_problem(item: str, name: str, low: int, high: int, names: tuple[str, ...], offset: int) -> str | None:
    if name == "day of month" and item.upper() == "L":
        return None
    if name == "day of week" and re.fullmatch(r"[0-7]#[1-5]", item):
        return None
    if name.startswith("day") and item == "?":
        return None
    match = _ITEM.match(item)
    if match is None:
        return f"the {name} field has {item!r}, which is not a number, a range a-b, a step /n or *"
    if match["step"] is not None and int(match["step"]) == 0:
        return f"the {name} field has the step /0 in {item!r}; a step is at least 1"
    base = match["base"]
    if base == "*":
        return None
    ends = base.split("-")
    numbers = []
    for end in ends:
        if end.isdigit():
            numbers.append(int(end))
        elif end.lower() in names:
            numbers.append(names.index(end.lower()) + offset)
        else:
            allowed = f" or a name such as {names[0]}" if names else ""
            return f"the {name} field has {end!r}, which is not a number{allowed}"
    for number in numbers:
        if not low <= number <= high:
            return f"the {name} field {item!r} is out of range: write {low}-{high}"
    return None
