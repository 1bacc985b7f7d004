"""``dynamic-kafka check``: every problem of a project's config and metadata files at once, offline.

It reads the project config and, for a ``file`` metadata service, the metadata file; it contacts no broker,
registry, object store or Spark. Every problem is reported, not the first one: each invalid key of both files (in
plain words, with "did you mean" for misspelled keys), each schedule that is not a cron expression Dagster takes,
each stream a pipeline subscribes to that the metadata file does not define, each publication whose stream is not
one topic on one cluster of the file, and each Avro schema file that cannot be read. A pipeline whose
``stream_pattern`` matches no stream of the file is a note: the stream may come later.
"""

from __future__ import annotations

import difflib
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dynamic_kafka.config.cron import cron_problem
from dynamic_kafka.config.flink_options import flink_option_findings
from dynamic_kafka.config.loader import load_yaml, validate_project_data, validation_problems
from dynamic_kafka.config.models import ProjectConfig, SingleClusterMetadataServiceConfig
from dynamic_kafka.errors import ConfigError
from dynamic_kafka.frozen import replaced
from dynamic_kafka.metadata.file import MetadataFile
from dynamic_kafka.references import expand, is_reference, references_in
from dynamic_kafka.references import location as key_path
from dynamic_kafka.secrets import is_sensitive_key

if TYPE_CHECKING:
    from collections.abc import Mapping


class Problem(BaseModel):
    """One thing to fix: in which file, at which key, and what to write instead."""

    model_config = ConfigDict(frozen=True)

    file: str
    location: str = Field(description="The key path, e.g. 'pipelines[0].streams'; '(file)' for the whole file.")
    message: str


class CheckReport(BaseModel):
    """What ``dynamic-kafka check`` found."""

    model_config = ConfigDict(frozen=True)

    ok: bool = Field(description="True when there is no problem (notes do not count).")
    files: tuple[str, ...] = Field(description="The files read.")
    pipelines: tuple[str, ...] = Field(description="Pipeline ids of a valid config; empty when it is invalid.")
    streams: tuple[str, ...] = Field(description="Stream ids the metadata file defines (a file service only).")
    problems: tuple[Problem, ...]
    notes: tuple[str, ...] = Field(description="Things worth knowing that are not errors.")

    def with_online(self, problems: tuple[Problem, ...], notes: tuple[str, ...]) -> CheckReport:
        """This report after the online checks: their ``problems`` (ok without any) and the ``notes`` so far."""
        return replaced(self, ok=not problems, problems=problems, notes=notes)


def check_project(path: str | Path) -> CheckReport:
    """Every problem of the project config at ``path`` and of the metadata file it names, without contacting
    anything.
    """
    path = Path(path)
    problems: list[Problem] = []
    notes: list[str] = []
    files = [str(path)]
    raw = _read(path, problems)
    if raw is None:
        return _report(files, (), (), problems, notes)
    literals_allowed = raw.get("allow_literal_secrets") is True
    if not literals_allowed:
        problems += _literal_secret_problems(raw, str(path))
    problems += _cron_problems(raw, str(path))
    project: ProjectConfig | None = None
    moved: list[str] = []
    try:
        project = validate_project_data(raw, path, moved_keys=moved)
    except ValidationError as e:
        problems += _validation_problems(e, ProjectConfig, str(path), problems)
    notes += moved
    metadata, metadata_path = _metadata(raw, path, problems, notes, literals_allowed=literals_allowed)
    if metadata_path is not None:
        files.append(str(metadata_path))
    if project is not None and metadata is not None:
        problems += _subscription_problems(project, metadata, str(path), notes)
        problems += _publication_problems(project, metadata, str(path))
    if project is not None:
        problems += _schema_file_problems(project, str(path))
        problems += _flink_option_problems(project, metadata, str(path), str(metadata_path), notes)
        problems += _shared_table_problems(project, str(path))
        problems += _uncreatable_table_problems(project, str(path))
    return _report(
        files,
        tuple(p.id for p in project.pipelines) if project is not None else (),
        tuple(sorted(metadata.streams)) if metadata is not None else (),
        problems,
        notes,
    )


def _report(
    files: list[str], pipelines: tuple[str, ...], streams: tuple[str, ...], problems: list[Problem], notes: list[str]
) -> CheckReport:
    return CheckReport(
        ok=not problems,
        files=tuple(files),
        pipelines=pipelines,
        streams=streams,
        problems=tuple(problems),
        notes=tuple(notes),
    )


def _read(path: Path, problems: list[Problem]) -> dict[str, Any] | None:
    """The file's top-level mapping with its references resolved, or None (with the problem recorded) when it
    cannot be read as one. Every reference problem is recorded, secrets' included (they are resolved only when a
    client is built, but an unset variable or a missing file is knowable now).
    """
    duplicates: list[ConfigError] = []
    try:
        raw = load_yaml(path, duplicates)
    except ConfigError as e:
        duplicates.append(e)
        raw = None
    finally:
        # A duplicate key is recorded and the file read on (the last entry kept), so it hides no other problem.
        problems += [Problem(file=str(path), location="(file)", message=_without_source(e, path)) for e in duplicates]
    if duplicates and raw is None:
        return None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        problems.append(Problem(file=str(path), location="(file)", message="write a mapping of keys, not a list"))
        return None
    expanded, unresolved = expand(raw, sensitive=is_sensitive_key, check_deferred=True)
    problems += [Problem(file=str(path), location=loc, message=m) for loc, m in unresolved]
    return dict(expanded)


def _validation_problems(
    error: ValidationError, model: type[BaseModel], source: str, found: list[Problem]
) -> list[Problem]:
    """The validation problems of a file, except at a key already reported (an unresolved reference makes its
    value invalid too, which would say the same thing twice).
    """
    reported = {p.location for p in found if p.file == source}
    return [
        Problem(file=source, location=loc, message=m)
        for loc, m in validation_problems(error, model)
        if loc not in reported
    ]


def _without_source(error: ConfigError, path: Path) -> str:
    return str(error).removeprefix(f"{path}: ")


# Header names that carry credentials without saying "token" or "secret".
_SECRET_HEADER = re.compile(r"authorization|api[-_]?key", re.IGNORECASE)
# Keys that look sensitive but name where a secret is, or how it is used, not the secret itself.
_NOT_A_SECRET_SUFFIXES = (".location", "_location", "file", "path", "keytab", "url", "endpoint", "provider", "type")


def _literal_secret_problems(document: Any, source: str, path: tuple[str | int, ...] = ()) -> list[Problem]:
    """Each secret written as a literal (docs/security.md: never a literal), never showing its value."""
    if isinstance(document, dict):
        return [p for k, v in document.items() for p in _literal_secret_problems(v, source, (*path, str(k)))]
    if isinstance(document, list):
        return [p for i, v in enumerate(document) for p in _literal_secret_problems(v, source, (*path, i))]
    key = next((k for k in reversed(path) if isinstance(k, str)), "")
    if not isinstance(document, str) or not document.strip():
        return []
    if len(path) > 1 and path[-2] == "headers":
        # An HTTP header holds its credential beside a scheme ("Bearer ${env:TOKEN}"): literal means no reference.
        if references_in(document) or not (is_sensitive_key(key) or _SECRET_HEADER.search(key)):
            return []
    elif is_reference(document) or not is_sensitive_key(key) or key.lower().endswith(_NOT_A_SECRET_SUFFIXES):
        return []
    message = (
        "a secret written as a literal; write it as a reference (${env:NAME} or ${file:PATH}) so it stays out of "
        "the file, or set allow_literal_secrets: true in the project config"
    )
    return [Problem(file=source, location=key_path(path), message=message)]


_TABLE_KEYS = {"sink": "sink.path", "dead_letter": "sink.dead_letter_path", "state": "state_path"}
"""The config key of each table role (what a problem about the table points at)."""
_MOVE_IT = "choose a folder this user may write"


def _shared_table_problems(project: ProjectConfig, source: str) -> list[Problem]:
    """Each table two pipelines (or two roles of one) would write: the state table lets one run write a table."""
    owners: dict[str, str] = {}
    found = []
    for index, pipeline in enumerate(project.pipelines):
        for role, table in pipeline.tables().items():
            where = table.location.delta_rs_uri
            owner = f"the {role.replace('_', '-')} table of pipeline {pipeline.id!r}"
            if where in owners:
                found.append(
                    Problem(
                        file=source,
                        location=f"pipelines[{index}].{_TABLE_KEYS[role]}",
                        message=f"{table.location.uri} is also {owners[where]}; give each pipeline its own sink, "
                        "dead-letter and state locations",
                    )
                )
            owners.setdefault(where, owner)
    return found


def _uncreatable_table_problems(project: ProjectConfig, source: str) -> list[Problem]:
    return [
        Problem(file=source, location=f"pipelines[{index}].{_TABLE_KEYS[role]}", message=f"{problem}; {_MOVE_IT}")
        for index, pipeline in enumerate(project.pipelines)
        for role, problem in pipeline.uncreatable_tables().items()
    ]


def _cron_problems(raw: dict[str, Any], source: str) -> list[Problem]:
    pipelines = raw.get("pipelines")
    found = []
    for index, pipeline in enumerate(pipelines if isinstance(pipelines, list) else []):
        if not isinstance(pipeline, dict):
            continue
        # `schedule` is the old place of orchestration.schedule (config.moved_keys), still read.
        schedules = {"schedule": pipeline.get("schedule")}
        for section in ("orchestration", "maintenance", "health"):
            if isinstance(pipeline.get(section), dict):
                schedules[f"{section}.schedule"] = pipeline[section].get("schedule")
        for key, schedule in schedules.items():
            problem = cron_problem(schedule) if isinstance(schedule, str) else None
            if problem:
                found.append(Problem(file=source, location=f"pipelines[{index}].{key}", message=problem))
    return found


def _metadata(
    raw: dict[str, Any], config_path: Path, problems: list[Problem], notes: list[str], *, literals_allowed: bool
) -> tuple[MetadataFile | None, Path | None]:
    """The metadata file a ``file`` service names, validated (None when invalid, absent, or not a file service)."""
    service = raw.get("metadata_service")
    if (
        not isinstance(service, dict)
        or service.get("type", "file") != "file"
        or not isinstance(service.get("path"), str)
    ):
        if isinstance(service, dict) and service.get("type") == "python":
            notes.append("metadata_service is a python service: its streams are not checked (that runs user code)")
        return None, None
    path = Path(service["path"])
    path = path if path.is_absolute() else config_path.parent / path
    if not path.exists():
        problems.append(
            Problem(
                file=str(config_path),
                location="metadata_service.path",
                message=f"the metadata file {str(path)!r} does not exist; create it or fix the path",
            )
        )
        return None, path
    document = _read(path, problems)
    if document is None:
        return None, path
    if not literals_allowed:
        problems += _literal_secret_problems(document, str(path))
    try:
        return MetadataFile.model_validate(document), path
    except ValidationError as e:
        problems += _validation_problems(e, MetadataFile, str(path), problems)
        return None, path


def _subscription_problems(
    project: ProjectConfig, metadata: MetadataFile, source: str, notes: list[str]
) -> list[Problem]:
    known = sorted(metadata.streams)
    found = []
    for index, pipeline in enumerate(project.pipelines):
        for position, stream_id in enumerate(pipeline.streams or ()):
            if stream_id in metadata.streams:
                continue
            near = difflib.get_close_matches(stream_id, known, n=1, cutoff=0.75)
            fix = f"did you mean {near[0]!r}?" if near else f"the metadata file defines: {', '.join(known) or '(none)'}"
            found.append(
                Problem(
                    file=source,
                    location=f"pipelines[{index}].streams[{position}]",
                    message=f"unknown stream {stream_id!r}; {fix}",
                )
            )
        pattern = pipeline.stream_pattern
        if pattern is not None and not any(re.fullmatch(pattern, s) for s in known):
            notes.append(f"pipeline {pipeline.id!r}: stream_pattern {pattern!r} matches no stream of the metadata file")
    return found


def _flink_option_problems(
    project: ProjectConfig, metadata: MetadataFile | None, source: str, metadata_source: str, notes: list[str]
) -> list[Problem]:
    """Flink source options in any ``properties``: a note for each one translated, a problem for each one refused."""
    places: list[tuple[str, str, Mapping[str, str]]] = [
        (source, f"pipelines[{index}].properties", pipeline.properties)
        for index, pipeline in enumerate(project.pipelines)
    ]
    if isinstance(project.metadata_service, SingleClusterMetadataServiceConfig):
        places.append((source, "metadata_service.properties", project.metadata_service.properties))
    if metadata is not None:
        places += [
            (metadata_source, f"clusters.{cid}.properties", c.properties) for cid, c in metadata.clusters.items()
        ]
    found = []
    for file, location, properties in places:
        translated, refused = flink_option_findings(properties)
        notes += [f"{location}: {line}" for line in translated.values()]
        found += [Problem(file=file, location=f"{location}.{key}", message=line) for key, line in refused.items()]
    return found


def _publication_problems(project: ProjectConfig, metadata: MetadataFile, source: str) -> list[Problem]:
    """A publication's stream must be in the metadata file, as one topic on one cluster (where it writes), whose
    Schema Registry its registry formats need.
    """
    found = []
    for index, publication in enumerate(project.publications):
        placements = metadata.streams.get(publication.stream)
        if placements is None:
            known = ", ".join(sorted(metadata.streams)) or "(none)"
            message = f"unknown stream {publication.stream!r}; the metadata file defines: {known}"
        else:
            clusters = [metadata.cluster(cid, topics) for cid, topics in placements.items()]
            if len(clusters) == 1 and len(clusters[0].topics) == 1 and clusters[0].topic_pattern is None:
                registry = clusters[0].schema_registry or publication.schema_registry
                found += [
                    Problem(
                        file=source,
                        location=f"publications[{index}].{role}",
                        message=f"format {encoding.format} needs a Schema Registry, and neither cluster "
                        f"{clusters[0].cluster_id!r} nor the publication names one: add `schema_registry: "
                        "{url: ...}` to the cluster in the metadata file, or to the publication",
                    )
                    for role, encoding in publication.registry_encodings.items()
                    if registry is None
                ]
                continue
            shown = "; ".join(
                f"{c.cluster_id}: {', '.join(sorted(c.topics)) or '-'}"
                + (f" + pattern {c.topic_pattern}" if c.topic_pattern else "")
                for c in clusters
            )
            message = (
                f"stream {publication.stream!r} is {shown}; a publication writes to one topic on one cluster: "
                "give it a stream of its own"
            )
        found.append(Problem(file=source, location=f"publications[{index}].stream", message=message))
    return found


def _schema_file_problems(project: ProjectConfig, source: str) -> list[Problem]:
    found = []
    for index, pipeline in enumerate(project.pipelines):
        entries = [(f"pipelines[{index}].value", pipeline.value.schema_file)]
        entries += [(f"pipelines[{index}].formats.{s}", f.schema_file) for s, f in pipeline.formats.items()]
        for location, schema_file in entries:
            if schema_file is None:
                continue
            try:
                json.loads(schema_file.read_text(encoding="utf-8"))
            except OSError as e:
                message = f"cannot read the Avro schema file {str(schema_file)!r} ({e.strerror}); fix the path"
            except ValueError as e:
                message = f"the Avro schema file {str(schema_file)!r} is not JSON ({e}); an .avsc file is JSON"
            else:
                continue
            found.append(Problem(file=source, location=f"{location}.schema_file", message=message))
    return found
