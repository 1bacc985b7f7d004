"""The whole exception hierarchy of dynamic-kafka.

Every error says what happened, where (cluster, topic, partition, offsets, file, key) and what to do.
``retriable`` tells an orchestrator whether running again without a change can help. Foreign exceptions
(confluent-kafka, py4j, delta) are wrapped at the module that calls them, always with ``raise ... from e``.
No message ever contains a secret: callers pass redacted values only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    # Type-only: model.plan is a leaf (pydantic only), so this adds no import at run time and no cycle.
    from collections.abc import Sequence

    from dynamic_kafka.model.plan import LostRange


class DynamicKafkaError(Exception):
    """Root of every error raised by dynamic-kafka."""

    retriable: bool = False

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        self.message = message
        """What happened, without the hint (``str()`` of the error is both)."""
        self.hint = hint
        super().__init__(f"{message} {hint}" if hint else message)

    def attributes(self) -> dict[str, object]:
        """What the error names (cluster, topic, partition, offsets, file, ...), by attribute name: every public
        attribute it set, except ``message``, ``hint`` and ``retriable`` (every error has those) and those left None
        or empty. An orchestrator shows them all (the Dagster layer: as the failure's metadata).

        Example:
            >>> TopicRecreatedError("east", "orders", "new id").attributes()
            {'cluster_id': 'east', 'topic': 'orders'}
        """
        return {
            name: value
            for name, value in vars(self).items()
            if not name.startswith("_") and name not in ("message", "hint", "retriable") and value not in (None, (), [])
        }


class ConfigError(DynamicKafkaError):
    """A config or metadata file is invalid. Nothing was read or written.

    Attributes:
        source: the file (or other origin) that holds the bad value.
    """

    def __init__(self, message: str, *, source: str | None = None, hint: str | None = None) -> None:
        self.source = source
        prefix = f"{source}: " if source else ""
        super().__init__(f"{prefix}{message}", hint=hint)


class HostError(DynamicKafkaError):
    """The machine refused something a command needs (a file or folder, a permission, disk space, a socket): an
    ``OSError`` no module wrapped more precisely.

    Attributes:
        path: the file or folder concerned, when the OS named one.
    """

    def __init__(self, error: OSError) -> None:
        self.path = error.filename if isinstance(error.filename, str) else None
        # A connection reset or a timeout can pass; a missing file, a permission or a refused connection (nothing
        # listens) cannot.
        self.retriable = isinstance(error, ConnectionError | TimeoutError) and not isinstance(
            error, ConnectionRefusedError
        )
        what = error.strerror or str(error) or type(error).__name__
        where = f": {self.path!r}" if self.path else ""
        super().__init__(
            f"the operating system refused an operation ({what}{where}).",
            hint="Check that the path exists and is a folder this user may write, that the disk has space, and "
            "that the services named in the config run; then run again.",
        )


class UnexpectedError(DynamicKafkaError):
    """An error no module of dynamic-kafka expected (a library's, or a bug): shown as one paragraph, never as a
    traceback (``-v`` logs it).

    Attributes:
        error_type: the class name of the original error.
    """

    def __init__(self, error: BaseException) -> None:
        self.error_type = type(error).__name__
        super().__init__(
            f"unexpected {self.error_type}: {str(error).rstrip('.')}.",
            hint="Nothing is half written (every write commits whole or not at all). Run again with -v for the "
            "traceback, and report it if it repeats.",
        )


def as_library_error(error: Exception) -> DynamicKafkaError | None:
    """The library's error for an exception a front end (the CLI, Dagster, Airflow) caught: the error itself when it
    is the library's, a :class:`HostError` for an ``OSError`` no module wrapped, ``None`` for anything else (each
    front end shows that its own way).
    """
    if isinstance(error, DynamicKafkaError):
        return error
    if isinstance(error, OSError):
        return HostError(error)
    return None


class UnknownStreamError(ConfigError):
    """A subscriber names a stream id that the metadata service does not know."""

    def __init__(self, stream_ids: list[str], known: list[str], *, source: str | None = None) -> None:
        self.stream_ids = stream_ids
        self.known = known
        shown = ", ".join(known[:20]) + (" ..." if len(known) > 20 else "")
        super().__init__(
            f"unknown stream id(s) {', '.join(stream_ids)}; the metadata service knows: {shown or '(none)'}.",
            source=source,
            hint="Fix the pipeline's `streams` list or add the stream to the metadata.",
        )


class ToolchainError(DynamicKafkaError):
    """Java, Maven, or jars from Maven Central (for Spark's connectors, or the development services) are missing or
    unobtainable.

    Running again helps only after the hint is followed (install, network, cache).
    """


class SchemaRegistryError(DynamicKafkaError):
    """A Schema Registry call failed: the registry is unreachable, refused the credentials, or answered an error.

    Attributes:
        url: the registry's URL (never credentials).
        status: the HTTP status the registry answered, if it answered.
    """

    def __init__(
        self, message: str, *, url: str, status: int | None = None, retriable: bool = True, hint: str | None = None
    ) -> None:
        self.url = url
        self.status = status
        self.retriable = retriable
        super().__init__(f"schema registry {url}: {message}", hint=hint)


class UnknownSchemaError(SchemaRegistryError):
    """The registry has no schema with the id a record carries (deleted, or the record comes from another registry)."""

    def __init__(self, schema_id: int, *, url: str) -> None:
        self.schema_id = schema_id
        super().__init__(
            f"no schema with id {schema_id}.",
            url=url,
            status=404,
            retriable=False,
            hint="Check that the stream's cluster points at the registry its producers use.",
        )


class WireFormatError(DynamicKafkaError):
    """Bytes are not a Confluent wire-format record (too short, unknown magic byte, bad Protobuf message indexes)."""


class MetadataServiceError(DynamicKafkaError):
    """The Kafka metadata service could not be reached or returned something unusable (retriable unless said
    otherwise: a missing metadata file does not come back by waiting).
    """

    retriable = True

    def __init__(self, message: str, *, hint: str | None = None, retriable: bool = True) -> None:
        self.retriable = retriable
        super().__init__(message, hint=hint)


class KafkaClientError(DynamicKafkaError):
    """A Kafka call failed on one cluster.

    Attributes:
        cluster_id: the logical cluster the call went to.
        kafka_error: the string form of the underlying Kafka error code, if any.
    """

    def __init__(
        self,
        message: str,
        *,
        cluster_id: str,
        retriable: bool = True,
        kafka_error: str | None = None,
        hint: str | None = None,
    ) -> None:
        self.cluster_id = cluster_id
        self.kafka_error = kafka_error
        self.retriable = retriable
        super().__init__(f"cluster {cluster_id!r}: {message}", hint=hint)


class ClusterUnreachableError(KafkaClientError):
    """An active cluster did not answer within the timeout."""


class KafkaAuthenticationError(KafkaClientError):
    """The cluster refused the client's credentials."""

    def __init__(self, message: str, *, cluster_id: str, kafka_error: str | None = None) -> None:
        super().__init__(
            message,
            cluster_id=cluster_id,
            retriable=False,
            kafka_error=kafka_error,
            hint="Check the cluster's sasl.* properties and the secret they reference.",
        )


class PlanningError(DynamicKafkaError):
    """The planner found a condition that the pipeline's policy says must stop the run."""


class DataLossError(PlanningError):
    """Committed offsets are below the earliest offset the broker still has (retention or deleted records), or the
    log was truncated below them (an unclean leader election: the latest offset fell below the committed one, or
    the leader epoch recorded with it ended below it, the reused offsets possibly refilled already).

    Attributes:
        losses: one lost range (committed offset to the broker's earliest) per partition.
        truncated: one truncated range per partition, from where the log diverged (the broker's latest offset, or
            the end offset of the recorded leader epoch) to the committed offset: offsets that were read and that
            new records are (or will be) given again.
    """

    def __init__(
        self,
        losses: Sequence[LostRange],
        *,
        truncated: Sequence[LostRange] = (),
        bootstrap_gaps: Sequence[LostRange] = (),
    ) -> None:
        self.losses: tuple[LostRange, ...] = tuple(losses)
        self.truncated: tuple[LostRange, ...] = tuple(truncated)
        self.bootstrap_gaps: tuple[LostRange, ...] = tuple(bootstrap_gaps)
        parts = []
        if self.bootstrap_gaps:
            described = "; ".join(str(gap) for gap in self.bootstrap_gaps)
            parts.append(
                "the bootstrap's `until` is older than the earliest record Kafka still holds, and records before it "
                f"were deleted (they may be newer than `until`, so in neither the archive nor Kafka): {described}"
            )
        if self.losses:
            described = "; ".join(str(lost) for lost in self.losses)
            parts.append(f"records below the committed offsets were deleted before they were read: {described}")
        if self.truncated:
            described = "; ".join(
                f"{t.cluster_id}/{t.topic}[{t.partition}] offsets [{t.from_offset}, {t.to_offset}) below the "
                f"committed offset {t.to_offset} are gone"
                for t in self.truncated
            )
            parts.append(
                "the log was truncated below the committed offsets (unclean leader election, or the isolation level "
                f"changed while a transaction was open): {described}"
            )
        super().__init__(
            f"data loss: {'; and '.join(parts)}.",
            hint="Nothing was written. To continue from the earliest offset (after retention) or from where the log "
            "diverged (after a truncation: the new records there are read) and record the gap, set "
            "`on_data_loss: skip` on the pipeline.",
        )

    def attributes(self) -> dict[str, object]:
        """The lost and truncated ranges, as ``lost_ranges`` and ``truncated_ranges`` (the names Dagster shows)."""
        return {
            name: ranges
            for name, ranges in (("lost_ranges", self.losses), ("truncated_ranges", self.truncated))
            if ranges
        }


class TopicRecreatedError(PlanningError):
    """A topic's id changed, or its latest offset fell below the committed offset: it was deleted and recreated.

    Attributes:
        cluster_id: the cluster of the topic.
        topic: the topic name.
    """

    def __init__(
        self, cluster_id: str, topic: str, reason: str, *, hint: str | None = None, retriable: bool = False
    ) -> None:
        self.cluster_id = cluster_id
        self.topic = topic
        self.retriable = retriable
        super().__init__(
            f"topic {topic!r} on cluster {cluster_id!r} was recreated ({reason}).",
            hint=hint
            or "Nothing was written. To read the new topic from its earliest offset, "
            "set `on_topic_recreated: reset` on the pipeline.",
        )


class TopicMissingError(PlanningError):
    """Topics the metadata lists do not exist on their clusters, and ``on_topic_missing: fail`` (the default): a
    run that would land nothing from them, schedule after schedule, fails instead.

    Attributes:
        missing: (cluster id, topic) of each missing topic.
    """

    def __init__(self, missing: Sequence[tuple[str, str]]) -> None:
        self.missing: tuple[tuple[str, str], ...] = tuple(missing)
        shown = ", ".join(f"{topic!r} on cluster {cluster_id!r}" for cluster_id, topic in self.missing)
        super().__init__(
            f"the metadata lists topics that do not exist: {shown}; nothing was written.",
            hint="Create the topics, or fix the metadata. To land the other topics and only warn about missing "
            "ones (a topic created later), set `on_topic_missing: warn` on the pipeline.",
        )


class RunInProgressError(DynamicKafkaError):
    """Another run of the same pipeline holds the next run_seq (or a backfill of it holds the backfill lease).

    Attributes:
        owner: who holds it (``host pid ...``) when its planned head names an owner with a fresh lease.
        until: when that owner's lease expires (ISO 8601).
        backfill: the writer lease holds the pipeline (a backfill, a dead-letter replay or a maintenance).
        operation: what holds the writer lease: ``backfill``, ``replay`` or ``maintenance`` (None: a run).
    """

    retriable = True
    _OPERATIONS: ClassVar[dict[str, tuple[str, str]]] = {
        "backfill": ("a backfill", "its MERGE"),
        "replay": ("a dead-letter replay", "its writes"),
        "maintenance": ("a sink maintenance", "its compaction and vacuum"),
    }

    def __init__(
        self,
        pipeline_id: str,
        run_seq: int,
        *,
        owner: str | None = None,
        until: str | None = None,
        backfill: bool = False,
        operation: str | None = None,
    ) -> None:
        self.pipeline_id = pipeline_id
        self.run_seq = run_seq
        self.owner = owner
        self.until = until
        self.backfill = backfill
        self.operation = (operation or "backfill") if backfill else None
        held = f"; it is held by {owner}, its lease runs until {until}" if owner else ""
        if self.operation is not None:
            what, writes = self._OPERATIONS.get(self.operation, (f"a {self.operation}", "its writes"))
            super().__init__(
                f"{what} is in progress for pipeline {pipeline_id!r}{held}: runs, backfills, replays and "
                f"maintenance of the pipeline wait for it (they would write the sink beside {writes}).",
                hint="Wait for it to finish; this one wrote nothing. If its process is gone, its lease expires by "
                "itself.",
            )
            return
        super().__init__(
            f"another run is in progress for pipeline {pipeline_id!r} (it planned run_seq {run_seq} first){held}.",
            hint="Wait for it to finish; this run wrote nothing."
            + (" If that run's process is gone, the next run recovers it once its lease expires." if owner else ""),
        )


class LeaseLostError(DynamicKafkaError):
    """A run (or a backfill) lost its lease before writing the sink: it was not renewed in time, or the state names
    another owner now. It stopped before the write; the next run recovers the planned run.
    """

    retriable = True


class RunTimeoutError(DynamicKafkaError):
    """A run exceeded the pipeline's ``max_run_seconds``; its Spark job was cancelled. Nothing was committed to the
    state: the next run recovers the planned run.
    """

    retriable = True


class ObjectStoreError(DynamicKafkaError):
    """A table's object store cannot be used: missing bucket, refused credentials, unreachable endpoint.

    The message names the table's location and the endpoint, never a credential. Only an unreachable store is
    retriable; the others need the configuration or the store fixed.
    """

    def __init__(self, message: str, *, retriable: bool = False, hint: str | None = None) -> None:
        self.retriable = retriable
        super().__init__(message, hint=hint)


class StateError(DynamicKafkaError):
    """The pipeline's Delta state is missing, unreadable or inconsistent."""


class ArchiveChangedError(StateError):
    """A bootstrap archive's file differs from what the run's plan pinned (size, modification time) or is gone."""


class StateBehindSinkError(StateError):
    """The sink (or its dead-letter table) holds a transaction of this pipeline beyond what the state knows: a
    run_seq beyond the state's last run, or a backfill beyond the state's backfill sequence.

    The state was restored from a backup, moved, or replaced by an older copy: runs or backfills it does not know
    about already landed records. Running on would reuse their run_seqs, and Delta would silently skip those writes
    (records lost, runs reported committed), or append blind over what the backfills merged (records duplicated),
    so nothing is planned until the state is realigned.

    Attributes:
        sink_txn: the highest transaction version of the pipeline's runs (or, with ``backfill``, backfills) in the
            sink or dead-letter table.
        state_run_seq: the state's last run_seq (planned or committed; 0 without runs), or with ``backfill`` its
            backfill sequence.
        backfill: whether it is the backfills the state is behind on.
    """

    def __init__(
        self,
        pipeline_id: str,
        *,
        table: str,
        sink_txn: int,
        state_run_seq: int,
        state_path: str,
        backfill: bool = False,
    ) -> None:
        self.pipeline_id = pipeline_id
        self.sink_txn = sink_txn
        self.state_run_seq = state_run_seq
        self.backfill = backfill
        if backfill:
            found = (
                f"{table} holds backfill {sink_txn} of this pipeline but the state knows backfills up to "
                f"{state_run_seq} only, so it lost the frontier of what they merged"
            )
            repair = (
                f"the state's backfill frontier is rebuilt from the rows backfills merged, so the next run skips "
                f"them (checked against the sink), and the next backfill is numbered past {sink_txn}"
            )
        else:
            found = f"{table} holds run {sink_txn} of this pipeline but the state's last run is {state_run_seq}"
            repair = (
                f"the next run_seq moves past {sink_txn}, the offsets stay, and the records runs "
                f"{state_run_seq + 1}..{sink_txn} already landed are skipped by the next run (checked against the sink)"
            )
        super().__init__(
            f"the state of pipeline {pipeline_id!r} at {state_path} is behind its sink: {found}. The state was "
            "probably restored from a backup or moved; nothing was planned or written.",
            hint=f"Put back the newest state if you have it. Otherwise run `dynamic-kafka realign --pipeline "
            f"{pipeline_id} --config ...` to see, then with --yes to make, the repair: {repair}, so nothing is lost "
            "or duplicated.",
        )


class SparkJobError(DynamicKafkaError):
    """The Spark read or the Delta write failed. The state was not committed; the next run recovers."""

    retriable = True


class CommitLostError(SparkJobError):
    """A staged append's commit lost to another writer that committed a transaction of the same pipeline first;
    nothing of this write is visible. The caller looks at what that writer committed.
    """


class CommitOverwrittenError(SparkJobError):
    """A run's append reported success but its commit is not in the table's log: another process's delta-spark
    commit at the same version replaced the log entry (delta-spark's local and S3 log stores check, then write).
    The run's offsets are not committed; the next run writes the run again.

    Attributes:
        table: the table whose log lost the commit.
    """

    def __init__(self, message: str, *, table: str, hint: str | None = None) -> None:
        self.table = table
        super().__init__(message, hint=hint)


class SchemaMismatchError(ConfigError):
    """The pipeline's ``value.schema`` is invalid, or the sink's existing schema does not match what the pipeline
    would write. Found before anything is planned; not retriable until the config or the table changes.

    Attributes:
        columns: the columns that differ (empty for an invalid ``value.schema``).
    """

    def __init__(self, message: str, *, columns: Sequence[str] = (), hint: str | None = None) -> None:
        self.columns = tuple(columns)
        super().__init__(message, hint=hint)


class DecodeError(DynamicKafkaError):
    """Values could not be decoded and the pipeline's policy is to fail rather than dead-letter them."""


class UndecodableRecordError(DecodeError):
    """A record could not be decoded and the pipeline's ``on_decode_error`` is ``fail``. Nothing was written.

    Attributes:
        cluster_id, topic, partition, offset: the record's coordinates; ``topic``, ``partition`` and ``offset`` are
            None for a bootstrap archive's row without them.
        reason: what was wrong (e.g. ``value is not valid UTF-8``).
        stream_id, timestamp: the record's stream and timestamp, when known (they name an archive row).
    """

    def __init__(
        self,
        *,
        cluster_id: str,
        topic: str | None,
        partition: int | None,
        offset: int | None,
        reason: str,
        stream_id: str | None = None,
        timestamp: str | None = None,
    ) -> None:
        self.cluster_id = cluster_id
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.reason = reason
        self.stream_id = stream_id
        self.timestamp = timestamp
        super().__init__(
            f"undecodable record at {self.where}: {reason}; nothing was written.",
            hint="Fix the producer or the pipeline's value and key formats (value, formats, key), or set "
            "`on_decode_error: dead_letter` to land such records in the dead-letter table.",
        )

    @property
    def where(self) -> str:
        """The record's place: its coordinates, or, for an archive row without them, its stream and timestamp."""
        if self.topic is not None and self.partition is not None and self.offset is not None:
            return f"{self.cluster_id}/{self.topic}[{self.partition}] offset {self.offset}"
        return (
            f"a bootstrap archive row of stream {self.stream_id!r} (cluster {self.cluster_id!r}, timestamp "
            f"{self.timestamp or 'none'}, no Kafka coordinates)"
        )


class SchemaIncompatibleError(DecodeError):
    """Records of a stream were written with schemas that cannot land in one table: a field changed its type, or a
    field the reader needs has no value and no default in an older writer schema. Nothing was written.

    Attributes:
        stream_id: the stream.
        detail: which subject, versions (or table column) disagree, and how.
    """

    def __init__(self, stream_id: str, detail: str) -> None:
        self.stream_id = stream_id
        self.detail = detail
        super().__init__(
            f"stream {stream_id!r}: incompatible schema change: {detail}; nothing was written.",
            hint="Register a compatible version (add fields with defaults, keep types), or land the new schema in "
            "another pipeline/table; a run reads the same records again until then.",
        )


class SparkConnectAuthenticationError(ConfigError):
    """The Spark Connect server refused the client's token, or requires one and none was sent. Nothing was read
    or written. Not retriable: the client's token setting must be fixed.
    """


class SparkConnectUnavailableError(SparkJobError):
    """The Spark Connect server is down or unreachable. Nothing was read or written by this call.

    Retriable: start the server (Spark's ``sbin/start-connect-server.sh``, or pyspark's ``spark-submit`` with the
    server's class, docs/deployment.md) or wait for it, then run again.
    """


class LocalSparkServerError(SparkJobError):
    """The local Spark server (``spark.local_server``) did not come up, or its folder cannot be used. Nothing was
    read or written. Retriable: a new start picks another free port.
    """


class PublicationError(DynamicKafkaError):
    """A publication (a Delta table's new rows to a stream) cannot go on. Nothing of the failed transaction is
    visible to ``read_committed`` readers, and its progress did not move.

    Attributes:
        publication_id: the publication.
        table: the published Delta table's location.
        stream_id: the stream it publishes to.
        cluster_id: the cluster concerned, when one is.
        version: the table version concerned, when one is.
    """

    def __init__(
        self,
        message: str,
        *,
        publication_id: str,
        table: str,
        stream_id: str,
        cluster_id: str | None = None,
        version: int | None = None,
        retriable: bool = False,
        hint: str | None = None,
    ) -> None:
        self.publication_id = publication_id
        self.table = table
        self.stream_id = stream_id
        self.cluster_id = cluster_id
        self.version = version
        self.retriable = retriable
        super().__init__(f"publication {publication_id!r} of {table} to stream {stream_id!r}: {message}", hint=hint)


class PublicationFencedError(PublicationError):
    """Another run of the publication took over its transactional id on a cluster: this run's transaction was
    aborted and its records are invisible. Not retriable as such: the newer run publishes what this one did not.
    """
