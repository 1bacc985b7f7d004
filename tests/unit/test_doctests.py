"""Every docstring example of the library and of the development services runs as a doctest (examples that need a
broker or Spark say ``+SKIP``)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import devtools
import dynamic_kafka

MODULES = sorted(
    info.name
    for package in (dynamic_kafka, devtools)
    for info in pkgutil.walk_packages(package.__path__, prefix=f"{package.__name__}.")
    # Entry-point modules of background processes run their work on import.
    if not info.name.endswith(("__main__", "class_archive_recorder", "_serve"))
)


@pytest.mark.parametrize("module_name", MODULES)
def test_docstring_examples_hold(module_name: str) -> None:
    module = importlib.import_module(module_name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in {module_name} failed (see above)"
