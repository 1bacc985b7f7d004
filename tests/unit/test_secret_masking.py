"""The one secret-masking function and the one sensitive-key pattern."""

from __future__ import annotations

import re

import pytest

from dynamic_kafka.secrets import SPARK_REDACTION_REGEX, is_sensitive_key, mask_secrets, secrets_in_text


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
