"""Spark session settings, without starting Spark: defaults, overrides, jar lists, redaction, lazy import, and
where a Spark Connect server binds."""

from __future__ import annotations

import re
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from dynamic_kafka.config.models import SparkConfig
from dynamic_kafka.spark.packages import KAFKA_TOKENPROVIDER, SPARK_AVRO_PACKAGE, delta_package
from dynamic_kafka.spark.session import (
    INTERPRETED_MAX_RECORDS,
    REDACTION_REGEX,
    codegen_settings,
    requested_packages,
    spark_conf,
)

if TYPE_CHECKING:
    from pathlib import Path


def test_defaults_enable_delta_utc_micros_and_pass_every_jar_directly(tmp_path: Path) -> None:
    conf = spark_conf(SparkConfig(), jars=[tmp_path / "tp.jar", tmp_path / "delta.jar"])
    assert conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    assert conf["spark.sql.catalog.spark_catalog"] == "org.apache.spark.sql.delta.catalog.DeltaCatalog"
    assert conf["spark.sql.shuffle.partitions"] == "4"
    assert conf["spark.sql.parquet.outputTimestampType"] == "TIMESTAMP_MICROS"
    assert conf["spark.sql.session.timeZone"] == "UTC"
    assert conf["spark.ui.enabled"] == "false"
    assert conf["spark.jars"] == f"{tmp_path / 'tp.jar'},{tmp_path / 'delta.jar'}"
    # Nothing is left for spark-submit's Ivy to resolve.
    assert not {"spark.jars.packages", "spark.jars.excludes", "spark.jars.ivy"} & conf.keys()
    packages, exclusions = requested_packages(SparkConfig(), "4.1.3")
    assert packages == [delta_package("4.1.3"), "org.apache.spark:spark-sql-kafka-0-10_2.13:4.1.3", SPARK_AVRO_PACKAGE]
    assert packages[0].startswith("io.delta:delta-spark_4.1_2.13:")
    assert exclusions == []


def test_user_settings_win_and_jar_lists_are_merged(tmp_path: Path) -> None:
    settings = SparkConfig(
        master="local[2]",
        ui_enabled=True,
        conf={
            "spark.sql.shuffle.partitions": "8",
            "spark.jars.packages": "g:a:1, g:b:2",
            "spark.jars": "/opt/x.jar",
            "spark.jars.excludes": "g:c",
        },
    )
    conf = spark_conf(settings, jars=[tmp_path / "tp.jar"])
    assert conf["spark.sql.shuffle.partitions"] == "8"
    assert conf["spark.ui.enabled"] == "true"
    assert conf["spark.jars"] == f"{tmp_path / 'tp.jar'},/opt/x.jar"
    packages, exclusions = requested_packages(settings, "4.1.3")
    assert packages[1:] == ["org.apache.spark:spark-sql-kafka-0-10_2.13:4.1.3", SPARK_AVRO_PACKAGE, "g:a:1", "g:b:2"]
    assert exclusions == ["g:c"]
    assert KAFKA_TOKENPROVIDER.endswith("spark-token-provider-kafka-0-10_2.13")


@pytest.mark.parametrize(
    "key",
    ["kafka.sasl.jaas.config", "kafka.ssl.key.password", "kafka.ssl.keystore.password", "sasl.password", "my.token"],
)
def test_redaction_covers_kafka_credential_keys(key: str) -> None:
    assert re.search(REDACTION_REGEX, key)


def test_settings_are_frozen_and_strict() -> None:
    with pytest.raises(ValueError, match="extra"):
        SparkConfig.model_validate({"master": "local", "unknown": 1})


def test_importing_the_module_loads_no_pyspark() -> None:
    code = (
        "import sys, dynamic_kafka.spark.session; "
        "sys.exit(any(m.split('.')[0] in {'pyspark', 'py4j', 'delta'} for m in sys.modules))"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_an_unwritable_cache_costs_speed_not_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dynamic_kafka.spark import session as spark_module
    from dynamic_kafka.spark.class_archive import ClassArchive

    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("DYNAMIC_KAFKA_CACHE", str(blocker / "cache"))
    jar = tmp_path / "resolved.jar"
    jar.write_bytes(b"jar")
    launch = spark_module.SessionLaunch(conf={}, archive=ClassArchive([str(jar)], spark_version="4.1.3"))

    spark_module._record_start_up_aids(launch, SparkConfig(), recording=False)

    assert not (blocker / "cache").exists()


# --- Spark Connect -------------------------------------------------------------------------------------------------


def test_remote_must_be_a_spark_connect_url_and_its_parameters_are_never_shown() -> None:
    assert SparkConfig(remote="sc://127.0.0.1:15002").shown_remote == "sc://127.0.0.1:15002"
    with_token = SparkConfig(remote="sc://spark.example:443/;use_ssl=true;token=s3cr3t")
    assert with_token.shown_remote == "sc://spark.example:443/;..."
    assert SparkConfig().remote is None
    for wrong in ("http://127.0.0.1:15002", "127.0.0.1:15002", "sc://", "sc://host:port"):
        with pytest.raises(ValueError, match="not a Spark Connect URL"):
            SparkConfig(remote=wrong)


def test_a_loopback_client_takes_its_token_only_from_config_url_or_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dynamic_kafka.spark.remote import client_token

    # What a local development server once left in the cache: a port record naming a folder with its token. The
    # product reads no other tool's files: a client finds the token through documented means only.
    monkeypatch.setenv("DYNAMIC_KAFKA_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SPARK_CONNECT_AUTHENTICATE_TOKEN", raising=False)
    server = tmp_path / "server"
    server.mkdir()
    (server / "token").write_text("left-by-another-tool\n")
    (server / "server.json").write_text('{"port": 15999}')
    (tmp_path / "cache" / "spark-connect-ports").mkdir(parents=True)
    (tmp_path / "cache" / "spark-connect-ports" / "15999").write_text(f"{server}\n")
    assert client_token(SparkConfig(remote="sc://127.0.0.1:15999")) is None
    assert client_token(SparkConfig(remote="sc://127.0.0.1:15999/;token=from-url")) == "from-url"
    monkeypatch.setenv("SPARK_CONNECT_AUTHENTICATE_TOKEN", "from-env")
    assert client_token(SparkConfig(remote="sc://127.0.0.1:15999")) == "from-env"
    monkeypatch.setenv("CONNECT_TOKEN", "from-config")
    assert client_token(SparkConfig(remote="sc://127.0.0.1:15999", token="${env:CONNECT_TOKEN}")) == "from-config"


def test_a_wrong_remote_in_the_project_file_is_a_config_error_without_its_token(tmp_path: Path) -> None:
    from dynamic_kafka.config.loader import load_project_config
    from dynamic_kafka.errors import ConfigError

    config = tmp_path / "dynamic_kafka.yaml"
    config.write_text(
        "metadata_service: {type: file, path: m.yaml}\nspark: {remote: 'grpc://h:1/;token=s3cr3t'}\n"
        "pipelines: [{id: p, streams: [s], sink: {path: sink}}]\n"
    )
    with pytest.raises(ConfigError, match=r"spark\.remote") as failure:
        load_project_config(config)
    assert "s3cr3t" not in str(failure.value)


def test_a_create_table_column_list_quotes_every_name_and_keeps_nested_types() -> None:
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        DecimalType,
        LongType,
        MapType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    from dynamic_kafka.sink.tables import ddl_type, delta_path_identifier, sql_string

    value = StructType(
        [
            StructField("a`b", LongType()),
            StructField("tags", ArrayType(StringType())),
            StructField("m", MapType(StringType(), DecimalType(10, 2))),
            StructField("when", TimestampType()),
        ]
    )
    assert ddl_type(value) == (
        "STRUCT<`a``b`: bigint, `tags`: ARRAY<string>, `m`: MAP<string, decimal(10,2)>, `when`: timestamp>"
    )
    assert ddl_type(BinaryType()) == "binary"
    assert delta_path_identifier("/data/my`table") == "delta.`/data/my``table`"
    assert sql_string("it's \\") == "'it\\'s \\\\'"


def test_the_remote_session_module_imports_no_pyspark() -> None:
    code = "import sys, dynamic_kafka.spark.remote, dynamic_kafka.spark.session; print('pyspark' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


@pytest.mark.parametrize(
    ("master", "on_loopback"),
    [
        ("local[*]", True),
        ("spark://127.0.0.1:7077", True),
        ("spark://localhost:7077", True),
        ("spark://[::1]:7077", True),
        ("spark://127.0.0.1:7077,127.0.0.2:7078", True),
        ("spark://127.0.0.1:7077,10.0.0.5:7077", False),
        ("spark://10.0.0.5:7077", False),
        ("spark://spark-master:7077", False),
    ],
)
def test_a_connect_server_binds_to_loopback_only_when_every_executor_is_on_this_host(
    master: str, on_loopback: bool
) -> None:
    from dynamic_kafka.spark.connect_server import master_on_loopback

    assert master_on_loopback(master) is on_loopback


def test_only_a_write_of_known_small_size_runs_without_code_generation() -> None:
    # A write compiles some generated classes again: a small write is cheaper interpreted. A larger one states
    # code generation on, since a pipeline's shared Connect session may hold a killed small write's "off".
    off = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}
    on = {"spark.sql.codegen.wholeStage": "true", "spark.sql.codegen.factoryMode": "FALLBACK"}
    assert codegen_settings(10_000) == off
    assert codegen_settings(INTERPRETED_MAX_RECORDS) == off
    assert codegen_settings(INTERPRETED_MAX_RECORDS + 1) == on
    assert codegen_settings(None) == on  # unknown (a bootstrap archive's rows)


def test_a_pipelines_shared_connect_session_is_named_by_pipeline_server_settings_token_and_generation() -> None:
    import uuid

    from dynamic_kafka.spark.remote import shared_session_id

    remote = SparkConfig(remote="sc://127.0.0.1:15002")
    name = "pipeline orders of state /data/a"
    first = shared_session_id(remote, name, token="server-token")
    assert first is not None
    assert uuid.UUID(first)
    assert shared_session_id(remote, name, token="server-token") == first
    others = {
        shared_session_id(remote, "pipeline orders of state /data/b", token="server-token"),
        shared_session_id(SparkConfig(remote="sc://10.0.0.2:15002"), name, token="server-token"),
        # A setting removed from the project must not linger: other settings, another session.
        shared_session_id(
            SparkConfig(remote="sc://127.0.0.1:15002", conf={"spark.sql.ansi.enabled": "false"}),
            name,
            token="server-token",
        ),
        # The config alone does not name the session: the id is keyed with the server's token.
        shared_session_id(remote, name, token=None),
        shared_session_id(remote, name, token="another-token"),
        # The server closed the session: the next generation is another id.
        shared_session_id(remote, name, token="server-token", generation=1),
    }
    assert first not in others
    assert len(others) == 6
    assert shared_session_id(remote, None, token="server-token") is None
    assert shared_session_id(SparkConfig(remote="sc://h:1/;session_id=" + str(uuid.uuid4())), "x", token=None) is None
