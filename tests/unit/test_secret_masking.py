"""The one secret-masking function and the one sensitive-key pattern."""

from __future__ import annotations

import logging
import re

import pytest

from dynamic_kafka.secrets import (
    SPARK_REDACTION_REGEX,
    guard_py4j_logging,
    is_sensitive_key,
    mask_secrets,
    secrets_in_text,
)


@pytest.mark.parametrize(
    ("text", "hidden"),
    [
        ('sasl.jaas.config=PlainLoginModule required username="u" password="hunter2";', "hunter2"),
        ("token: abc123, more", "abc123"),
        ("clientSecret = 'zz-top'", "zz-top"),
        ("keyTab=/etc/app.keytab", "/etc/app.keytab"),
    ],
)
def test_mask_secrets_hides_assigned_values(text: str, hidden: str) -> None:
    assert hidden not in mask_secrets(text)
    assert "***" in mask_secrets(text)


def test_mask_secrets_hides_known_values_longest_first() -> None:
    assert mask_secrets("auth as svc-user-admin failed", ["svc-user", "svc-user-admin"]) == "auth as *** failed"


def test_secrets_in_text_returns_bare_values() -> None:
    assert secrets_in_text('x required username="u" password="p1"; principal=me token=t2') == ["p1", "t2"]


@pytest.mark.parametrize("key", ["sasl.password", "ssl.key.password", "sasl.jaas.config", "my.token", "aws.accessKey"])
def test_key_and_spark_patterns_agree(key: str) -> None:
    assert is_sensitive_key(key)
    assert re.search(SPARK_REDACTION_REGEX, key)


def test_py4j_protocol_dumps_of_a_kafka_option_never_reach_a_debug_log(caplog: pytest.LogCaptureFixture) -> None:
    """py4j logs each JVM command at DEBUG with its string arguments on their own lines (the shape below is what
    ``DataFrameReader.option`` sends), so the option's secret value would be logged unmasked."""
    caplog.set_level(logging.DEBUG)
    command = 'c\no42\noption\nskafka.sasl.jaas.config\nsPlainLoginModule required password="s3cr3t-v4lue";\ne\n'
    guard_py4j_logging()
    guard_py4j_logging()  # idempotent
    logging.getLogger("py4j.clientserver").debug(f"Command to send: {command}")
    logging.getLogger("py4j.java_gateway").debug("Answer received: !yro43")
    logging.getLogger("py4j.clientserver").warning("Exception occurred while shutting down gateway")
    assert "s3cr3t-v4lue" not in caplog.text
    assert [r.msg for r in caplog.records] == ["Exception occurred while shutting down gateway"]
    assert len(logging.getLogger("py4j.clientserver").filters) == 1


@pytest.mark.parametrize(
    "option",
    [
        "kafka.sasl.jaas.config",
        "kafka.ssl.keystore.password",
        "kafka.ssl.truststore.password",
        "kafka.ssl.key.password",
        "kafka.sasl.oauthbearer.client.secret",
        "url",
    ],
)
def test_spark_masks_secret_reader_options_in_plans_in_process_and_over_connect(option: str) -> None:
    """Spark masks a data source's options in the plans it shows (explain, the SQL tab) by the runtime setting
    ``spark.sql.redaction.options.regex`` (default ``(?i)url``): the in-process session starts with it, and a Spark
    Connect session sets it itself, so a server started without the product's settings masks them too."""
    from dynamic_kafka.config.models import SparkConfig
    from dynamic_kafka.spark.remote import SESSION_REDACTION
    from dynamic_kafka.spark.session import spark_conf

    in_process = spark_conf(SparkConfig(), jars=[])
    for conf in (in_process, SESSION_REDACTION):
        assert re.search(conf["spark.sql.redaction.options.regex"], option)
    assert not re.search(in_process["spark.sql.redaction.options.regex"], "kafka.bootstrap.servers")
