"""Helpers of the secret tests: a pipeline on the SASL/PLAIN test cluster whose password comes from the
environment, and the check that a password appears in none of a set of outputs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from devtools.testing.kafka import Record, create_topic, produce, unique_name
from devtools.testing.pipeline import PipelineHarness

if TYPE_CHECKING:
    from pathlib import Path

    from devtools.local_kafka import LocalCluster

PASSWORD_VAR = "DYNAMIC_KAFKA_TEST_SECURED_PASSWORD"


def sasl_harness(folder: Path, cluster: LocalCluster, topic: str, **pipeline: Any) -> PipelineHarness:
    """The pipeline ``p`` over ``topic`` of the SASL cluster as ``ingest``, its password ``${env:PASSWORD_VAR}``."""
    harness = PipelineHarness(
        folder,
        clusters={
            "secured": {
                "bootstrap_servers": cluster.bootstrap_servers,
                "properties": {
                    "security.protocol": "SASL_PLAINTEXT",
                    "sasl.mechanism": "PLAIN",
                    "sasl.username": "ingest",
                    "sasl.password": f"${{env:{PASSWORD_VAR}}}",
                },
            }
        },
        value={"format": "string"},
        **pipeline,
    )
    harness.set_streams({"orders": {"secured": [topic]}})
    return harness


def secured_topic(cluster: LocalCluster, password: str, count: int) -> tuple[str, list[Record]]:
    """A fresh 2-partition topic on the SASL cluster with ``count`` records; returns its name and the records."""
    client = cluster.client_config(password)
    topic = unique_name("secured")
    create_topic(client, topic, 2)
    return topic, produce(client, topic, [Record(value=f"s{i}".encode(), key=b"k") for i in range(count)])


def assert_absent(secrets: list[str], texts: dict[str, str | bytes]) -> None:
    """Fails, naming the output and the text around it (the secret masked), if a secret appears in any text."""
    for secret in secrets:
        for where, text in texts.items():
            shown = text.decode(errors="replace") if isinstance(text, bytes) else text
            at = shown.find(secret)
            # The context says which field carried it; the secret itself is replaced so the report does not leak it.
            context = shown[max(0, at - 160) : at + len(secret) + 40].replace(secret, "<PASSWORD>")
            assert at < 0, f"the password appears in {where}: ...{context}..."
