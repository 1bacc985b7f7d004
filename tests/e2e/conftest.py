"""Fixtures of the Dagster end-to-end tests (helpers live in tests/support/e2e.py).

The clusters (``kafka_clusters``) and the Spark session (``spark``) are the session fixtures of tests/conftest.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from dagster import DagsterInstance

from tests.support.e2e import Project

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


@pytest.fixture
def project(tmp_path: Path, request: pytest.FixtureRequest) -> Project:
    """A project on the session's real clusters when the test uses them, else on unreachable addresses."""
    if "kafka_clusters" in request.fixturenames:
        clusters = {name: c.bootstrap_servers for name, c in request.getfixturevalue("kafka_clusters").items()}
    else:
        # Nothing listens there; tests without clusters never contact a broker.
        clusters = {"east": "127.0.0.1:1", "west": "127.0.0.1:2"}
    return Project(root=tmp_path, clusters=clusters)


@pytest.fixture
def instance() -> Iterator[DagsterInstance]:
    with DagsterInstance.ephemeral() as inst:
        yield inst
