"""Flink's source options pasted into client ``properties``: translated where they mean something here, refused at
``check`` (and at run time) naming this product's key; and the migration page's worked example, loaded and checked.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml

from dynamic_kafka.config.flink_options import FlinkOptionError
from dynamic_kafka.metadata.identity import with_pipeline_properties
from dynamic_kafka.metadata.models import ClusterMetadata
from dynamic_kafka.operations.check import check_project

if TYPE_CHECKING:
    from typing import Any

PAGE = Path(__file__).parents[2] / "docs" / "flink-migration.md"
TRANSLATED_NOTE = "Flink's 'client.id.prefix' is translated to this product's 'client.id' ('<value>-<cluster_id>')"


def _write(folder: Path, config: dict[str, Any], metadata: dict[str, Any]) -> Path:
    (folder / "metadata.yaml").write_text(yaml.safe_dump(metadata))
    path = folder / "dynamic_kafka.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def test_check_refuses_flink_options_with_no_meaning_here_naming_the_products_key(tmp_path: Path) -> None:
    properties = {
        "client.id.prefix": "job",
        "partition.discovery.interval.ms": "10000",
        "commit.offsets.on.checkpoint": "true",
        "register.consumer.metrics": "yes",
    }
    config = {
        "metadata_service": {"type": "file", "path": "metadata.yaml"},
        "pipelines": [{"id": "p", "streams": ["s"], "sink": {"path": "sink"}, "properties": properties}],
    }
    metadata = {
        "clusters": {
            "east": {"bootstrap_servers": "e:9092", "properties": {"stream-metadata-discovery-interval-ms": "1"}}
        },
        "streams": {"s": {"east": ["t"]}},
    }
    path = _write(tmp_path, config, metadata)

    report = check_project(path)

    assert not report.ok
    found = {(Path(p.file).name, p.location): p.message for p in report.problems}
    assert set(found) == {
        ("dynamic_kafka.yaml", "pipelines[0].properties.partition.discovery.interval.ms"),
        ("dynamic_kafka.yaml", "pipelines[0].properties.commit.offsets.on.checkpoint"),
        ("dynamic_kafka.yaml", "pipelines[0].properties.register.consumer.metrics"),
        ("metadata.yaml", "clusters.east.properties.stream-metadata-discovery-interval-ms"),
    }
    assert (
        "`orchestration.sensor.interval_seconds`"
        in found[("dynamic_kafka.yaml", "pipelines[0].properties.partition.discovery.interval.ms")]
    )
    assert "`consumer_group`" in found[("dynamic_kafka.yaml", "pipelines[0].properties.commit.offsets.on.checkpoint")]
    assert (
        "true or false, not 'yes'" in found[("dynamic_kafka.yaml", "pipelines[0].properties.register.consumer.metrics")]
    )
    assert report.notes == (f"pipelines[0].properties: {TRANSLATED_NOTE}",)


def test_check_notes_register_consumer_metrics_as_translated_to_the_clients_statistics(tmp_path: Path) -> None:
    config = {
        "metadata_service": {"type": "file", "path": "metadata.yaml"},
        "pipelines": [
            {"id": "p", "streams": ["s"], "sink": {"path": "sink"}, "properties": {"register.consumer.metrics": "true"}}
        ],
    }
    metadata = {"clusters": {"east": {"bootstrap_servers": "e:9092"}}, "streams": {"s": {"east": ["t"]}}}

    report = check_project(_write(tmp_path, config, metadata))

    assert report.problems == ()
    (note,) = report.notes
    assert note.startswith(
        "pipelines[0].properties: Flink's 'register.consumer.metrics' is translated to this product's "
        "'statistics.interval.ms' (100 when true"
    )


def test_check_reads_a_single_cluster_services_properties_too(tmp_path: Path) -> None:
    service = {
        "type": "single_cluster",
        "cluster_id": "east",
        "bootstrap_servers": "e:9092",
        "properties": {"stream-metadata-discovery-failure-threshold": "3"},
    }
    path = tmp_path / "dynamic_kafka.yaml"
    path.write_text(
        yaml.safe_dump(
            {"metadata_service": service, "pipelines": [{"id": "p", "streams": ["t"], "sink": {"path": "s"}}]}
        )
    )

    (problem,) = check_project(path).problems

    assert problem.location == "metadata_service.properties.stream-metadata-discovery-failure-threshold"
    assert "`orchestration.sensor.failure_threshold`" in problem.message


def test_a_clusters_properties_get_client_id_from_flinks_prefix_unless_client_id_is_set() -> None:
    cluster = ClusterMetadata(cluster_id="east", bootstrap_servers="e:9092", properties={"client.id.prefix": "job"})

    assert with_pipeline_properties(cluster, "p", {}).properties == {"client.id": "job-east"}
    assert with_pipeline_properties(cluster, "p", {"client.id": "mine"}).properties == {"client.id": "mine"}
    assert with_pipeline_properties(cluster.model_copy(update={"properties": {}}), "p", {}).properties == {
        "client.id": "dynamic-kafka-p-east"
    }


def test_a_refused_flink_option_from_a_metadata_service_fails_before_any_client_is_built() -> None:
    cluster = ClusterMetadata(
        cluster_id="west", bootstrap_servers="w:9092", properties={"commit.offsets.on.checkpoint": "true"}
    )

    with pytest.raises(FlinkOptionError) as caught:
        with_pipeline_properties(cluster, "p", {})

    assert (caught.value.key, caught.value.cluster_id) == ("commit.offsets.on.checkpoint", "west")
    assert "`consumer_group`" in str(caught.value)


def _page_files() -> dict[str, str]:
    """The migration page's YAML blocks whose first line names the file (``# dynamic_kafka.yaml``)."""
    blocks = re.findall(r"```yaml\n# (\S+)\n(.*?)```", PAGE.read_text(), flags=re.DOTALL)
    return dict(blocks)


@pytest.fixture
def page_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The page's environment variables set, as on the host it runs on (check resolves every reference it can)."""
    for name in set(re.findall(r"\$\{env:(\w+)", PAGE.read_text())):
        monkeypatch.setenv(name, "set-on-the-host")


@pytest.mark.usefixtures("page_env")
def test_the_migration_pages_worked_example_loads_and_checks(tmp_path: Path) -> None:
    files = _page_files()
    assert set(files) == {"dynamic_kafka.yaml", "metadata.yaml"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)

    report = check_project(tmp_path / "dynamic_kafka.yaml")

    assert report.problems == ()
    assert report.ok
    assert report.pipelines == ("orders",)
    assert report.streams == ("orders-eu", "orders-us")
    assert report.notes == (f"pipelines[0].properties: {TRANSLATED_NOTE}",)
    assert f"`pipelines[0].properties: {TRANSLATED_NOTE.split(' (')[0]}`" in " ".join(PAGE.read_text().split())


@pytest.mark.usefixtures("page_env")
def test_the_pages_example_with_a_flink_option_left_in_is_refused_naming_consumer_group(tmp_path: Path) -> None:
    files = _page_files()
    config = yaml.safe_load(files["dynamic_kafka.yaml"])
    config["pipelines"][0]["properties"]["commit.offsets.on.checkpoint"] = "true"
    (tmp_path / "metadata.yaml").write_text(files["metadata.yaml"])
    (tmp_path / "dynamic_kafka.yaml").write_text(yaml.safe_dump(config))

    assert [
        (p.location, "`consumer_group`" in p.message) for p in check_project(tmp_path / "dynamic_kafka.yaml").problems
    ] == [("pipelines[0].properties.commit.offsets.on.checkpoint", True)]
