"""Large publication runs from Spark's executors: the Kafka side of :mod:`dynamic_kafka.publish.slices` and a
:class:`~dynamic_kafka.publish.slices.SliceRunner` that runs each slice as a Spark task.

A task gets the publication's config and the clusters' metadata as they are in the config (secret *references*
such as ``${env:...}``, resolved on the executor when its producer starts, so the values are in no closure), reads
its versions' rows with delta-rs, and produces them with its own transactional producer.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from dynamic_kafka.errors import PublicationError
from dynamic_kafka.kafka.transactions import TransactionalProducer
from dynamic_kafka.publish.encoders import publication_encoders
from dynamic_kafka.publish.slices import SlicePlan, plan_of, publish_run, run_slice
from dynamic_kafka.publish.source import DeltaVersionSource, table_columns
from dynamic_kafka.sink.tables import safe_text

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping, Sequence

    from dynamic_kafka.config.models import SparkConfig
    from dynamic_kafka.metadata.models import ClusterMetadata
    from dynamic_kafka.publish.config import PublicationConfig
    from dynamic_kafka.publish.protocol import MoveLedger, OutgoingRecord, Place, PublicationOutcome
    from dynamic_kafka.publish.slices import Slice

logger = logging.getLogger(__name__)


class _KafkaSliceSession:
    """A producer of the publication on one cluster (the run's own, or a slice's), with its progress."""

    def __init__(self, producer: TransactionalProducer, table: str) -> None:
        self.producer = producer
        self.table = table

    def _committed(self) -> tuple[int, str] | None:
        return self.producer.committed_progress()

    def progress(self) -> int | None:
        committed = self._committed()
        return None if committed is None else committed[0]

    def pending(self) -> SlicePlan | None:
        committed = self._committed()
        return None if committed is None else plan_of(committed[1])

    def begin(self) -> None:
        self.producer.begin()

    def send(self, records: Iterable[OutgoingRecord]) -> int:
        return self.producer.send((r.key, r.value, r.timestamp_ms, list(r.headers)) for r in records)

    def commit(self, next_version: int) -> None:
        self.producer.commit(next_version, json.dumps({"table": self.table, "version": next_version - 1}))

    def record(self, plan: SlicePlan) -> None:
        metadata = {"table": self.table, "version": plan.start - 1, "plan": plan.encode()}
        self.producer.commit(plan.start, json.dumps(metadata))

    def close(self) -> None:
        self.producer.close()


class _KafkaSlicedLog:
    """The publication's clusters (``clusters`` by id), with a transactional id and a progress group per slice:
    ``<transactional id>-slice-<first version>`` and ``<progress group>-slice-<first version>``.
    """

    def __init__(self, config: PublicationConfig, clusters: Mapping[str, ClusterMetadata]) -> None:
        self.config = config
        self.clusters = dict(clusters)

    def _producer(self, place: Place, suffix: str) -> TransactionalProducer:
        return TransactionalProducer(
            self.clusters[place.cluster_id],
            transactional_id=self.config.transactional_id(place.cluster_id) + suffix,
            transaction_timeout_ms=self.config.transaction_timeout_ms,
            group_id=self.config.progress_group_id + suffix,
            topic=place.topic,
            timeout_s=self.config.kafka_timeout_seconds,
        )

    def _open(self, place: Place, suffix: str) -> _KafkaSliceSession:
        producer = self._producer(place, suffix)
        producer.start()
        return _KafkaSliceSession(producer, self.config.table.uri)

    def open(self, place: Place) -> _KafkaSliceSession:
        return self._open(place, "")

    def open_planned(self, place: Place) -> _KafkaSliceSession:
        return self._open(place, "")

    def open_slice(self, place: Place, first: int) -> _KafkaSliceSession:
        return self._open(place, f"-slice-{first}")

    def peek(self, place: Place) -> int | None:
        with self._producer(place, "") as producer:
            committed = producer.committed_progress()
        return None if committed is None else committed[0]


def _task(
    config: PublicationConfig, clusters: dict[str, ClusterMetadata], place: Place, slices: Sequence[Slice]
) -> Any:
    """The function each Spark task runs over its partition of slice numbers (``mapInArrow``)."""

    def publish(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        log = _KafkaSlicedLog(config, clusters)
        # A task encodes as the driver does: registry formats with the subject's latest version, looked up here
        # (a registry client does not travel in a task's closure).
        encoders = publication_encoders(config, clusters[place.cluster_id], place.topic, table_columns(config))
        for batch in batches:
            for number in batch.column(0).to_pylist():
                sent = run_slice(place, slices[number], DeltaVersionSource(config, encoders), log)
                yield pa.RecordBatch.from_pydict({"slice": [number], "records": [sent]})

    return publish


class _SparkSliceRunner:
    """Runs each slice as one task of one Spark job (Spark retries a failed task up to ``spark.task.maxFailures``
    times; a task that fails for good fails the run, and the next run finishes the plan).
    """

    def __init__(self, spark: Any, config: PublicationConfig, clusters: Mapping[str, ClusterMetadata]) -> None:
        self.spark = spark
        self.config = config
        self.clusters = dict(clusters)

    def run(self, place: Place, slices: Sequence[Slice]) -> list[int]:
        count = len(slices)
        logger.info("publishing %d slice(s) to %s from Spark tasks", count, place)
        publish = _task(self.config, self.clusters, place, list(slices))
        try:
            rows = self.spark.range(0, count, 1, count).mapInArrow(publish, "slice long, records long").collect()
        except Exception as e:  # Py4J and Spark Connect raise several kinds for a failed job
            raise PublicationError(
                f"a slice task failed for good, so the run stopped with its plan pending ({_job_failure(e)}); "
                "what the committed slices sent is visible once, the rest is not",
                publication_id=self.config.id,
                table=self.config.table.uri,
                stream_id=self.config.stream,
                cluster_id=place.cluster_id,
                hint="Fix the cause and run the publication again: it finishes the plan first, skipping the slices "
                "that committed. Let Spark retry tasks within a run with spark.task.maxFailures (local: "
                "master local[*,4]).",
            ) from e
        sent = {int(r["slice"]): int(r["records"]) for r in rows}
        return [sent[i] for i in range(count)]


def _job_failure(error: Exception) -> str:
    """The line of a failed Spark job's error that says why (Spark puts it after a line about the Py4J call)."""
    lines = str(error).strip().splitlines() or [type(error).__name__]
    line = next((x for x in lines if "Job aborted" in x or "exited unexpectedly" in x), lines[0])
    return safe_text(RuntimeError(line))


def publish(
    config: PublicationConfig,
    spark_settings: SparkConfig,
    clusters: Mapping[str, ClusterMetadata],
    place: Place,
    source: DeltaVersionSource,
    ledger: MoveLedger,
    *,
    large: bool,
) -> PublicationOutcome:
    """One run of ``config`` on ``clusters`` (the write cluster and the last move's): from this process, or when
    ``large`` (or a large run's plan is pending) in slices, each a Spark task
    (:func:`~dynamic_kafka.publish.slices.publish_run`).
    """

    def runner() -> _SparkSliceRunner:
        from dynamic_kafka.spark.session import build_spark_session

        return _SparkSliceRunner(build_spark_session(spark_settings), config, clusters)

    return publish_run(
        place,
        source,
        _KafkaSlicedLog(config, clusters),
        ledger,
        runner,
        large=large,
        starting_version=source.starting_version(),
        max_rows_per_transaction=config.max_rows_per_transaction,
    )
