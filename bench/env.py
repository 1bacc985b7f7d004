"""The benchmark's environment: its two local clusters, its topics and data sets, and pipeline folders.

Everything lives under ``.cache/bench/`` (ignored by git): ``kafka/`` holds the brokers (fixed ports outside the
kernel's ephemeral range, so test sessions, which take ephemeral ports, never collide with them), ``work/`` the
config, sink and state of each measured run. A data set is a topic of the same name on both clusters; it is
produced once and reused while its offsets still say it is complete.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import shutil
import string
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from devtools.local_kafka import LocalCluster, start_clusters, stop_clusters
from dynamic_kafka.kafka import KafkaAdmin
from dynamic_kafka.metadata.models import ClusterMetadata

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = ROOT / ".cache" / "bench"
KAFKA_DIR = BENCH_DIR / "kafka"
WORK_DIR = BENCH_DIR / "work"
# Added to every fixed port of the benchmarks, so that two checkouts can measure on one machine at once.
PORT_SHIFT = int(os.environ.get("DYNAMIC_KAFKA_BENCH_PORT_SHIFT", "0"))
# Below 32768: Linux hands out ephemeral ports (the test fixtures' free ports) from 32768 up.
CLUSTER_PORTS = {"east": 19392 + PORT_SHIFT, "west": 29392 + PORT_SHIFT}
CLUSTERS = tuple(CLUSTER_PORTS)
_SIZES = 1009
# Part of every data set's topic name: bump it when produce_fast changes what it writes.
_DATA_VERSION = 2


@dataclass(frozen=True)
class DataSet:
    """``records`` records in total, split evenly over one topic of ``partitions`` partitions per cluster."""

    records: int
    partitions: int = 8
    value_bytes: int = 200

    @property
    def topic(self) -> str:
        """Return the data set's topic name."""
        return f"bench{_DATA_VERSION}-{self.records}r-{self.partitions}p-{self.value_bytes}b"

    def per_cluster(self, cluster_id: str) -> int:
        """Return how many records the data set holds on one cluster."""
        share, rest = divmod(self.records, len(CLUSTERS))
        return share + (1 if CLUSTERS.index(cluster_id) < rest else 0)


class BenchEnv:
    """The running clusters and what the benchmarks need from them."""

    def __init__(self, clusters: dict[str, LocalCluster]) -> None:
        self.clusters = clusters

    @classmethod
    def start(cls) -> BenchEnv:
        """Starts (or reuses) the benchmark's clusters."""
        KAFKA_DIR.mkdir(parents=True, exist_ok=True)
        clusters = start_clusters(list(CLUSTER_PORTS.items()), base_dir=KAFKA_DIR, start_timeout_s=300)
        return cls(clusters)

    @staticmethod
    def stop() -> None:
        """Stops the clusters, keeping their data (the next run restarts them on it)."""
        stop_clusters(list(CLUSTERS), base_dir=KAFKA_DIR)

    def bootstrap(self, cluster_id: str) -> str:
        """Return a benchmark cluster's bootstrap servers."""
        return self.clusters[cluster_id].bootstrap_servers

    def admin(self, cluster_id: str) -> AdminClient:
        """Return a confluent-kafka admin client for a benchmark cluster."""
        return AdminClient({"bootstrap.servers": self.bootstrap(cluster_id)})

    # ------------------------------------------------------------------------------------------- offsets

    def offsets(self, cluster_id: str, topics: Iterable[str]) -> dict[str, dict[int, tuple[int, int]]]:
        """``{topic: {partition: (earliest, latest)}}`` for existing topics (missing topics are left out)."""
        metadata = ClusterMetadata(cluster_id=cluster_id, bootstrap_servers=self.bootstrap(cluster_id))
        with KafkaAdmin(metadata, timeout_s=60) as admin:
            described = admin.describe_topics(list(topics))
            parts = [(t, p) for t, d in described.items() if d.exists for p in d.partitions]
            found = admin.list_offsets_many(parts, {"earliest": "earliest", "latest": "latest"})
        result: dict[str, dict[int, tuple[int, int]]] = {}
        for topic, partition in parts:
            earliest, latest = found["earliest"][(topic, partition)], found["latest"][(topic, partition)]
            assert earliest is not None
            assert latest is not None
            result.setdefault(topic, {})[partition] = (earliest, latest)
        return result

    def ranges(self, topic: str) -> dict[str, dict[int, tuple[int, int]]]:
        """``{cluster: {partition: (earliest, latest)}}`` of one topic on every cluster."""
        return {c: self.offsets(c, [topic]).get(topic, {}) for c in CLUSTERS}

    # -------------------------------------------------------------------------------------------- topics

    def create_topics(self, cluster_id: str, names: Sequence[str], partitions: int, *, batch: int = 10) -> None:
        """Creates topics in batches of ``batch`` (thousands of partitions in one request can time out) and
        waits until every partition has a leader.
        """
        admin = self.admin(cluster_id)
        for i in range(0, len(names), batch):
            chunk = [NewTopic(n, num_partitions=partitions, replication_factor=1) for n in names[i : i + batch]]
            for name, future in admin.create_topics(chunk, operation_timeout=120, request_timeout=120).items():
                try:
                    future.result(timeout=180)
                except KafkaException as e:
                    if e.args[0].name() != "TOPIC_ALREADY_EXISTS":
                        raise RuntimeError(f"creating topic {name} on {cluster_id} failed: {e}") from e
        deadline = time.monotonic() + 300
        while True:
            topics = admin.list_topics(timeout=60).topics
            led = [
                n
                for n in names
                if n in topics
                and len(topics[n].partitions) == partitions
                and all(p.leader >= 0 for p in topics[n].partitions.values())
            ]
            if len(led) == len(names):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(names) - len(led)} topics on {cluster_id} have no leaders after 300s")
            time.sleep(0.5)

    def ensure_topics(self, names: Sequence[str], partitions: int) -> float:
        """Makes empty topics ``names`` with ``partitions`` partitions exist on every cluster (topics with
        another partition count or with records are recreated). Returns seconds spent creating them.
        """
        began, created = time.monotonic(), False
        for cluster_id in CLUSTERS:
            found = self.offsets(cluster_id, names)
            wrong = [n for n, parts in found.items() if len(parts) != partitions or any(hi for _, hi in parts.values())]
            self.delete_topics(cluster_id, wrong)
            missing = [n for n in names if n not in found or n in wrong]
            if missing:
                created = True
                self.create_topics(cluster_id, missing, partitions)
        return time.monotonic() - began if created else 0.0

    def broker_memory(self) -> dict[str, dict[str, float | None]]:
        """Each broker's peak resident memory (MB) and, when ``jcmd`` is available, its used heap (MB)."""
        result: dict[str, dict[str, float | None]] = {}
        for cluster_id, cluster in self.clusters.items():
            peak = heap = None
            if cluster.pid is not None:
                status = Path(f"/proc/{cluster.pid}/status")
                if status.exists():
                    line = next((x for x in status.read_text().splitlines() if x.startswith("VmHWM:")), None)
                    peak = int(line.split()[1]) / 1024 if line else None
                heap = _heap_used_mb(cluster.pid)
            result[cluster_id] = {"peak_rss_mb": peak, "heap_used_mb": heap}
        return result

    def delete_topics(self, cluster_id: str, names: Sequence[str]) -> None:
        """Delete topics from a benchmark cluster, waiting until they are gone."""
        if not names:
            return
        admin = self.admin(cluster_id)
        for future in admin.delete_topics(list(names), operation_timeout=120).values():
            future.result(timeout=180)
        deadline = time.monotonic() + 120
        while set(names) & set(admin.list_topics(timeout=30).topics):
            if time.monotonic() > deadline:
                raise TimeoutError(f"topics {names} still exist on {cluster_id} after deletion")
            time.sleep(0.5)

    def ensure_data_set(self, data: DataSet) -> float:
        """Makes the data set exist, producing it unless a complete copy is there. Returns seconds spent producing
        (0 when reused).
        """
        incomplete = []
        for cluster_id in CLUSTERS:
            found = self.offsets(cluster_id, [data.topic]).get(data.topic)
            complete = (
                found is not None
                and len(found) == data.partitions
                and all(earliest == 0 for earliest, _ in found.values())
                and sum(latest for _, latest in found.values()) == data.per_cluster(cluster_id)
            )
            if not complete:
                incomplete.append(cluster_id)
                if found is not None:
                    self.delete_topics(cluster_id, [data.topic])
        if not incomplete:
            return 0.0
        began = time.monotonic()
        for cluster_id in incomplete:
            self.create_topics(cluster_id, [data.topic], data.partitions)
        errors: list[BaseException] = []

        def produce(cluster_id: str) -> None:
            try:
                produce_fast(self.bootstrap(cluster_id), data.topic, data.per_cluster(cluster_id), data)
            except BaseException as e:  # reported by the caller's thread
                errors.append(e)

        threads = [threading.Thread(target=produce, args=(c,)) for c in incomplete]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return time.monotonic() - began


def produce_fast(bootstrap: str, topic: str, count: int, data: DataSet) -> None:
    """Produces ``count`` records round-robin over the partitions, fast: unique text-like values of about
    ``value_bytes`` (a record number, then a slice of random words, so they compress like text, not like one
    repeated value), 9-byte keys, big batches, a short linger and no compression (like most raw topics).
    """
    rng = random.Random(f"{topic}-{bootstrap}")
    words = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 10))) for _ in range(2000)]
    text = " ".join(rng.choices(words, k=200_000)).encode()
    span = len(text) - data.value_bytes - 64
    sizes = [max(16, data.value_bytes - 13 + rng.randint(-20, 20)) for _ in range(_SIZES)]
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "batch.num.messages": 100_000,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
            "compression.type": "none",
            "acks": "1",
            "enable.idempotence": False,
        }
    )
    failures: list[Any] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(err)

    partitions = data.partitions
    for i in range(count):
        start = (i * 7919) % span
        value = b"%012d " % i + text[start : start + sizes[i % _SIZES]]
        while True:
            try:
                producer.produce(topic, value, b"k%08d" % i, partition=i % partitions, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 20_000 == 0:
            producer.poll(0)
    left = producer.flush(300)
    if failures or left:
        raise RuntimeError(f"producing {topic} to {bootstrap}: {len(failures)} failed, {left} undelivered")


def _heap_used_mb(pid: int) -> float | None:
    jcmd = shutil.which("jcmd")
    if jcmd is None:
        return None
    try:
        out = subprocess.run([jcmd, str(pid), "GC.heap_info"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"used (\d+)K", out)
    return int(match.group(1)) / 1024 if match else None


# ------------------------------------------------------------------------------------------- pipeline folders


def fresh_dir(name: str) -> Path:
    """An empty folder ``work/<name>`` (deleted first if it exists)."""
    path = WORK_DIR / name
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def write_project(
    folder: Path,
    env: BenchEnv,
    topics: dict[str, list[str]],
    *,
    pipeline: dict[str, Any] | None = None,
    spark_conf: dict[str, str] | None = None,
    spark: dict[str, Any] | None = None,
) -> Path:
    """Writes ``metadata.yaml`` (stream ``bench``: the given topics per cluster) and ``dynamic_kafka.yaml``
    (pipeline ``bench``, sink ``sink``, state ``sink_state``) into ``folder``; returns the config path. ``spark``
    replaces the whole ``spark`` section (e.g. ``{"remote": "sc://..."}``).
    """
    metadata = {
        "clusters": {c: {"bootstrap_servers": env.bootstrap(c)} for c in CLUSTERS},
        "streams": {"bench": topics},
    }
    (folder / "metadata.yaml").write_text(yaml.safe_dump(metadata, sort_keys=False))
    config = {
        "metadata_service": {"type": "file", "path": "metadata.yaml"},
        "spark": spark if spark is not None else spark_settings(spark_conf),
        "pipelines": [{"id": "bench", "streams": ["bench"], "sink": {"path": "sink"}, **(pipeline or {})}],
    }
    path = folder / "dynamic_kafka.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def spark_settings(conf: dict[str, str] | None = None) -> dict[str, Any]:
    """The Spark section both our runs and the baseline use (the baseline builds its session from it too)."""
    return {"master": "local[*]", "conf": {"spark.sql.warehouse.dir": str(WORK_DIR / "warehouse"), **(conf or {})}}


def bench_environ() -> dict[str, str]:
    """The environment of measured child processes: the caller's, with the jar cache shared."""
    return dict(os.environ)


def warm_spark_start(*, s3a: bool = False) -> float:
    """Resolve the Spark jars and record the driver's class data sharing archive before anything is measured.

    Both are one-time costs of a machine (see ``dynamic_kafka.spark.packages`` and
    ``dynamic_kafka.spark.class_archive``); left to the measured runs, the first would pay the download and the
    next would compete with the background recorder. With ``s3a``, also for sessions with the S3A connector
    (benchmark 7). Returns the seconds spent (0 when both were ready).
    """
    from dynamic_kafka.config.models import SparkConfig
    from dynamic_kafka.spark.class_archive import JAR_SETTINGS_ENV
    from dynamic_kafka.spark.session import S3A_RECORDER_FLAG, session_class_archive

    began = time.monotonic()
    settings = SparkConfig.model_validate(spark_settings())
    for with_s3a in (False, True) if s3a else (False,):
        archive = session_class_archive(settings, s3a=with_s3a)
        if archive is not None and not archive.ready:
            recorder = [sys.executable, "-m", "dynamic_kafka.spark.class_archive_recorder", archive.key]
            flags = json.dumps({S3A_RECORDER_FLAG: "true"} if with_s3a else {})
            subprocess.run(recorder, check=True, capture_output=True, env={**os.environ, JAR_SETTINGS_ENV: flags})
    return time.monotonic() - began
