"""References of a kind an orchestrator registers for the time of a task (``${airflow:conn/NAME}``)."""

from __future__ import annotations

import pytest

from dynamic_kafka import ConfigError
from dynamic_kafka.references import reference_kind
from dynamic_kafka.secrets import SecretReferencePolicy, check_references, resolve_value

STORE = {"conn/kafka_east": "s3cr3t-from-the-store"}


def test_a_registered_kind_resolves_only_inside_its_block() -> None:
    value = "user=app ${airflow:conn/kafka_east}"
    with reference_kind("airflow", STORE.get):
        assert resolve_value(value, key="sasl.password", cluster_id="east") == "user=app s3cr3t-from-the-store"
    assert resolve_value(value, key="sasl.password", cluster_id="east") == value


def test_a_missing_name_is_a_config_error_naming_the_reference_not_a_value() -> None:
    with reference_kind("airflow", STORE.get), pytest.raises(ConfigError) as raised:
        resolve_value("${airflow:conn/nope}", key="sasl.password", cluster_id="east")
    assert "'conn/nope'" in str(raised.value)
    assert "cluster 'east'" in str(raised.value)
    assert "s3cr3t" not in str(raised.value)


def test_env_and_file_cannot_be_replaced() -> None:
    with pytest.raises(ValueError, match="built in"), reference_kind("env", STORE.get):
        pass


def test_a_service_the_host_does_not_control_never_names_an_orchestrator_secret() -> None:
    # Even a policy listing every file: its lists are of env and file references, never of an orchestrator's.
    with pytest.raises(ConfigError, match=r"\$\{airflow:conn/kafka_east\}: only your own config files") as raised:
        check_references(
            {"sasl.password": "${airflow:conn/kafka_east}"},
            cluster_id="east",
            policy=SecretReferencePolicy(env=("conn/kafka_east",), files=("*",)),
            source="python service x.y",
        )
    assert raised.value.hint == "Write the reference in the project config or its file metadata service instead."
