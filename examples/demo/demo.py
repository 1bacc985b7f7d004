"""The README's main command: a cluster migration, end to end, through Dagster.

1. starts two local Kafka clusters, ``east`` (127.0.0.1:19092) and ``west`` (127.0.0.1:29092), and a local Spark
   Connect server (127.0.0.1:15002): the runs Dagster launches send their Spark work to it and start no JVM;
2. writes a demo project into ``.demo/`` (fresh topics each time, so the demo can be run again and again);
3. produces orders to the stream ``orders`` on ``east`` and materializes the pipeline with Dagster;
4. migrates the stream in the metadata file, east -> east + west -> west, producing on both sides; at each step
   the metadata sensor is ticked, sees the new fingerprint and requests the run that Dagster then executes;
5. backfills the last three days (one run for three daily partitions): west's first orders carry timestamps of
   those days, so the backfill re-reads them and merges them into the sink without duplicating one;
6. prints what landed, per cluster and per run, and how to open the UI on the same Dagster instance.

Run with ``make demo`` (or ``.venv/bin/python examples/demo/demo.py``).
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from dagster import DagsterInstance, RunRequest, SensorResult, build_sensor_context

from devtools.local_kafka import start_clusters
from devtools.local_spark_connect import start_server
from devtools.testing.kafka import Record, create_topic, produce
from dynamic_kafka.dagster.build import build_definitions
from dynamic_kafka.dagster.names import RESOURCE_KEY, backfill_job_name, incremental_job_name, metadata_sensor_name
from dynamic_kafka.dagster.resources import DynamicKafkaResource
from dynamic_kafka.dagster.translator import DynamicKafkaTranslator

ROOT = Path(__file__).resolve().parents[2]
KEYS = DynamicKafkaTranslator()  # the default asset keys
DEMO_DIR = ROOT / ".demo"
DAGSTER_HOME = ROOT / ".dagster-home"
CLUSTERS = {"east": 19092, "west": 29092}
SPARK_CONNECT_PORT = 15002
PIPELINE = "orders"
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
BACKFILL_DAYS = 3  # the last complete days, backfilled in one run
TODAY = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
# The single-run backfill's partition range, as Dagster's backfill daemon tags the one run it launches.
RANGE_START_TAG = "dagster/asset_partition_range_start"
RANGE_END_TAG = "dagster/asset_partition_range_end"


def _orders(cluster: str, first: int, count: int, days_ago: int = 0) -> list[Record]:
    """Numbered orders, timestamped over the last ``days_ago`` days, or by the producer (now) when it is 0."""
    return [
        Record(
            key=f"customer-{i % 17}".encode(),
            value=f'{{"order": {i}, "placed_on": "{cluster}"}}'.encode(),
            timestamp_ms=_past_ms(i - first, days_ago) if days_ago else None,
        )
        for i in range(first, first + count)
    ]


def _past_ms(n: int, days_ago: int) -> int:
    """The n-th record's timestamp spread over the last ``days_ago`` complete days, a second apart."""
    moment = TODAY - timedelta(days=1 + n % days_ago) + timedelta(hours=12, seconds=n)
    return int(moment.timestamp() * 1000)


class Demo:
    """The demo's world: two local clusters, a fresh topic on each, the project files and the runs made."""

    def __init__(self) -> None:
        self.bootstrap: dict[str, str] = {}
        suffix = uuid.uuid4().hex[:6]
        self.topics = {"east": f"orders-{suffix}", "west": f"orders-v2-{suffix}"}
        self.config_path = DEMO_DIR / "dynamic_kafka.yaml"
        self.metadata_path = DEMO_DIR / "metadata.yaml"
        self.cursor: str | None = None
        self.runs: list[tuple[str, dict[str, Any]]] = []
        self.remote = f"sc://127.0.0.1:{SPARK_CONNECT_PORT}"

    def start_clusters(self) -> None:
        """Start the clusters and create the demo's topics."""
        print("Starting local Kafka clusters (the first time downloads Kafka from Maven Central)...", flush=True)
        started = start_clusters(list(CLUSTERS.items()))
        self.bootstrap = {name: c.bootstrap_servers for name, c in started.items()}
        for name, servers in self.bootstrap.items():
            print(f"  {name}: {servers}")
            create_topic(servers, self.topics[name], 3)

    def start_spark_connect(self) -> None:
        """Starts the local Spark Connect server the demo's runs use (a running one is reused)."""
        print("Starting the local Spark Connect server (Spark with Delta and the Kafka connector)...", flush=True)
        info = start_server(base_dir=ROOT / ".local-spark-connect", port=SPARK_CONNECT_PORT, master="local[2]")
        self.remote = info.remote
        print(f"  {info.remote} (pid {info.pid}; stop it with .venv/bin/python -m devtools spark-connect down)")

    def write_project(self) -> None:
        """Write the demo's project config into a fresh folder."""
        shutil.rmtree(DEMO_DIR, ignore_errors=True)
        DEMO_DIR.mkdir(parents=True)
        project = {
            "metadata_service": {"type": "file", "path": "metadata.yaml"},
            "spark": {"remote": self.remote},
            "pipelines": [
                {
                    "id": PIPELINE,
                    "streams": ["orders"],
                    "starting_offsets": "earliest",
                    "key": {"format": "string"},
                    "value": {"format": "json", "schema": "order INT, placed_on STRING"},
                    "sink": {"path": "data/orders"},
                    "drain_removed": True,
                    "orchestration": {
                        "schedule": "*/15 * * * *",
                        "sensor": {"interval_seconds": 30, "failure_threshold": 2},
                        # A week of daily partitions: the UI's partition view shows the backfilled days among them.
                        "backfill": {"start": (TODAY - timedelta(days=7)).isoformat(), "granularity": "daily"},
                    },
                    "max_lag_records": 10000,
                }
            ],
        }
        self.config_path.write_text(yaml.safe_dump(project, sort_keys=False))

    def set_metadata(self, on: list[str]) -> None:
        """Put the stream on the given clusters in the metadata file."""
        clusters = {name: {"bootstrap_servers": self.bootstrap[name]} for name in CLUSTERS}
        streams = {"orders": {name: [self.topics[name]] for name in on}}
        self.metadata_path.write_text(yaml.safe_dump({"clusters": clusters, "streams": streams}, sort_keys=False))
        print(f"\nMetadata: stream 'orders' now lives on {' + '.join(on)}")

    def produce(self, cluster: str, first: int, count: int, days_ago: int = 0) -> None:
        """Produce numbered orders to a cluster's topic (dated over the last ``days_ago`` days, else now)."""
        produce(self.bootstrap[cluster], self.topics[cluster], _orders(cluster, first, count, days_ago))
        dated = f" (dated over the last {days_ago} days)" if days_ago else ""
        print(f"  produced orders {first}..{first + count - 1} to {cluster}/{self.topics[cluster]}{dated}")

    def materialize(self, instance: DagsterInstance, why: str, tags: dict[str, str] | None = None) -> None:
        """Execute the incremental job in process and print what it landed."""
        job = build_definitions(self.config_path).resolve_job_def(incremental_job_name(PIPELINE))
        result = job.execute_in_process(instance=instance, tags=tags or {}, run_config=QUIET, raise_on_error=True)
        sink_key = KEYS.asset_key(PIPELINE)
        for event in result.get_asset_materialization_events():
            materialization = event.step_materialization_data.materialization
            if materialization.asset_key != sink_key:
                continue  # the run's other asset (its dead letters) carries no run summary
            meta = {k: getattr(v, "value", v) for k, v in materialization.metadata.items()}
            self.runs.append((why, meta))
            print(
                f"  Dagster run {result.run_id[:8]} ({why}): run_seq {meta.get('run_seq')}, "
                f"{meta.get('records')} records, lag after run {meta.get('lag_after')}"
            )

    def backfill(self, instance: DagsterInstance) -> None:
        """Backfill the last complete days in one run, as a single-run backfill launched from the UI does."""
        job = build_definitions(self.config_path).resolve_job_def(backfill_job_name(PIPELINE))
        assert job.partitions_def is not None
        keys = job.partitions_def.get_partition_keys()[-BACKFILL_DAYS:]
        print(f"\nBackfill of the days {keys[0]}..{keys[-1]} ({len(keys)} daily partitions, one run)...", flush=True)
        tags = {RANGE_START_TAG: keys[0], RANGE_END_TAG: keys[-1]}
        result = job.execute_in_process(instance=instance, tags=tags, run_config=QUIET, raise_on_error=True)
        # One materialization per partition, each with the run's metadata (its records are the whole range's).
        backfill_key = KEYS.backfill_asset_key(PIPELINE)
        events = [e for e in result.get_asset_materialization_events() if e.asset_key == backfill_key]
        records = getattr(events[0].materialization.metadata.get("records"), "value", None)
        print(
            f"  Dagster run {result.run_id[:8]} (backfill): {len(events)} partitions materialized, "
            f"{records} records in the windows merged into the sink"
        )

    def tick_sensor(self, instance: DagsterInstance) -> list[RunRequest]:
        """Tick the metadata sensor once and return the runs it requested."""
        defs = build_definitions(self.config_path)
        sensor = defs.resolve_sensor_def(metadata_sensor_name(PIPELINE))
        resources = {RESOURCE_KEY: DynamicKafkaResource()}
        result = sensor(build_sensor_context(instance=instance, cursor=self.cursor, resources=resources))
        assert isinstance(result, SensorResult)
        self.cursor = result.cursor
        requests = list(result.run_requests or [])
        reason = result.skip_reason.skip_message if result.skip_reason else f"{len(requests)} run requested"
        print(f"  metadata sensor tick: {reason}")
        return requests

    def follow_sensor(self, instance: DagsterInstance, why: str) -> None:
        """Tick the sensor and execute every run it requests."""
        for request in self.tick_sensor(instance):
            self.materialize(instance, why, tags=dict(request.tags))

    def report(self) -> list[int]:
        """Print what landed per cluster and per run; return every landed order number."""
        from deltalake import DeltaTable

        table = DeltaTable(str(DEMO_DIR / "data" / "orders")).to_pyarrow_table(
            columns=["cluster", "stream", "topic", "offset", "_run_seq", "value"]
        )
        clusters = table.column("cluster").to_pylist()
        runs = table.column("_run_seq").to_pylist()
        print("\nRecords in the Delta table data/orders, per cluster:")
        print(f"  {'cluster':<8} {'records':>8}")
        for cluster, count in sorted(Counter(clusters).items()):
            print(f"  {cluster:<8} {count:>8}")
        print(f"  {'total':<8} {table.num_rows:>8}")
        print("\nPer run (run_seq x cluster):")
        for (run_seq, cluster), count in sorted(Counter(zip(runs, clusters, strict=True)).items()):
            print(f"  run {run_seq}: {count:>5} records from {cluster}")
        return [value["order"] for value in table.column("value").to_pylist()]

    def main(self) -> int:
        """Run the whole demo; return the exit status."""
        os.environ.setdefault("DAGSTER_HOME", str(DAGSTER_HOME))
        home = Path(os.environ["DAGSTER_HOME"])
        home.mkdir(parents=True, exist_ok=True)
        if not (home / "dagster.yaml").exists():
            shutil.copy(ROOT / "examples" / "demo" / "dagster.yaml", home / "dagster.yaml")
        self.start_spark_connect()
        self.write_project()
        self.start_clusters()
        instance = DagsterInstance.get()

        self.set_metadata(["east"])
        self.produce("east", 0, 1000)
        print("The metadata sensor's first tick requests the first run (through Spark Connect)...", flush=True)
        self.follow_sensor(instance, "first run")

        self.set_metadata(["east", "west"])
        self.produce("east", 1000, 200)
        self.produce("west", 1200, 500, days_ago=BACKFILL_DAYS)
        self.follow_sensor(instance, "migration started")

        self.produce("east", 1700, 50)
        self.set_metadata(["west"])
        self.produce("west", 1750, 300)
        self.follow_sensor(instance, "migration finished")
        self.follow_sensor(instance, "nothing changed")
        self.backfill(instance)

        landed = self.report()
        expected = list(range(2050))
        if sorted(landed) != expected:
            missing = sorted(set(expected) - set(landed))
            doubled = sorted(o for o, n in Counter(landed).items() if n > 1)
            print(f"\nNOT exactly once: missing orders {missing[:10]}, duplicated orders {doubled[:10]}")
            return 1
        print(
            "\nEvery order 0..2049 landed exactly once; the 50 orders produced to east after the last run that saw"
            "\nit were drained (drain_removed: true) before east was marked removed, and the backfill added no"
            "\nsecond copy of the west orders it re-read."
            "\n\nOpen the Dagster UI on these runs:  make ui   (then http://127.0.0.1:3000)"
            "\nStop the local clusters:           .venv/bin/python -m devtools local-kafka down"
            "\nStop the Spark Connect server:     .venv/bin/python -m devtools spark-connect down"
        )
        return 0


def run() -> None:
    """Run the demo and leave with its exit status.

    The native thread pools of the Kafka client, pyarrow and delta-rs can abort an interpreter's shutdown
    (``terminate called without an active exception``), which would turn a finished demo into a crash: so the
    process stops Spark, flushes its output and exits directly, as the CLI does.
    """
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # The demo's producers start while the brokers are still electing coordinators; librdkafka's retry notices
    # about that are noise here, not problems.
    logging.getLogger("devtools.testing").setLevel(logging.ERROR)
    # First-time downloads (Kafka's and Spark's jars) take a while: one progress line each, not silence.
    downloads = logging.getLogger("dynamic_kafka._toolchain.ivy")
    downloads.setLevel(logging.INFO)
    progress = logging.StreamHandler(sys.stdout)
    progress.setFormatter(logging.Formatter("  %(message)s"))
    downloads.addHandler(progress)
    downloads.propagate = False
    status = Demo().main()
    from dynamic_kafka.spark.session import stop_spark_session

    stop_spark_session()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    run()
