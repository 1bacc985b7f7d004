"""Helpers that only tests use (``from tests.support.exactly_once import ...``): the pipeline and stream harnesses of
the integration tests, the Dagster projects of the end-to-end tests, the session's registries. Helpers that the
benchmarks or the demo use too live in :mod:`devtools.testing`.
"""
