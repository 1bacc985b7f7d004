"""Per publication: an asset downstream of the published table whose materialization is one run of ``publish``, and
the job ``<name>_publish`` that materializes it.

The asset is ``dynamic_kafka/<id>_publication``. It depends on the table's asset: the sink asset of the pipeline
whose sink is the published table, else an external asset ``dynamic_kafka/<id>_table`` standing for a table written
elsewhere. Its metadata reports what the run published (records, transactions, the next table version, the write
cluster and topic, whether the writes moved there). The protocol, its guards and errors are the library's
(:meth:`dynamic_kafka.Publication.publish`); a fenced run fails the step, and the next one publishes what it did not.
"""

# No `from __future__ import annotations`: Dagster reads the decorated functions' annotations at runtime.

from collections.abc import Sequence
from typing import Any

from dagster import (
    AssetExecutionContext,
    AssetKey,
    AssetsDefinition,
    AssetSpec,
    MaterializeResult,
    MetadataValue,
    asset,
    define_asset_job,
    in_process_executor,
)

from dynamic_kafka import PipelineConfig, PublicationConfig
from dynamic_kafka.dagster.errors import dagster_errors
from dynamic_kafka.dagster.jobs import AssetJob
from dynamic_kafka.dagster.names import KIND_TAG, PUBLICATION_TAG, publish_job_name
from dynamic_kafka.dagster.resources import DynamicKafkaResource
from dynamic_kafka.dagster.target import Target


def publication_parts(
    publication: PublicationConfig, pipelines: Sequence[PipelineConfig], target: Target
) -> tuple[list[AssetsDefinition | AssetSpec], AssetJob]:
    """The publication's asset (with the external table asset it depends on, when no pipeline writes the table)
    and its job.
    """
    translator = target.translator
    writer = next((p for p in pipelines if not p.sink.per_stream and p.sink.path.uri == publication.table.uri), None)
    specs: list[AssetsDefinition | AssetSpec] = []
    if writer is not None:
        table_key = translator.asset_key(writer.id)
    else:
        table_key = translator.publication_table_asset_key(publication.id)
        specs.append(
            AssetSpec(
                table_key,
                description=f"The Delta table {publication.table} published by {publication.id!r}, written "
                "outside dynamic-kafka.",
                kinds={"delta"},
                **translator.table_attributes(),
            )
        )
    specs.append(_publication_asset(publication, table_key, target))
    job = define_asset_job(
        name=publish_job_name(publication.id),
        selection=[translator.publication_asset_key(publication.id)],
        description=f"One run of publication {publication.id!r}: the table's new rows to stream "
        f"{publication.stream!r}, exactly once.",
        tags={PUBLICATION_TAG: publication.id, KIND_TAG: "publish"},
        executor_def=in_process_executor,
    )
    return specs, job


def _publication_asset(publication: PublicationConfig, table_key: AssetKey, target: Target) -> AssetsDefinition:
    publication_id, translator = publication.id, target.translator

    @asset(
        key=translator.publication_asset_key(publication_id),
        deps=[table_key],
        description=f"The rows of {publication.table} published to stream {publication.stream!r}, exactly once "
        "(Kafka transactions holding the records and the publication's progress).",
        kinds={"delta", "kafka"},
        op_tags={PUBLICATION_TAG: publication_id},
        **translator.table_attributes(),
    )
    def publication_asset(
        context: AssetExecutionContext, dynamic_kafka: DynamicKafkaResource
    ) -> MaterializeResult[Any]:
        with dagster_errors(None):  # a PublicationError names the publication, its table and stream
            outcome = dynamic_kafka.publication(target.config_path, publication_id).publish()
        context.log.info(
            f"publication {publication_id}: {outcome.records} records in {outcome.transactions} transaction(s) to "
            f"{outcome.cluster_id}/{outcome.topic}; next version {outcome.next_version}"
        )
        return MaterializeResult(
            metadata={
                "records": MetadataValue.int(outcome.records),
                "transactions": MetadataValue.int(outcome.transactions),
                "first_version": MetadataValue.int(outcome.first_version),
                "next_version": MetadataValue.int(outcome.next_version),
                "cluster": MetadataValue.text(outcome.cluster_id),
                "topic": MetadataValue.text(outcome.topic),
                "moved": MetadataValue.bool(outcome.moved),
            }
        )

    return publication_asset
