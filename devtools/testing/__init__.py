"""Helpers for tests against real Kafka clusters, reusable by users of dynamic-kafka.

``kafka``: unique topic names, topic creation, producing records with keys, headers and timestamps, and waiting
for a condition with a deadline. ``clusters``: a session's set of local clusters (or bring-your-own ones).
Nothing here imports pytest.
"""
