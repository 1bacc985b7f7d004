"""Helpers that the tests, the benchmarks and the demo share, against real local services.

``kafka``: unique topic names, topic creation, producing records with keys, headers and timestamps, and waiting
for a condition with a deadline. ``clusters``: a session's set of local clusters (or bring-your-own ones).
``pipeline``: a pipeline harness over a temporary project. ``protobuf``: Protobuf schemas and messages.
``browser``: the headless Chromium of the UI screenshots. Nothing here imports pytest; helpers only the tests use
live in ``tests/support/``.
"""
