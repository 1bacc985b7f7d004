"""Pure parts of the data path (no JVM, no broker): Kafka client property translation for Spark, the Spark Kafka
read options built from splits, decode policy helpers, and the sink's error and MERGE-scope helpers."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from dynamic_kafka.decoding.formats import can_fail
from dynamic_kafka.errors import ConfigError, DecodeError, UndecodableRecordError
from dynamic_kafka.kafka.java_properties import java_client_properties
from dynamic_kafka.metadata.models import ClusterMetadata
from dynamic_kafka.sink.incremental import _decode_error_from
from dynamic_kafka.sink.merge import _merge_scope
from dynamic_kafka.sink.tables import safe_text
from dynamic_kafka.spark.reader import kafka_read_options, output_schema
from dynamic_kafka.spark.schema import OUTPUT_FIELDS
from tests.support.builders import a_pipeline, a_split

if TYPE_CHECKING:
    from dynamic_kafka.config.models import PipelineConfig
    from dynamic_kafka.model.plan import Split

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"


def _split(topic: str, partition: int, start: int, stop: int, cluster_id: str = "east") -> Split:
    return a_split(partition, start, stop, topic=topic, cluster=cluster_id, bootstrap="127.0.0.1:1")


def _pipeline(**settings: object) -> PipelineConfig:
    return a_pipeline(**{"streams": ["s"], **settings})


# --- property translation ---------------------------------------------------------------------------------------


SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTH = "org.apache.kafka.common.security.oauthbearer"


@pytest.mark.parametrize(
    ("properties", "expected"),
    [
        pytest.param(
            {
                "security.protocol": "sasl_ssl",
                "sasl.mechanisms": "plain",
                "sasl.username": "ingest",
                "sasl.password": "p4ss",
            },
            {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "PLAIN",
                "sasl.jaas.config": f'{PLAIN} required username="ingest" password="p4ss";',
            },
            id="username-and-password-become-a-plain-jaas-config",
        ),
        *(
            pytest.param(
                {"sasl.mechanism": mechanism, "sasl.username": "u", "sasl.password": "p"},
                {"sasl.mechanism": mechanism, "sasl.jaas.config": f'{SCRAM} required username="u" password="p";'},
                id=f"{mechanism}-uses-the-scram-login-module",
            )
            for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512")
        ),
        pytest.param(
            {"sasl.mechanism": "PLAIN", "sasl.username": "a", "sasl.password": 'x"y\\z'},
            {"sasl.mechanism": "PLAIN", "sasl.jaas.config": f'{PLAIN} required username="a" password="x\\"y\\\\z";'},
            id="quotes-and-backslashes-are-escaped-for-the-jaas-parser",
        ),
        pytest.param(
            {
                "sasl.jaas.config": f'{PLAIN} required username="j" password="k";',
                "sasl.username": "u",
                "sasl.password": "p",
            },
            {"sasl.mechanism": "PLAIN", "sasl.jaas.config": f'{PLAIN} required username="j" password="k";'},
            id="an-explicit-jaas-config-wins-over-username-and-password-and-implies-its-mechanism",
        ),
        pytest.param(
            {
                "sasl.mechanism": "OAUTHBEARER",
                "sasl.oauthbearer.method": "oidc",
                "sasl.oauthbearer.client.id": "app",
                "sasl.oauthbearer.client.secret": "s3cret",
                "sasl.oauthbearer.scope": "kafka",
                "sasl.oauthbearer.token.endpoint.url": "https://idp/token",
            },
            {
                "sasl.mechanism": "OAUTHBEARER",
                "sasl.jaas.config": f"{OAUTH}.OAuthBearerLoginModule required "
                'clientId="app" clientSecret="s3cret" scope="kafka";',
                "sasl.login.callback.handler.class": f"{OAUTH}.OAuthBearerLoginCallbackHandler",
                "sasl.oauthbearer.token.endpoint.url": "https://idp/token",
            },
            id="oidc-client-credentials-map-to-the-oauthbearer-login-module",
        ),
        pytest.param(
            {
                "ssl.ca.location": "/etc/ca.pem",
                "ssl.certificate.location": "/etc/client.pem",
                "ssl.key.location": "/etc/client.pem",
                "ssl.key.password": "kp",
                "ssl.endpoint.identification.algorithm": "none",
                "enable.ssl.certificate.verification": "true",
                "fetch.wait.max.ms": "100",
                "socket.timeout.ms": "30000",
                "client.id": "dk",
            },
            {
                "ssl.truststore.location": "/etc/ca.pem",
                "ssl.truststore.type": "PEM",
                "ssl.keystore.location": "/etc/client.pem",
                "ssl.keystore.type": "PEM",
                "ssl.key.password": "kp",
                "ssl.endpoint.identification.algorithm": "",
                "fetch.max.wait.ms": "100",
                "request.timeout.ms": "30000",
                "client.id": "dk",
            },
            id="ssl-locations-and-renamed-settings-translate",
        ),
        pytest.param(
            {
                "bootstrap.servers": "elsewhere:9092",
                "group.id": "g",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": "true",
                "isolation.level": "read_uncommitted",
                "debug": "all",
                "max.poll.records": "500",
            },
            {"max.poll.records": "500"},
            id="keys-the-reader-or-spark-own-are-dropped",
        ),
    ],
)
def test_librdkafka_properties_translate_to_java_client_properties(
    properties: dict[str, str], expected: dict[str, str]
) -> None:
    assert java_client_properties(properties, cluster_id="east") == expected


@pytest.mark.parametrize(
    ("properties", "named"),
    [
        ({"enable.ssl.certificate.verification": "false"}, "enable.ssl.certificate.verification"),
        ({"ssl.certificate.location": "/a.pem", "ssl.key.location": "/b.pem"}, "ssl.key.location"),
        ({"ssl.key.location": "/b.pem"}, "ssl.certificate.location"),
        ({"sasl.mechanism": "GSSAPI", "sasl.username": "u", "sasl.password": "topsecret"}, "GSSAPI"),
    ],
)
def test_settings_without_a_java_equivalent_fail_naming_the_key_not_the_value(
    properties: dict[str, str], named: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        java_client_properties(properties, cluster_id="east")
    assert named in str(raised.value)
    assert "'east'" in str(raised.value)
    assert "topsecret" not in str(raised.value)


# --- read options -----------------------------------------------------------------------------------------------


def test_read_options_name_exact_offsets_and_resolve_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EAST_PASSWORD", "resolved-secret")
    cluster = ClusterMetadata(
        cluster_id="east",
        bootstrap_servers="10.0.0.1:9092",
        properties={
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "ingest",
            "sasl.password": "${env:EAST_PASSWORD}",
        },
    )
    splits = [_split("b", 1, 0, 7), _split("a", 0, 10, 20), _split("b", 0, 3, 4)]

    options = kafka_read_options(cluster, splits, isolation_level="read_committed", min_partitions=8)

    assert json.loads(options["assign"]) == {"a": [0], "b": [0, 1]}
    assert json.loads(options["startingOffsets"]) == {"a": {"0": 10}, "b": {"0": 3, "1": 0}}
    assert json.loads(options["endingOffsets"]) == {"a": {"0": 20}, "b": {"0": 4, "1": 7}}
    assert options["kafka.bootstrap.servers"] == "10.0.0.1:9092"
    assert options["kafka.isolation.level"] == "read_committed"
    assert options["kafka.security.protocol"] == "SASL_PLAINTEXT"
    assert options["kafka.sasl.jaas.config"] == f'{PLAIN} required username="ingest" password="resolved-secret";'
    assert options["includeHeaders"] == options["failOnDataLoss"] == "true"
    assert options["minPartitions"] == "8"
    assert "resolved-secret" not in repr(cluster)


def test_the_readers_output_schema_built_on_the_client_is_the_ddl_of_its_fields() -> None:
    # Built without asking Spark to parse DDL (a round trip through Spark Connect): it must say what the DDL says.
    ddl = ",".join(f"{name}:{kind.lower().replace(': ', ':').replace(', ', ',')}" for name, kind in OUTPUT_FIELDS)
    assert output_schema().simpleString() == f"struct<{ddl}>"
    assert all(field.nullable for field in output_schema().fields)


def test_read_options_reject_splits_of_another_cluster_or_twice_the_same_partition() -> None:
    cluster = ClusterMetadata(cluster_id="east", bootstrap_servers="h:1")
    with pytest.raises(ConfigError, match="does not belong"):
        kafka_read_options(cluster, [_split("a", 0, 0, 1, cluster_id="west")], isolation_level="read_committed")
    with pytest.raises(ConfigError, match="planned twice"):
        kafka_read_options(cluster, [_split("a", 0, 0, 1), _split("a", 0, 1, 2)], isolation_level="read_committed")


# --- decode policy and errors -----------------------------------------------------------------------------------


def test_only_bytes_keys_and_values_can_never_fail_to_decode() -> None:
    assert not can_fail(_pipeline())
    assert can_fail(_pipeline(value={"format": "string"}))
    assert can_fail(_pipeline(key={"format": "string"}))
    assert can_fail(_pipeline(value={"format": "json", "schema": "id INT"}))


def test_undecodable_record_error_carries_its_coordinates() -> None:
    error = UndecodableRecordError(cluster_id="east", topic="t", partition=2, offset=41, reason="value is bad")
    assert isinstance(error, DecodeError)
    assert not error.retriable
    assert (error.cluster_id, error.topic, error.partition, error.offset) == ("east", "t", 2, 41)
    assert "east/t[2] offset 41: value is bad" in str(error)


def test_the_task_failure_marker_is_turned_back_into_a_decode_error() -> None:
    text = (
        "Job aborted ... [USER_RAISED_EXCEPTION] dynamic-kafka-undecodable["
        '{"cluster_id":"we}st","topic":"t","partition":0,"offset":5,"reason":"value is not valid UTF-8"}'
        "]dynamic-kafka-undecodable SQLSTATE: P0001"
    )
    error = _decode_error_from(RuntimeError(text))
    assert isinstance(error, UndecodableRecordError)
    assert (error.cluster_id, error.offset, error.reason) == ("we}st", 5, "value is not valid UTF-8")
    assert _decode_error_from(RuntimeError("some other failure")) is None


def test_the_marker_of_an_archive_row_without_coordinates_names_its_stream_and_timestamp() -> None:
    text = (
        "Job aborted ... dynamic-kafka-undecodable["
        '{"cluster_id":"archive","reason":"value is not JSON","stream_id":"orders",'
        '"timestamp":"2025-12-31T23:58:20.000Z"}'
        "]dynamic-kafka-undecodable SQLSTATE: P0001"
    )
    error = _decode_error_from(RuntimeError(text))
    assert isinstance(error, UndecodableRecordError)
    assert (error.topic, error.partition, error.offset) == (None, None, None)
    assert (
        "undecodable record at a bootstrap archive row of stream 'orders' (cluster 'archive', timestamp "
        "2025-12-31T23:58:20.000Z, no Kafka coordinates): value is not JSON" in str(error)
    )


def test_foreign_error_text_is_bounded_and_masks_credentials() -> None:
    error = RuntimeError(
        'Login failed for sasl.jaas.config=PlainLoginModule required username="u" password="hunter2"; more\nstack'
    )
    text = safe_text(error)
    assert "hunter2" not in text
    assert "stack" not in text
    assert len(safe_text(RuntimeError("x" * 5000))) == 600


def test_merge_scope_covers_every_source_row_from_its_statistics() -> None:
    metrics = {
        "records": 5,
        "min_ts": 1_000,
        "max_ts": 2_000,
        "records_0": 3,
        "min_offset_0": 10,
        "max_offset_0": 12,
        "records_1": 2,
        "min_offset_1": 0,
        "max_offset_1": 1,
    }
    scope = _merge_scope(metrics, [("east", "a"), ("west", "it's")])
    assert scope == (
        "t.`timestamp` BETWEEN timestamp_micros(1000) AND timestamp_micros(2000) AND "
        "((t.`cluster` = 'east' AND t.`topic` = 'a' AND t.`offset` BETWEEN 10 AND 12) OR "
        "(t.`cluster` = 'west' AND t.`topic` = 'it\\'s' AND t.`offset` BETWEEN 0 AND 1))"
    )
    # Rows outside the listed pairs: only the event-time bound is safe.
    assert _merge_scope({**metrics, "records": 6}, [("east", "a"), ("west", "it's")]) == (
        "t.`timestamp` BETWEEN timestamp_micros(1000) AND timestamp_micros(2000)"
    )
    assert _merge_scope({"records": 0, "min_ts": None}, []) == "false"
