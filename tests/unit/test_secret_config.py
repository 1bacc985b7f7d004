"""Issue 11, holes 7, 10, 11 and 13: secrets never echoed by validation errors or reprs, YAML that would silently
change a value refused, secret references honoured only from trusted sources, no secret in the fingerprint."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from dynamic_kafka.config.loader import load_project_config
from dynamic_kafka.config.models import ProjectConfig, SparkConfig
from dynamic_kafka.errors import ConfigError
from dynamic_kafka.initializers import CommittedOffsets
from dynamic_kafka.metadata.file import ClusterEntry, parse_metadata_file
from dynamic_kafka.metadata.memory import InMemoryMetadataService
from dynamic_kafka.metadata.models import ClusterMetadata, KafkaStream, metadata_fingerprint
from dynamic_kafka.protocol.context import PipelineContext

if TYPE_CHECKING:
    from pathlib import Path

SECRET = "84736251"


def project_file(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "dynamic_kafka.yaml"
    path.write_text(body)
    return path


def metadata_file(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "metadata.yaml"
    path.write_text(body)
    return path


# --- hole 7: validation errors and reprs -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "service",
    [
        # a number where a string is required: pydantic's error carries the input
        f"{{type: single_cluster, cluster_id: c, bootstrap_servers: 'h:1', properties: {{sasl.password: {SECRET}}}}}",
        # a whole section of the wrong type: the input is the section
        f"{{type: single_cluster, cluster_id: c, bootstrap_servers: 'h:1', properties: 'sasl.password={SECRET}'}}",
        # an unknown service type: the input is the whole mapping, password included
        f"{{type: remote, url: 'http://x', password: '{SECRET}'}}",
    ],
    ids=["number", "section-of-wrong-type", "unknown-union-tag"],
)
def test_config_validation_errors_never_echo_a_secret(tmp_path: Path, service: str) -> None:
    path = project_file(tmp_path, f"metadata_service: {service}\n")

    with pytest.raises(ConfigError) as raised:
        load_project_config(path)

    assert "metadata_service" in str(raised.value)
    assert SECRET not in str(raised.value)
    assert SECRET not in repr(raised.value.args)


def test_a_spark_conf_secret_of_the_wrong_type_is_not_echoed_but_names_the_key(tmp_path: Path) -> None:
    path = project_file(
        tmp_path,
        "metadata_service: {type: file, path: m.yaml}\n"
        f"spark: {{conf: {{spark.hadoop.fs.s3a.secret.key: {SECRET}, spark.driver.cores: 2}}}}\n",
    )

    with pytest.raises(ConfigError) as raised:
        load_project_config(path)

    message = str(raised.value)
    assert "spark.conf" in message
    assert "spark.hadoop.fs.s3a.secret.key" in message
    assert "quote" in message
    assert SECRET not in message


def test_every_config_and_metadata_repr_masks_secrets_at_any_depth() -> None:
    project = ProjectConfig.model_validate(
        {
            "metadata_service": {
                "type": "python",
                "import_path": "pkg.mod:factory",
                "args": {"endpoint": "http://x", "auth": {"api_token": SECRET}},
            },
            "spark": {"conf": {"spark.hadoop.fs.s3a.secret.key": SECRET, "spark.driver.memory": "1g"}},
        }
    )
    cluster = ClusterMetadata(cluster_id="c", bootstrap_servers="h:1", properties={"sasl.password": SECRET})
    entry = ClusterEntry(bootstrap_servers="h:1", properties={"sasl.jaas.config": f'password="{SECRET}"'})
    shown = [
        repr(project),
        str(project),
        repr(project.spark),
        repr(SparkConfig(conf={"spark.kafka.ssl.key.password": SECRET})),
        repr(cluster),
        repr(KafkaStream(stream_id="s", clusters={"c": cluster})),
        repr(entry),
    ]
    for text in shown:
        assert SECRET not in text, text
    assert "spark.driver.memory': '1g'" in shown[0]
    assert "http://x" in shown[0]


# --- hole 10: YAML that silently changes what the user wrote ---------------------------------------------------


def test_a_duplicate_stream_in_the_metadata_file_is_refused_with_file_line_and_key(tmp_path: Path) -> None:
    path = metadata_file(
        tmp_path,
        "clusters:\n  east: {bootstrap_servers: 'h:1'}\n"
        "streams:\n  orders: {east: [orders]}\n  payments: {east: [payments]}\n  orders: {east: [orders-v2]}\n",
    )

    with pytest.raises(ConfigError) as raised:
        parse_metadata_file(path)

    message = str(raised.value)
    assert str(path) in message
    assert "duplicate key 'orders'" in message
    assert "line 6" in message
    assert "first at line 4" in message


def test_a_duplicate_key_in_the_project_config_is_refused(tmp_path: Path) -> None:
    path = project_file(
        tmp_path,
        "metadata_service: {type: file, path: m.yaml}\n"
        "pipelines:\n  - id: p\n    streams: [a]\n    sink: {path: s}\n    sink: {path: t}\n",
    )

    with pytest.raises(ConfigError, match=r"duplicate key 'sink' \(first at line 5\).* at line 6"):
        load_project_config(path)


def test_yaml_merge_keys_may_still_override(tmp_path: Path) -> None:
    path = metadata_file(
        tmp_path,
        "base: &base {bootstrap_servers: 'h:1', properties: {security.protocol: SSL}}\n"
        "clusters:\n  east: {<<: *base, bootstrap_servers: 'h:2'}\n"
        "streams: {}\n",
    )
    path.write_text(path.read_text().replace("base: &base", "clusters_defaults: &base", 1))
    with pytest.raises(ConfigError, match="clusters_defaults"):  # an unknown top-level key, not a duplicate
        parse_metadata_file(path)


@pytest.mark.parametrize(
    ("value", "kind"), [("0123", "a number"), ("yes", "a boolean"), ("1.5", "a number"), (SECRET, "a number")]
)
def test_an_unquoted_password_is_refused_without_showing_it(tmp_path: Path, value: str, kind: str) -> None:
    path = metadata_file(
        tmp_path,
        "clusters:\n  east:\n    bootstrap_servers: 'h:1'\n"
        f"    properties: {{sasl.password: {value}}}\nstreams: {{}}\n",
    )

    with pytest.raises(ConfigError) as raised:
        parse_metadata_file(path)

    # The file's own path (pytest's numbered temporary folder, e.g. pytest-83) is not the value.
    message = str(raised.value).replace(str(path), "<file>")
    assert "clusters.east.properties" in message
    assert "'sasl.password'" in message
    assert f"is {kind}, not a string; quote it" in message
    assert SECRET not in message
    assert "83" not in message  # 0123 as YAML 1.1 reads it
    assert "True" not in message


def test_a_non_sensitive_unquoted_property_is_refused_and_shown(tmp_path: Path) -> None:
    path = metadata_file(
        tmp_path, "clusters:\n  east: {bootstrap_servers: 'h:1', properties: {linger.ms: 5}}\nstreams: {}\n"
    )

    with pytest.raises(ConfigError, match=r"'linger.ms' is a number \(5\), not a string; quote it"):
        parse_metadata_file(path)


def test_quoted_properties_are_kept_exactly(tmp_path: Path) -> None:
    path = metadata_file(
        tmp_path,
        "clusters:\n  east: {bootstrap_servers: 'h:1', properties: {sasl.password: '0123', x: 'yes'}}\nstreams: {}\n",
    )

    assert parse_metadata_file(path).clusters["east"].properties == {"sasl.password": "0123", "x": "yes"}


# --- hole 11: secret references only from trusted sources ------------------------------------------------------


def context_with(tmp_path: Path, service: InMemoryMetadataService, allow: list[str] | None = None) -> PipelineContext:
    project = ProjectConfig.model_validate(
        {
            "metadata_service": {"type": "file", "path": str(tmp_path / "unused.yaml")},
            "pipelines": [{"id": "p", "streams": ["orders"], "sink": {"path": str(tmp_path / "sink")}}],
            "secret_references": {"env": allow or []},
        }
    )
    return PipelineContext(project, "p", metadata_service=service)


def in_memory(properties: dict[str, str]) -> InMemoryMetadataService:
    cluster = ClusterMetadata(
        cluster_id="evil", bootstrap_servers="attacker:9092", properties=properties, topics=frozenset({"orders"})
    )
    return InMemoryMetadataService([KafkaStream(stream_id="orders", clusters={"evil": cluster})])


def test_a_reference_from_a_service_the_user_does_not_write_is_refused(tmp_path: Path) -> None:
    context = context_with(tmp_path, in_memory({"sasl.password": "${env:AWS_SECRET_ACCESS_KEY}"}))

    with pytest.raises(ConfigError) as raised:
        context.resolve()

    message = str(raised.value)
    assert "'sasl.password' of cluster 'evil'" in message
    assert "${env:AWS_SECRET_ACCESS_KEY}" in message
    assert "secret_references.env" in message
    with pytest.raises(ConfigError, match="cluster 'evil'"):
        context.service.get_all_streams()


def test_an_allowlisted_reference_and_literals_are_accepted(tmp_path: Path) -> None:
    context = context_with(
        tmp_path, in_memory({"sasl.password": "${env:EAST_PW}", "sasl.username": "u"}), allow=["EAST_PW"]
    )

    assert set(context.resolve().streams) == {"orders"}


def test_references_in_the_users_own_metadata_file_are_trusted(tmp_path: Path) -> None:
    metadata_file(
        tmp_path,
        "clusters:\n  east: {bootstrap_servers: 'h:1', properties: {sasl.password: '${env:EAST_PW}'}}\n"
        "streams:\n  orders: {east: [orders]}\n",
    )
    project = ProjectConfig.model_validate(
        {
            "metadata_service": {"type": "file", "path": str(tmp_path / "metadata.yaml")},
            "pipelines": [{"id": "p", "streams": ["orders"], "sink": {"path": str(tmp_path / "sink")}}],
        }
    )

    assert set(PipelineContext(project, "p").resolve().streams) == {"orders"}


def test_a_file_reference_allowlist_takes_patterns(tmp_path: Path) -> None:
    from dynamic_kafka.secrets import SecretReferencePolicy

    policy = SecretReferencePolicy(files=(str(tmp_path / "kafka-*"),))
    assert policy.allows("file", str(tmp_path / "kafka-east"))
    assert not policy.allows("file", str(tmp_path / "other"))
    assert not policy.allows("env", "HOME")


# --- hole 13: fingerprint and the committed initializer ----------------------------------------------------------


def fingerprint(password: str) -> str:
    cluster = ClusterMetadata(
        cluster_id="c", bootstrap_servers="h:1", properties={"sasl.password": password}, topics=frozenset({"t"})
    )
    return metadata_fingerprint([KafkaStream(stream_id="s", clusters={"c": cluster})])


def test_the_fingerprint_hashes_no_literal_secret() -> None:
    # Two literal passwords give one fingerprint: the hash is computed over the masked form, not the secret.
    assert fingerprint("hunter2") == fingerprint(SECRET)
    # References are names, not secrets: changing one is a metadata change.
    assert fingerprint("${env:A}") != fingerprint("${env:B}")


def test_a_committed_initializer_without_reset_fails_where_the_group_has_no_offset() -> None:
    assert CommittedOffsets(group_id="g").reset == "none"
