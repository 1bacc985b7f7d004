"""The ``metrics`` section: off by default, its labels checked, and a push to a receiver that is down (or behind a
reference that does not resolve) is a warning naming the endpoint, never an error."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import pytest
from pydantic import ValidationError

from dynamic_kafka._toolchain.process import free_port
from dynamic_kafka.config import MetricsConfig, ProjectConfig
from dynamic_kafka.monitoring import Sample, push_metrics

if TYPE_CHECKING:
    from collections.abc import Mapping

_SAMPLES = [Sample("run_records", "Records.", 5)]


def _config(**given: object) -> MetricsConfig:
    return MetricsConfig.model_validate({"pushgateway": f"http://127.0.0.1:{free_port()}", **given})


def test_metrics_are_off_unless_configured() -> None:
    project = ProjectConfig.model_validate({"metadata_service": {"type": "file", "path": "m.yaml"}})
    assert project.metrics is None


@pytest.mark.parametrize(
    ("labels", "says"),
    [({"pipeline": "x"}, "carry already"), ({"env-name": "x"}, "not a Prometheus label"), ({"__x": "y"}, "leading")],
)
def test_a_grouping_label_the_metrics_carry_or_prometheus_refuses_is_refused(
    labels: Mapping[str, str], says: str
) -> None:
    with pytest.raises(ValidationError, match=says):
        _config(labels=labels)


def test_a_receiver_that_is_down_is_a_warning_naming_it_without_credentials(caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()  # nothing listens there
    config = MetricsConfig(pushgateway=f"http://ops:hunter2@127.0.0.1:{port}/gateway", timeout_seconds=2)

    with caplog.at_level(logging.WARNING, logger="dynamic_kafka.monitoring"):
        assert push_metrics(config, "orders", "run", _SAMPLES) is False

    [warning] = [r.getMessage() for r in caplog.records]
    assert f"not pushed to http://127.0.0.1:{port}/gateway" in warning
    assert "hunter2" not in warning


def test_a_password_reference_that_does_not_resolve_is_a_warning_naming_the_reference(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DK_TEST_UNSET_PUSH_PASSWORD", raising=False)
    config = _config(username="ops", password="${env:DK_TEST_UNSET_PUSH_PASSWORD}")

    with caplog.at_level(logging.WARNING, logger="dynamic_kafka.monitoring"):
        assert push_metrics(config, "orders", "health", _SAMPLES) is False

    [warning] = [r.getMessage() for r in caplog.records]
    assert "DK_TEST_UNSET_PUSH_PASSWORD" in warning
    assert config.shown_endpoint in warning
