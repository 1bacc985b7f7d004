"""The model-based protocol test: fast tier (no JVM, no broker), part of the normal suite."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "model: model-based protocol test (simulated brokers and sink, real state)")
