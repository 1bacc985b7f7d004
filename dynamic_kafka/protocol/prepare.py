"""The steps every writer of the sink takes before it writes: a run, the recovery of a crashed run, a backfill.

:func:`prepare_write` makes them in this order, before the writer records anything (a run's plan written as
``planned``, a backfill's frontier raised), so a writer refused here leaves nothing behind; a recovery, whose plan is
written already, makes them before it writes again:

1. Spark is reachable (with ``spark.remote`` one round trip, so a Spark Connect server that is down fails here,
   retriable);
2. every cluster of the plan has a connection (:meth:`~dynamic_kafka.protocol.context.PipelineContext.connections`);
3. the writer schemas of the plan's registry and schema-file streams are fetched and checked (a registry that is
   down fails here, retriable); a plan already written is decoded with exactly the schema inputs it pinned;
4. ``value.schema`` and the sink's schema take the rows, and the ``event_time`` expression is a timestamp over
   them (not retriable);
5. the sink's and dead-letter table's object store answers;
6. the writer's ``max_run_seconds`` has not passed.

Right before its rows are committed, a writer checks with :meth:`PreparedWrite.check_topics_unchanged` that every
topic it read is still the incarnation it planned.

Example:
    >>> prepared = prepare_write(context, plan, deadline, metadata=metadata)  # doctest: +SKIP
    >>> prepared.decoding.can_fail  # doctest: +SKIP
    True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pyspark.sql.types import StructType

    from dynamic_kafka.decoding.prepared import PreparedDecoding
    from dynamic_kafka.metadata.models import ClusterMetadata
    from dynamic_kafka.metadata.snapshot import MetadataSnapshot
    from dynamic_kafka.model.plan import Plan
    from dynamic_kafka.protocol.context import PipelineContext
    from dynamic_kafka.spark.deadline import RunDeadline


@dataclass(frozen=True)
class PreparedWrite:
    """A plan checked and ready to be written.

    Attributes:
        plan: the plan to execute. A plan not written yet records its decoding's schema inputs
            (:attr:`~dynamic_kafka.model.plan.Plan.decoding`) and its ``event_time`` expression, so a recovery of it
            decodes and measures exactly as its run would;
            a plan already in the state is kept exactly as written (it is committed only as written).
        connections: how to reach every cluster of the plan, by cluster id.
        decoding: the writer schemas of the planned ranges.
        rows_schema: the schema of the sink rows of the plan's Kafka ranges, as the schema check analysed it over
            an empty frame with ``decoding``: the write need not ask Spark again (through Spark Connect, an
            analysis of the whole Kafka read's plan). None: unknown.
    """

    plan: Plan
    connections: Mapping[str, ClusterMetadata]
    decoding: PreparedDecoding
    rows_schema: StructType | None = None

    def check_topics_unchanged(self, context: PipelineContext, *, backfill: bool = False) -> None:
        """Checks, after the read and before its rows are committed, that every topic read is still the
        incarnation planned (:meth:`~dynamic_kafka.protocol.context.PipelineContext.check_topics_unchanged`).

        Raises:
            TopicRecreatedError: a topic of the plan was deleted or recreated since it was planned.
            KafkaClientError: a cluster could not be queried (retriable; nothing is committed).
        """
        context.check_topics_unchanged(self.plan, self.connections, backfill=backfill)


def prepare_write(
    context: PipelineContext,
    plan: Plan,
    deadline: RunDeadline,
    *,
    metadata: MetadataSnapshot | None = None,
    written: bool = False,
) -> PreparedWrite:
    """Makes the checks before a write (see the module's docstring) and returns what the write needs.

    Args:
        context: the pipeline.
        plan: what is about to be written.
        deadline: the writer's ``max_run_seconds``.
        metadata: the metadata the plan was made from (its connections); None for a recovered plan, whose clusters
            are looked up in the metadata service.
        written: the plan is in the state already (a recovery): it is decoded with its pins and kept as it is.

    Raises:
        SparkConnectUnavailableError: the Spark Connect server does not answer (retriable).
        SchemaRegistryError: a registry is unreachable (retriable) or refused the call.
        ConfigError: a registry stream has no registry, a schema file cannot be read or changed since it was
            pinned, a decoded field collides with dynamic-kafka's columns, or ``event_time`` is not a timestamp
            expression over the rows.
        SchemaMismatchError: ``value.schema`` is invalid or the sink's schema does not take the rows.
        ObjectStoreError: the sink's or dead-letter table's object store cannot be used.
        RunTimeoutError: ``max_run_seconds`` passed meanwhile (retriable).
    """
    from dynamic_kafka.decoding.prepared import prepare_decoding
    from dynamic_kafka.sink.per_stream import run_tables
    from dynamic_kafka.sink.schema_check import check_sink_schema
    from dynamic_kafka.spark.event_time import check_event_time

    context.check_spark()
    connections = context.connections(plan, metadata)
    decoding = prepare_decoding(context.pipeline, plan.read_splits, connections, pins=plan.decoding)
    if plan.bootstrap is not None:
        from dynamic_kafka.spark.bootstrap_archive import with_archive_decoding

        decoding = with_archive_decoding(decoding, context.pipeline, plan.bootstrap.stream)
    # Asked for once: through Spark Connect each ask states the session's settings again (a round trip).
    spark = context.spark()
    if not written:
        check_event_time(spark, context.pipeline, decoding)
        plan = plan.with_decoding(decoding.pins(), context.pipeline.event_time)
    tables = run_tables(context.pipeline, plan.read_splits)
    rows_schema = check_sink_schema(spark, context.pipeline, decoding, [table.pipeline for table in tables])
    context.check_object_store()
    deadline.check()
    return PreparedWrite(plan=plan, connections=connections, decoding=decoding, rows_schema=rows_schema)
