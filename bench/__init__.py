"""dynamic-kafka's benchmark harness: ``python -m bench [--quick] [--json PATH]`` (see bench/README.md).

Not part of the test suite. It starts its own local clusters under ``.cache/bench/``, produces its data sets once
(later runs reuse them), runs every measured command in a fresh process and prints a table of medians.
"""
