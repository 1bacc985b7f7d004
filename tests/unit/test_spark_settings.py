"""Spark session settings, without starting Spark: defaults, overrides, jar lists, redaction, lazy import."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from dynamic_kafka.config import SparkConfig
from dynamic_kafka.spark.packages import ResolvedJars, delta_package
from dynamic_kafka.spark.session import KAFKA_TOKENPROVIDER, REDACTION_REGEX, spark_conf


def test_defaults_enable_delta_utc_micros_and_a_cached_ivy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DYNAMIC_KAFKA_CACHE", str(tmp_path))
    conf, packages = spark_conf(SparkConfig(), spark_version="4.1.3", extra_jars=[tmp_path / "tp.jar"])
    assert conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    assert conf["spark.sql.catalog.spark_catalog"] == "org.apache.spark.sql.delta.catalog.DeltaCatalog"
    assert conf["spark.sql.shuffle.partitions"] == "4"
    assert conf["spark.sql.parquet.outputTimestampType"] == "TIMESTAMP_MICROS"
    assert conf["spark.sql.session.timeZone"] == "UTC"
    assert conf["spark.ui.enabled"] == "false"
    assert conf["spark.jars.ivy"] == str(tmp_path / "ivy")
    assert conf["spark.jars"] == str(tmp_path / "tp.jar")
    assert conf["spark.jars.excludes"] == KAFKA_TOKENPROVIDER
    assert "spark.jars.packages" not in conf
    assert packages == [delta_package("4.1.3"), "org.apache.spark:spark-sql-kafka-0-10_2.13:4.1.3"]
    assert packages[0].startswith("io.delta:delta-spark_4.1_2.13:")


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
    conf, packages = spark_conf(settings, spark_version="4.1.3", extra_jars=[tmp_path / "tp.jar"])
    assert conf["spark.sql.shuffle.partitions"] == "8"
    assert conf["spark.ui.enabled"] == "true"
    assert conf["spark.jars"] == f"{tmp_path / 'tp.jar'},/opt/x.jar"
    assert conf["spark.jars.excludes"] == f"{KAFKA_TOKENPROVIDER},g:c"
    assert packages[1:] == ["org.apache.spark:spark-sql-kafka-0-10_2.13:4.1.3", "g:a:1", "g:b:2"]


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


def test_resolved_jars_are_recorded_and_reused_while_every_jar_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DYNAMIC_KAFKA_CACHE", str(tmp_path / "cache"))
    jars = [tmp_path / "a b.jar", tmp_path / "c.jar"]
    for jar in jars:
        jar.write_bytes(b"jar")
    own = str(tmp_path / "tp.jar")
    conf = {"spark.jars.ivy": "/ivy", "spark.jars": own}
    resolution = ResolvedJars(["g:a:1"], conf)
    assert resolution.load() is None
    resolution.save(f"file://{own},file://{tmp_path}/a%20b.jar,{jars[1]}", own)
    assert ResolvedJars(["g:a:1"], conf).load() == [str(j) for j in jars]
    assert ResolvedJars(["g:a:2"], conf).load() is None
    assert ResolvedJars(["g:a:1"], {**conf, "spark.jars.excludes": "g:b"}).load() is None
    jars[1].unlink()
    assert ResolvedJars(["g:a:1"], conf).load() is None


def test_nothing_is_recorded_when_spark_reports_no_resolved_jars(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DYNAMIC_KAFKA_CACHE", str(tmp_path))
    resolution = ResolvedJars(["g:a:1"], {})
    resolution.save(str(tmp_path / "tp.jar"), str(tmp_path / "tp.jar"))
    resolution.save(str(tmp_path / "missing.jar"), "")
    assert not resolution.path.exists()


def test_an_unwritable_cache_costs_speed_not_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from dynamic_kafka.spark import session as spark_module

    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("DYNAMIC_KAFKA_CACHE", str(blocker / "cache"))
    jar = tmp_path / "resolved.jar"
    jar.write_bytes(b"jar")
    launch = spark_module._Launch({}, "", ResolvedJars(["g:a:1"], {}), None)
    system = SimpleNamespace(getProperty=lambda _key: str(jar))
    session = SimpleNamespace(sparkContext=SimpleNamespace(_jvm=SimpleNamespace(System=system)))

    spark_module._record_start_up_aids(launch, SparkConfig(), session, recording=False)  # type: ignore[arg-type]

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


def test_a_wrong_remote_in_the_project_file_is_a_config_error_without_its_token(tmp_path: Path) -> None:
    from dynamic_kafka.config import load_project_config
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
