"""Splits and plans.

A split is one planned range of one partition: ``[start_offset, stop_offset)``, start inclusive, stop exclusive,
both resolved numbers (never sentinels such as -1/-2). A plan is the set of splits of one run, plus what the run
will record in the state besides offsets (partitions to mark removed, findings).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Literal

from pydantic import Field, model_validator

from dynamic_kafka.frozen import FrozenModel, replaced

if TYPE_CHECKING:
    from collections.abc import Iterable


class TopicPartition(FrozenModel):
    """A partition of a topic on a cluster."""

    cluster_id: str
    topic: str
    partition: int = Field(ge=0)

    def __str__(self) -> str:
        return f"{self.cluster_id}/{self.topic}[{self.partition}]"


class Split(FrozenModel):
    """One planned range ``[start_offset, stop_offset)`` of one partition."""

    cluster_id: str
    topic: str
    partition: int = Field(ge=0)
    start_offset: int = Field(ge=0, description="First offset to read (inclusive).")
    stop_offset: int = Field(ge=0, description="First offset not to read (exclusive).")
    stream_ids: tuple[str, ...] = Field(
        description="Subscribed streams that contain this topic, sorted; with a table per stream, the stream whose "
        "table the partition first landed in stays first (dynamic_kafka.plan.tables)."
    )
    topic_id: str | None = Field(None, description="Kafka topic id when planned; detects recreation.")
    leader_epoch: int | None = Field(
        None,
        description="The partition's leader epoch when its stop offset was planned (None: the broker gave none). "
        "Committed with the offset; the next plan checks the log has not diverged below the offset since.",
    )
    bootstrap_servers: str = Field(description="Where the cluster was reached when planned (not secret).")
    draining: bool = Field(False, description="Last read of a partition removed from the metadata.")

    @model_validator(mode="after")
    def _ordered(self) -> Split:
        if self.stop_offset < self.start_offset:
            raise ValueError(f"stop_offset {self.stop_offset} < start_offset {self.start_offset}")
        return self

    @property
    def key(self) -> TopicPartition:
        """Return the split's (cluster, topic, partition)."""
        return TopicPartition(cluster_id=self.cluster_id, topic=self.topic, partition=self.partition)

    @property
    def record_count(self) -> int:
        """Offsets in the range (an upper bound on records: compaction and transaction markers leave gaps)."""
        return self.stop_offset - self.start_offset

    @property
    def stream_id(self) -> str:
        """The value of the output's ``stream`` column: the first subscribed stream containing the topic."""
        return self.stream_ids[0]

    def narrowed(self, start_offset: int, stop_offset: int) -> Split:
        """This range cut to ``[start_offset, stop_offset)``, which must lie within it.

        Raises:
            ValueError: the new range is not within this one (a planning bug: nothing may read outside its plan).
        """
        if not self.start_offset <= start_offset <= stop_offset <= self.stop_offset:
            raise ValueError(
                f"[{start_offset}, {stop_offset}) is not within [{self.start_offset}, {self.stop_offset}) of {self.key}"
            )
        return replaced(self, start_offset=start_offset, stop_offset=stop_offset)

    def led_by(self, stream_id: str) -> Split:
        """This split with ``stream_id`` first among its streams (the stream whose table it lands in)."""
        return replaced(self, stream_ids=(stream_id, *(s for s in self.stream_ids if s != stream_id)))


class LostRange(FrozenModel):
    """Offsets ``[from_offset, to_offset)`` of one partition that were deleted before they were read."""

    cluster_id: str
    topic: str
    partition: int = Field(ge=0)
    from_offset: int = Field(ge=0, description="The committed offset: first record that was lost.")
    to_offset: int = Field(ge=0, description="The broker's earliest offset: first record still there.")

    def __str__(self) -> str:
        return f"{self.cluster_id}/{self.topic}[{self.partition}] lost offsets [{self.from_offset}, {self.to_offset})"


FindingKind = Literal[
    "data_loss",
    "truncated",
    "topic_recreated",
    "new_partition",
    "new_topic",
    "resumed",
    "removed",
    "removed_unread",
    "cluster_skipped",
    "topic_missing",
    "partition_missing",
    "offset_clamped",
    "bootstrap_until",
    "capped",
    "empty_metadata",
]


class Finding(FrozenModel):
    """Something the planner noticed and the run records (in its summary and the state's run history)."""

    kind: FindingKind
    cluster_id: str | None = None
    topic: str | None = None
    partition: int | None = None
    from_offset: int | None = Field(None, description="Start of the affected range, when there is one.")
    to_offset: int | None = Field(None, description="End (exclusive) of the affected range, when there is one.")
    message: str

    @property
    def is_warning(self) -> bool:
        """Tell whether the finding should be shown as a warning (something was skipped or lost)."""
        return self.kind in {
            "data_loss",
            "truncated",
            "topic_recreated",
            "removed_unread",
            "cluster_skipped",
            "topic_missing",
            "partition_missing",
            "offset_clamped",
            "empty_metadata",
        }

    @property
    def lost_range(self) -> LostRange | None:
        """The lost offsets of a ``data_loss`` finding; None for every other kind."""
        if self.kind != "data_loss":
            return None
        # A data_loss finding always names its partition and range; validation says so loudly if one does not.
        return LostRange.model_validate(
            self.model_dump(include={"cluster_id", "topic", "partition", "from_offset", "to_offset"})
        )


class PinnedVersion(FrozenModel):
    """One registered version of a subject a run was prepared with: its number and its (immutable) schema id."""

    version: int
    schema_id: int


class DecodePin(FrozenModel):
    """The schema input one planned ``(cluster, topic)`` of a registry or fixed-schema stream was prepared with.

    A recovery decodes with exactly these: the pinned registry versions fetched by id (ids are immutable, and a
    soft-deleted version's id still resolves), or the ``schema_file`` only if its contents still hash alike.
    """

    cluster_id: str
    topic: str
    stream_id: str
    value_format: Literal["avro", "json_schema", "protobuf", "avro_file"]
    subject: str | None = Field(None, description="The registry subject; None for a value_schema_file.")
    role: Literal["value", "key"] = Field("value", description="Whether the subject decodes the values or keys.")
    versions: tuple[PinnedVersion, ...] = Field((), description="The subject's versions then, oldest first.")
    schema_file_sha256: str | None = Field(None, description="The value_schema_file's contents, hashed.")


class ArchiveRead(FrozenModel):
    """The archive a bootstrap run lands, pinned when it is planned: a recovery reads exactly these rows again."""

    location: str = Field(description="The archive as Spark reads it (local path or s3a:// URI).")
    format: Literal["parquet", "json", "delta"]
    until: datetime = Field(description="Rows with a timestamp before it land (and rows without a timestamp).")
    columns: dict[str, str] = Field(description="Sink column -> archive column, every mapping resolved.")
    cluster: str = Field(description="The `cluster` of rows without their own.")
    stream: str = Field(description="The `stream` of rows without their own.")
    files: tuple[str, ...] = Field((), description="The files read (parquet, json), as listed when planned.")
    remaining: tuple[str, ...] = Field(
        (), description="The archive's files left for the next runs (``max_files_per_run``), in order."
    )
    delta_version: int | None = Field(None, description="The Delta table version read (delta).")
    rows: int = Field(ge=0, description="The archive rows the run lands, counted when planned.")
    switch: bool = Field(
        False,
        description="The bootstrap's first run: its Kafka ranges land only records at or after ``until`` (the "
        "archive holds the older ones, also those a producer's clock put after the switch offset). False for the "
        "later parts, and in plans written before the switch filtered Kafka.",
    )
    file_pins: dict[str, tuple[int, int]] = Field(
        default_factory=dict,
        description="Per file of ``files`` and ``remaining``, its size in bytes and modification time (epoch ms) "
        "when the bootstrap's first part was planned, carried along the parts: a file that differs at a later "
        "part's plan or at any read is refused, so the rows landed are the rows counted, each once. Empty in plans "
        "written before files were pinned, and for a Delta archive (its version is pinned); plans written before "
        "``remaining`` was pinned pin only ``files``.",
    )
    abandoned_runs: tuple[int, ...] = Field(
        (),
        description="Earlier runs that planned these archive rows and were abandoned: the dead letters of archive "
        "rows they landed are final, so this run lands none of those rows again (in neither table).",
    )

    def next_part(
        self, files: tuple[str, ...], remaining: tuple[str, ...], file_pins: dict[str, tuple[int, int]]
    ) -> ArchiveRead:
        """The next part of this archive: ``files`` now, ``remaining`` after, with the first plan's ``file_pins``
        of them; not the switch, its rows not counted yet.
        """
        return replaced(self, files=files, remaining=remaining, rows=0, switch=False, file_pins=file_pins)

    def with_file_pins(self, file_pins: dict[str, tuple[int, int]]) -> ArchiveRead:
        """This read with its files pinned (``file_pins``)."""
        return replaced(self, file_pins=file_pins)

    def with_rows(self, rows: int) -> ArchiveRead:
        """This read counted: it lands ``rows`` archive rows."""
        return replaced(self, rows=rows)

    def with_abandoned_runs(self, abandoned_runs: tuple[int, ...]) -> ArchiveRead:
        """This read leaving out the rows the ``abandoned_runs`` dead-lettered."""
        return replaced(self, abandoned_runs=abandoned_runs)


class Plan(FrozenModel):
    """Everything one run will do. Written to the state before any read, so a crashed run is finished exactly."""

    pipeline_id: str
    run_seq: int = Field(ge=1)
    kind: Literal["incremental"] = "incremental"
    splits: tuple[Split, ...] = Field(description="Every partition's position, including empty ranges.")
    removals: tuple[TopicPartition, ...] = Field((), description="Partitions to mark removed on commit.")
    skipped_clusters: tuple[str, ...] = Field((), description="Unreachable clusters skipped by policy.")
    findings: tuple[Finding, ...] = ()
    metadata_fingerprint: str = ""
    config_pins: dict[str, str] = Field(
        default_factory=dict,
        description="Per semantic setting (sink, formats, schema, isolation level, decode policy, json_strict, "
        "each read stream's resolved value format), a hash of the value it was planned with: a crashed run is "
        "re-executed only under the same settings. Only the settings a plan pinned are checked (older versions "
        "pinned fewer, or none).",
    )
    decoding: tuple[DecodePin, ...] = Field(
        (),
        description="The schema inputs of the planned registry and fixed-schema sources, added once they were "
        "prepared (before the plan is written): a recovery decodes with exactly these. Empty when the plan has no "
        "such source, and in plans written before decode inputs were pinned (those recover with the latest).",
    )
    bootstrap: ArchiveRead | None = Field(
        None, description="The archive this run lands with its Kafka records (the pipeline's first run only)."
    )
    event_time: str | None = Field(
        None,
        description="The ``event_time`` expression the run's min/max event time measure, pinned with the decode "
        "inputs once checked (before the plan is written): a recovery measures with it. None: the Kafka timestamp.",
    )
    planned_at: datetime

    @property
    def read_splits(self) -> tuple[Split, ...]:
        """The splits that have something to read."""
        return tuple(s for s in self.splits if s.stop_offset > s.start_offset)

    @property
    def is_empty(self) -> bool:
        """Tell whether the plan reads nothing."""
        return not self.read_splits and self.bootstrap is None

    @property
    def planned_records(self) -> int:
        """Return the number of offsets the plan reads (an upper bound on records)."""
        return sum(s.record_count for s in self.splits)

    @property
    def capped(self) -> bool:
        """A cap left records behind: the next run has more to read right away."""
        return any(f.kind == "capped" for f in self.findings)

    def with_splits(self, splits: Iterable[Split]) -> Plan:
        """This plan reading ``splits`` instead."""
        return replaced(self, splits=tuple(splits))

    def with_bootstrap(self, bootstrap: ArchiveRead, config_pins: dict[str, str]) -> Plan:
        """This plan landing the archive ``bootstrap`` too, with ``config_pins`` (its stream's settings added)."""
        return replaced(self, bootstrap=bootstrap, config_pins=config_pins)

    def with_decoding(self, decoding: tuple[DecodePin, ...], event_time: str | None) -> Plan:
        """This plan with its decode inputs and ``event_time`` expression pinned."""
        return replaced(self, decoding=decoding, event_time=event_time)
