"""The publication as an operation: resolve the write place, then run the progress protocol against Kafka.

:class:`Publication` is the one face the CLI and programs use: :meth:`~Publication.publish`,
:meth:`~Publication.plan` (a dry run) and :meth:`~Publication.status`. The protocol itself is
:func:`dynamic_kafka.publish.protocol.run_publication`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from pydantic import Field

from dynamic_kafka.config.loader import load_project_config
from dynamic_kafka.errors import KafkaClientError, PublicationError, PublicationFencedError
from dynamic_kafka.frozen import FrozenModel
from dynamic_kafka.kafka.transactions import TransactionalProducer, is_fenced, is_invalid_timeout
from dynamic_kafka.metadata.resolve import BoundedMetadataService
from dynamic_kafka.protocol.context import build_metadata_service, guard_references
from dynamic_kafka.publish.encoders import publication_encoders
from dynamic_kafka.publish.ledger import DeltaMoveLedger
from dynamic_kafka.publish.protocol import (
    Move,
    OutgoingRecord,
    Place,
    PublicationOutcome,
    VersionChange,
    batches,
    plan_start,
)
from dynamic_kafka.publish.source import DeltaVersionSource, table_columns

if TYPE_CHECKING:
    from pathlib import Path

    from dynamic_kafka.config.models import ProjectConfig
    from dynamic_kafka.metadata.models import ClusterMetadata
    from dynamic_kafka.metadata.service import KafkaMetadataService
    from dynamic_kafka.publish.config import PublicationConfig

logger = logging.getLogger(__name__)

__all__ = ["Publication", "PublicationPlan", "PublicationStatus"]


class PublicationPlan(FrozenModel):
    """What the next run would publish (a dry run: nothing fenced, nothing sent)."""

    publication_id: str
    table: str
    stream_id: str
    cluster_id: str = Field(description="The write cluster the metadata names now.")
    topic: str
    next_version: int = Field(description="The first table version the run would publish.")
    latest_version: int | None = Field(description="The table's newest version (None: no table yet).")
    versions: tuple[VersionChange, ...] = Field(description="Each version to publish and the rows it added.")
    transactions: int
    moves_to_cluster: bool = Field(description="Whether the run would move the writes to this cluster.")
    sample: tuple[dict[str, str | None], ...] = Field(
        (), description="The first records of the first version, as text (key, value, timestamp_ms)."
    )

    @property
    def rows(self) -> int:
        """Rows the run would publish."""
        return sum(v.rows for v in self.versions)


class PublicationStatus(FrozenModel):
    """Where a publication stands: the last version published on its write cluster, and what is behind."""

    publication_id: str
    table: str
    stream_id: str
    cluster_id: str
    topic: str
    last_published_version: int | None = Field(description="None: nothing published yet.")
    latest_version: int | None
    versions_behind: int
    rows_behind: int
    moves: tuple[Move, ...]


class _KafkaLog:
    """The clusters of a publication: the write place's cluster as the metadata names it now, earlier ones as
    the metadata service still describes them.
    """

    def __init__(self, config: PublicationConfig, service: KafkaMetadataService, current: ClusterMetadata) -> None:
        self.config = config
        self.service = service
        self.current = current

    def cluster(self, cluster_id: str) -> ClusterMetadata:
        if cluster_id == self.current.cluster_id:
            return self.current
        found = self.service.describe_cluster(cluster_id)
        if found is None:
            raise _publication_error(
                self.config,
                f"the previous write cluster {cluster_id!r} is unknown to the metadata service, so the last version "
                "published there cannot be read; nothing was sent",
                cluster_id=cluster_id,
                hint="Keep the cluster in the metadata (a file service: under `clusters`) until the first run on the "
                "new cluster has published.",
            )
        return found

    def _producer(self, place: Place) -> TransactionalProducer:
        return TransactionalProducer(
            self.cluster(place.cluster_id),
            transactional_id=self.config.transactional_id(place.cluster_id),
            transaction_timeout_ms=self.config.transaction_timeout_ms,
            group_id=self.config.progress_group_id,
            topic=place.topic,
            timeout_s=self.config.kafka_timeout_seconds,
        )

    def peek(self, place: Place) -> int | None:
        with self._producer(place) as producer:
            committed = producer.committed_progress()
        return None if committed is None else committed[0]


class Publication:
    """One publication of a project config: a Delta table's new rows to a stream, exactly once.

    Args:
        project: the project config, loaded.
        publication_id: which publication of the project.
        metadata_service: a service to use instead of the one the config names (programs and tests).

    Example:
        >>> out = Publication.from_config("dynamic_kafka.yaml", "orders-out")  # doctest: +SKIP
        >>> out.plan().rows  # doctest: +SKIP
        1200
        >>> out.publish().records  # doctest: +SKIP
        1200
    """

    def __init__(
        self, project: ProjectConfig, publication_id: str, *, metadata_service: KafkaMetadataService | None = None
    ) -> None:
        self.config = project.publication(publication_id)
        self.spark_settings = project.spark
        source = str(project.source) if project.source else "the project config"
        service = metadata_service or guard_references(
            build_metadata_service(project.metadata_service), project, source
        )
        self.service = BoundedMetadataService(service, self.config.kafka_timeout_seconds)

    @classmethod
    def from_config(cls, path: str | Path, publication_id: str) -> Publication:
        """The publication ``publication_id`` of the project config file at ``path``."""
        return cls(load_project_config(path), publication_id)

    def write_cluster(self) -> tuple[ClusterMetadata, str]:
        """The stream's one cluster and topic, as the metadata names them now.

        Raises:
            PublicationError: the stream is unknown, or is not exactly one topic on one cluster.
        """
        config = self.config
        streams = self.service.describe_streams([config.stream])
        if config.stream not in streams:
            raise _publication_error(
                config, "the metadata service does not know the stream", hint="Add the stream to the metadata."
            )
        placements = streams[config.stream].clusters
        shown = "; ".join(
            f"{cid}: {', '.join(sorted(c.topics)) or '-'}{' + pattern ' + c.topic_pattern if c.topic_pattern else ''}"
            for cid, c in sorted(placements.items())
        )
        only = next(iter(placements.values())) if len(placements) == 1 else None
        if only is None or len(only.topics) != 1 or only.topic_pattern is not None or only.partitions:
            raise _publication_error(
                config,
                f"a publication writes to one topic on one cluster, and the stream is {shown or 'empty'}",
                hint="Give the publication a stream of its own that lists one cluster and one topic (readers may "
                "subscribe to both streams); move it by editing that stream.",
            )
        return only.connection(), next(iter(only.topics))

    def _parts(self) -> tuple[Place, _KafkaLog, DeltaVersionSource, DeltaMoveLedger]:
        cluster, topic = self.write_cluster()
        log = _KafkaLog(self.config, self.service, cluster)
        # Registry formats are checked against the table before anything is fenced or sent.
        encoders = publication_encoders(self.config, cluster, topic, table_columns(self.config))
        source = DeltaVersionSource(self.config, encoders)
        return Place(cluster.cluster_id, topic), log, source, DeltaMoveLedger(self.config.state_table)

    def publish(self) -> PublicationOutcome:
        """Publish every table version after the last published one, up to the table's version now.

        Raises:
            PublicationFencedError: a newer run of the publication took over; this run's open transaction is
                invisible.
            PublicationError: the stream is not one topic on one cluster, a version is not an append, or the
                broker refused the transaction timeout.
            KafkaClientError: a cluster failed; nothing of the failed transaction is visible.
        """
        place, log, source, ledger = self._parts()
        try:
            outcome = self._publish(place, log, source, ledger)
        except KafkaClientError as e:
            raise self._kafka_failure(e) from e
        logger.info(
            "publication %s: %d records in %d transactions to %s, next version %d",
            self.config.id,
            outcome.records,
            outcome.transactions,
            place,
            outcome.next_version,
        )
        return outcome

    def _publish(
        self, place: Place, log: _KafkaLog, source: DeltaVersionSource, ledger: DeltaMoveLedger
    ) -> PublicationOutcome:
        # The executor path (and the guard against a large run's pending plan) lives in its own modules.
        from dynamic_kafka.publish.executors import publish

        threshold = self.config.executor_rows
        large = threshold is not None and self.plan(sample=0).rows > threshold
        places = {place.cluster_id, *(m.cluster_id for m in ledger.moves()[-1:])}
        clusters = {cluster_id: log.cluster(cluster_id) for cluster_id in places}
        return publish(self.config, self.spark_settings, clusters, place, source, ledger, large=large)

    def plan(self, *, sample: int = 3) -> PublicationPlan:
        """What :meth:`publish` would send now, fencing nothing and sending nothing."""
        place, log, source, ledger = self._parts()
        moves = ledger.moves()
        previous = log.peek(moves[-1].place) if moves and moves[-1].place != place else None
        start = plan_start(place, moves, log.peek(place), previous, source.starting_version())
        latest = source.latest_version()
        versions = source.changes(start.next_version, latest) if latest is not None else []
        first = next((v for v in versions if v.rows), None)
        shown = source.records(first.version)[:sample] if first is not None and sample else []
        return PublicationPlan(
            publication_id=self.config.id,
            table=self.config.table.uri,
            stream_id=self.config.stream,
            cluster_id=place.cluster_id,
            topic=place.topic,
            next_version=start.next_version,
            latest_version=latest,
            versions=tuple(versions),
            transactions=len(batches(versions, self.config.max_rows_per_transaction)),
            moves_to_cluster=start.move is not None,
            sample=tuple(_as_text(r) for r in shown),
        )

    def status(self) -> PublicationStatus:
        """The last version published on the write cluster and how many versions and rows are behind."""
        plan = self.plan(sample=0)
        return PublicationStatus(
            **plan.model_dump(include={"publication_id", "table", "stream_id", "cluster_id", "topic"}),
            last_published_version=plan.next_version - 1 if plan.next_version > 0 else None,
            latest_version=plan.latest_version,
            versions_behind=len(plan.versions),
            rows_behind=plan.rows,
            moves=tuple(DeltaMoveLedger(self.config.state_table).moves()),
        )

    def _kafka_failure(self, error: KafkaClientError) -> Exception:
        if is_fenced(error):
            return PublicationFencedError(
                "another run of the publication took over this cluster; this run's transaction is aborted",
                publication_id=self.config.id,
                table=self.config.table.uri,
                stream_id=self.config.stream,
                cluster_id=error.cluster_id,
                hint="Let the newer run finish; it publishes what this one did not.",
            )
        if is_invalid_timeout(error):
            return _publication_error(
                self.config,
                f"the brokers refused transaction_timeout_ms {self.config.transaction_timeout_ms}",
                cluster_id=error.cluster_id,
                hint="Set transaction_timeout_ms at most the brokers' transaction.max.timeout.ms.",
            )
        return error


def _publication_error(
    config: PublicationConfig, message: str, *, cluster_id: str | None = None, hint: str
) -> PublicationError:
    return config.error(message, cluster_id=cluster_id, hint=hint)


def _as_text(record: OutgoingRecord) -> dict[str, str | None]:
    def text(data: bytes | None) -> str | None:
        return None if data is None else data.decode(errors="replace")

    return {
        "key": text(record.key),
        "value": text(record.value),
        "timestamp_ms": None if record.timestamp_ms is None else str(record.timestamp_ms),
    }
