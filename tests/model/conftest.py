"""The model-based protocol test: fast tier (no JVM, no broker), part of the normal suite."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "model: model-based protocol test (simulated brokers and sink, real state)")
