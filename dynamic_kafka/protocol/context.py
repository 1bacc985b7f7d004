"""What a run, a backfill and a status report of one pipeline share: the pipeline context.

The project and pipeline config, the metadata service, the state store and the Spark session factory, plus the
three steps every one of them takes the same way (resolve the metadata, snapshot the brokers, find how to reach a
plan's clusters). This module is the composition root: it is where the Kafka client is wired into the
single-cluster metadata service, so the ``metadata`` package never imports ``kafka``.

Example:
    >>> from dynamic_kafka.config.loader import load_project_config
    >>> context = PipelineContext(load_project_config("dynamic_kafka.yaml"), "orders")  # doctest: +SKIP
    >>> context.resolve().fingerprint  # doctest: +SKIP
    '3f1c...'
"""

from __future__ import annotations

import functools
from contextlib import contextmanager
from typing import TYPE_CHECKING

from dynamic_kafka import clock as wall_clock
from dynamic_kafka.config.models import (
    FileMetadataServiceConfig,
    MetadataServiceConfig,
    PipelineConfig,
    ProjectConfig,
    PythonMetadataServiceConfig,
    SingleClusterMetadataServiceConfig,
)
from dynamic_kafka.config.table_template import is_template, template_root
from dynamic_kafka.errors import ConfigError, TopicRecreatedError
from dynamic_kafka.imports import load_callable
from dynamic_kafka.kafka import ClusterRequest, KafkaAdmin, list_topic_names, run_requests, take_broker_snapshot
from dynamic_kafka.metadata.active import ActiveClustersOnly
from dynamic_kafka.metadata.file import FileMetadataService
from dynamic_kafka.metadata.identity import PipelineClientProperties, with_pipeline_properties
from dynamic_kafka.metadata.models import ClusterMetadata
from dynamic_kafka.metadata.patterns import expand_patterns
from dynamic_kafka.metadata.reference_guard import ReferenceGuard
from dynamic_kafka.metadata.resolve import BoundedMetadataService, resolve_metadata
from dynamic_kafka.metadata.service import KafkaMetadataService
from dynamic_kafka.metadata.single_cluster import SingleClusterMetadataService
from dynamic_kafka.state import StateStore
from dynamic_kafka.storage import TableRef, check_environment

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

    from pyspark.sql import SparkSession

    from dynamic_kafka.metadata.snapshot import MetadataSnapshot
    from dynamic_kafka.model.plan import Plan
    from dynamic_kafka.model.snapshots import BrokerSnapshot, StateSnapshot


class PipelineContext:
    """One pipeline's collaborators. Cheap to build: nothing is contacted until a method is called.

    Args:
        project: the project config.
        pipeline_id: which pipeline of the project.
        metadata_service: a service to use instead of the one the config names (programs and tests). Like a
            ``python`` service, it may use only the secret references the project's ``secret_references`` lists
            (see :mod:`dynamic_kafka.metadata.reference_guard`).
        spark: returns the Spark session; called only when something has to be read.
    """

    def __init__(
        self,
        project: ProjectConfig,
        pipeline_id: str,
        *,
        metadata_service: KafkaMetadataService | None = None,
        spark: Callable[[], SparkSession] | None = None,
    ) -> None:
        self.project = project
        self.pipeline: PipelineConfig = project.pipeline(pipeline_id)
        state = self.pipeline.state_table
        if any(not table.location.is_local for table in self.pipeline.tables().values()):
            check_environment()
        self.store = StateStore(state.delta_rs_uri, self.pipeline.id, storage_options=state.storage_options())
        self._service = (
            None
            if metadata_service is None
            else guard_references(metadata_service, project, f"metadata service {type(metadata_service).__name__}")
        )
        self._spark = spark or self._default_spark
        self._shared_as: str | None = None

    @property
    def service(self) -> KafkaMetadataService:
        """The metadata service (the one given, else built from the project config on first use), every call
        bounded by the pipeline's ``metadata_retries.timeout_seconds``, without the clusters it calls inactive
        (:mod:`dynamic_kafka.metadata.active`), every cluster it returns carrying the pipeline's client properties
        (:mod:`dynamic_kafka.metadata.identity`: ``client.id`` and ``properties``).
        """
        if self._service is None:
            config = self.project.metadata_service
            service = build_metadata_service(config)
            if isinstance(config, PythonMetadataServiceConfig):
                service = guard_references(service, self.project, f"metadata service {config.import_path!r}")
            self._service = service
        if not isinstance(self._service, PipelineClientProperties):
            bounded = BoundedMetadataService(self._service, self.pipeline.metadata_retries.timeout_seconds)
            active = ActiveClustersOnly(bounded)
            self._service = PipelineClientProperties(active, self.pipeline.id, self.pipeline.properties)
        return self._service

    def spark(self) -> SparkSession:
        """The Spark session (started on first call by the default factory), set up to reach the project's S3
        buckets (per-bucket S3A settings, whoever built the session).
        """
        session = self._spark()
        buckets = self.project.object_store_buckets()
        if buckets:
            from dynamic_kafka.spark.session import configure_object_storage

            configure_object_storage(session, buckets)
        return session

    def check_spark(self) -> None:
        """With ``spark.remote``: connect now (one round trip), so a Spark Connect server that is down fails the
        run with a retriable error before its plan is written. In-process mode: nothing (the JVM starts only when
        something is read).

        Raises:
            SparkConnectUnavailableError: the server does not answer.
        """
        if self.project.spark.remote is not None:
            self._spark()

    @contextmanager
    def shared_spark_session(self) -> Iterator[None]:
        """Inside the block, the default Spark Connect session is the pipeline's shared one (``spark.
        session_per_pipeline``): one server session for the pipeline's incremental runs, named by the pipeline and
        its state table, so that a run finds the classes Spark compiled for the previous run's write.

        Only incremental runs share it: one run of a pipeline writes at a time (its lock and lease), and its
        session settings are the same in every run. A backfill or a replay sets a Delta transaction of its own in
        its session for its MERGE, which must not reach any other writer, so they keep a session of their own.
        """
        self._shared_as = self.shared_session_name
        try:
            yield
        finally:
            self._shared_as = None

    @property
    def shared_session_name(self) -> str:
        """What names the pipeline's shared Spark Connect session: the pipeline and its state table (two projects
        may both have a pipeline ``orders``).
        """
        return f"pipeline {self.pipeline.id} of state {self.pipeline.state_table.delta_rs_uri}"

    def _default_spark(self) -> SparkSession:
        from dynamic_kafka.spark.session import build_spark_session

        return build_spark_session(
            self.project.spark, object_storage=self.project.object_store_buckets(), shared_as=self._shared_as
        )

    def check_object_store(self) -> None:
        """Fails before anything is written when the sink or dead-letter table's object store cannot be used
        (missing bucket, refused credentials, unreachable endpoint): one listing per table on object storage,
        nothing for local tables. The state table was checked already by reading it.

        Raises:
            ObjectStoreError: naming the table's location and the endpoint.
        """
        from dynamic_kafka.sink.tables import open_delta_rs

        for role, table in self.pipeline.tables().items():
            if role != "state" and not table.location.is_local:
                # A table per stream: the folder holding the stream tables (a template is no location to list).
                where = (
                    TableRef(template_root(table.location), table.storage, owner=table.owner)
                    if is_template(table.location)
                    else table
                )
                open_delta_rs(
                    where, doing=f"checking the {role.replace('_', '-')} table of pipeline {self.pipeline.id!r}"
                )

    def subscription(self) -> MetadataSnapshot:
        """The pipeline's subscribed streams as the metadata service describes them now, their topic patterns not
        expanded (no broker is asked): enough for what the metadata alone says, such as a cluster's overrides.
        """
        source = str(self.project.source) if self.project.source else None
        return resolve_metadata(self.service, self.pipeline, source=source)

    def resolve(self) -> MetadataSnapshot:
        """The pipeline's subscribed streams as the metadata service describes them now."""
        return expand_patterns(
            self.subscription(),
            functools.partial(list_topic_names, timeout_s=self.pipeline.kafka_timeout_seconds),
            skip_unreachable=self.pipeline.skip_unreachable_clusters,
        )

    def broker_snapshot(
        self, metadata: MetadataSnapshot, state: StateSnapshot, *, pipeline: PipelineConfig | None = None
    ) -> BrokerSnapshot:
        """Every cluster's offsets for the pipeline (or ``pipeline``, a variant of it such as a backfill window),
        one batched query per cluster.
        """
        pipeline = pipeline or self.pipeline
        requests = run_requests(pipeline, metadata, state, self.service)
        return take_broker_snapshot(
            requests,
            isolation_level=pipeline.isolation_level,
            now=wall_clock.utc_now(),
            timeout_s=pipeline.kafka_timeout_seconds,
        )

    def plan_snapshot(self, plan: Plan) -> BrokerSnapshot:
        """The brokers' offsets now, for every partition a (planned) plan reads: to check a crashed run's plan is
        still readable before executing it again. Every cluster is required: an unreachable one raises.

        Raises:
            KafkaClientError: a cluster of the plan could not be queried (``ClusterUnreachableError`` when it did
                not answer).
        """
        topics: dict[str, set[str]] = {}
        for split in plan.read_splits:
            topics.setdefault(split.cluster_id, set()).add(split.topic)
        connections = self.connections(plan)
        requests = [
            ClusterRequest(cluster=connections[cid], topics=frozenset(names), required=True, skip_unreachable=False)
            for cid, names in sorted(topics.items())
        ]
        return take_broker_snapshot(
            requests,
            isolation_level=self.pipeline.isolation_level,
            now=wall_clock.utc_now(),
            timeout_s=self.pipeline.kafka_timeout_seconds,
        )

    def check_topics_unchanged(
        self, plan: Plan, clusters: Mapping[str, ClusterMetadata], *, backfill: bool = False
    ) -> None:
        """Checks, after a run's (or a backfill's) records were read and before any of them is committed, that every
        topic it read is still the incarnation it planned (same topic id): then every record read came from that
        incarnation, since a topic id never comes back once its topic is deleted. One describe call per cluster.

        Raises:
            TopicRecreatedError: a topic of the plan was deleted or recreated since the plan. For a run, not
                retriable under ``on_topic_recreated: fail``; retriable under ``reset`` (the caller gives the run up
                first, so the next run plans the new topic from its earliest offset). For a backfill, retriable (it
                merged none of them; run again, it plans the window on the topic as it is now).
            KafkaClientError: a cluster could not be queried (retriable; nothing is committed).
        """
        planned: dict[str, dict[str, str]] = {}
        for split in plan.read_splits:
            if split.topic_id and split.stop_offset > split.start_offset:
                planned.setdefault(split.cluster_id, {})[split.topic] = split.topic_id
        for cluster_id, topics in sorted(planned.items()):
            with KafkaAdmin(clusters[cluster_id], timeout_s=self.pipeline.kafka_timeout_seconds) as admin:
                described = admin.describe_topics(topics)
            for topic, topic_id in sorted(topics.items()):
                now = described[topic]
                if now.exists and now.topic_id in (None, topic_id):
                    continue
                if backfill:
                    raise _recreated_during_backfill(self.pipeline, cluster_id, topic)
                raise _recreated_during_run(self.pipeline, plan.run_seq, cluster_id, topic)

    def connections(self, plan: Plan, metadata: MetadataSnapshot | None = None) -> dict[str, ClusterMetadata]:
        """How to reach every cluster of a plan: the resolved metadata's connection, else (a removed cluster being
        drained, or a recovered plan whose credentials may have been rotated since) the service's current one,
        else the bootstrap servers the plan recorded.
        """
        active = metadata.clusters() if metadata is not None else {}
        found: dict[str, ClusterMetadata] = {}
        for split in plan.splits:
            if split.cluster_id in found:
                continue
            found[split.cluster_id] = (
                active.get(split.cluster_id)
                or self.service.describe_cluster(split.cluster_id)
                or with_pipeline_properties(
                    ClusterMetadata(cluster_id=split.cluster_id, bootstrap_servers=split.bootstrap_servers),
                    self.pipeline.id,
                    self.pipeline.properties,
                )
            )
        return found


def _recreated_during_run(pipeline: PipelineConfig, run_seq: int, cluster_id: str, topic: str) -> TopicRecreatedError:
    why = (
        f"deleted or recreated while run {run_seq} of pipeline {pipeline.id!r} read it: its records may be the new "
        "topic's at the old topic's offsets, so none of them was committed"
    )
    if pipeline.on_topic_recreated == "fail":
        return TopicRecreatedError(cluster_id, topic, why)
    return TopicRecreatedError(
        cluster_id,
        topic,
        why,
        retriable=True,
        hint=f"Run {run_seq} was given up (on_topic_recreated: reset); the next run reads the new topic from its "
        "earliest offset.",
    )


def _recreated_during_backfill(pipeline: PipelineConfig, cluster_id: str, topic: str) -> TopicRecreatedError:
    return TopicRecreatedError(
        cluster_id,
        topic,
        f"deleted or recreated while a backfill of pipeline {pipeline.id!r} read it: its records may be the new "
        "topic's at the old topic's offsets, so the backfill merged no further",
        retriable=True,
        hint="Run the backfill again: it plans its window on the topic as it is now (what it merged before stays "
        "in the sink, once).",
    )


def guard_references(service: KafkaMetadataService, project: ProjectConfig, source: str) -> KafkaMetadataService:
    """``service`` restricted to the secret references the project config allows (the user's own file-based
    services are trusted as they are; see :mod:`dynamic_kafka.metadata.reference_guard`).
    """
    if isinstance(service, FileMetadataService | ReferenceGuard):
        return service
    return ReferenceGuard(service, project.secret_references, source)


def build_metadata_service(config: MetadataServiceConfig) -> KafkaMetadataService:
    """The metadata service a project config names.

    Raises:
        ConfigError: a Python import path that cannot be imported or does not build a KafkaMetadataService.
    """
    if isinstance(config, FileMetadataServiceConfig):
        return FileMetadataService(config.path)
    if isinstance(config, SingleClusterMetadataServiceConfig):
        return SingleClusterMetadataService(
            ClusterMetadata(
                cluster_id=config.cluster_id, bootstrap_servers=config.bootstrap_servers, properties=config.properties
            ),
            list_topic_names,
        )
    assert isinstance(config, PythonMetadataServiceConfig)
    target = load_callable(config.import_path, "metadata_service.import_path")
    service = target(**config.args)
    if not isinstance(service, KafkaMetadataService):
        raise ConfigError(
            f"metadata_service.import_path {config.import_path!r} returned {type(service).__name__}, "
            "not a KafkaMetadataService.",
            hint="Subclass dynamic_kafka.metadata.service.KafkaMetadataService.",
        )
    return service
