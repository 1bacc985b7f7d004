"""The ``python -m devtools`` command line: one module per service group."""
