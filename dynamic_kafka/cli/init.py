"""The ``init`` command: write a project's two files (config and metadata) with comments, for a Kafka broker on this
machine; they pass ``dynamic-kafka check`` as written. It never writes over a file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from dynamic_kafka.cli._args import DEFAULT_CONFIG, examples
from dynamic_kafka.errors import ConfigError
from dynamic_kafka.schemas import shipped_path

if TYPE_CHECKING:
    import argparse

HELP = "write a commented project config and metadata file into DIR (default: here), for a broker on this machine"
_EXAMPLES = """\
examples:
  dynamic-kafka init                  dynamic_kafka.yaml and metadata.yaml here
  dynamic-kafka init my-project       in my-project/ (made if missing)
then:
  dynamic-kafka check --config my-project/dynamic_kafka.yaml
"""
METADATA_FILE = "metadata.yaml"

_METADATA = """\
# yaml-language-server: $schema={schema}
# Where the streams live: the clusters, and under each stream the topics that make it up on each cluster.
# The file is read again on every run: editing it is how a stream moves to another cluster.
clusters:
  # A cluster id is yours to choose and must stay stable: rows carry it and the state keys offsets by it.
  local:
    bootstrap_servers: "localhost:9092"
    # Kafka client settings, strings; secrets as references, never literals:
    # properties:
    #   security.protocol: SASL_SSL
    #   sasl.mechanism: SCRAM-SHA-512
    #   sasl.username: ingest
    #   sasl.password: "${{env:KAFKA_PASSWORD}}"
streams:
  # A stream is a logical name; under it, each cluster lists its topics.
  events:
    local: [events]
"""

_CONFIG = """\
# yaml-language-server: $schema={schema}
# What to land where. Relative paths are relative to this file. Every key: docs/reference/configuration.md.
metadata_service: {{type: file, path: {metadata}}}

# Spark runs in this process by default (master local[*], Java 17+ and the spark extra); to start no JVM, send the
# work to a Spark Connect server instead:
# spark:
#   remote: "sc://localhost:15002"

pipelines:
  - id: events
    streams: [events]
    sink:
      path: data/events            # a Delta table; also s3://bucket/events
    # The state (committed offsets, run history) is a Delta table beside the sink: data/events_state.
    value:
      format: string               # bytes (the default), string, json (with schema), avro, protobuf, json_schema
      # schema: "id BIGINT, amount DECIMAL(12,2), placed_at TIMESTAMP"   # for format: json
    # starting_offsets: {{kind: earliest}}   # where the first run starts (the default)
    # orchestration:
    #   schedule: "*/15 * * * *"           # the Dagster (or Airflow) schedule
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Registers ``init``."""
    parser = subparsers.add_parser("init", help=HELP, description=HELP, **examples(_EXAMPLES))
    parser.add_argument("dir", nargs="?", default=".", metavar="DIR", help="the project's folder (default: here)")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    parser.set_defaults(handler=_init)


def _init(args: argparse.Namespace) -> int:
    written = scaffold(Path(args.dir))
    if args.json:
        print(json.dumps({"files": [str(p) for p in written]}))
    else:
        config = written[0]
        print(
            f"wrote {config} and {written[1]} (a pipeline 'events' from topic 'events' on localhost:9092 into "
            f"{config.parent / 'data/events'}); next:\n"
            f"  dynamic-kafka check --config {config}\n"
            f"  dynamic-kafka plan --config {config}"
        )
    return 0


def scaffold(folder: Path) -> tuple[Path, Path]:
    """Writes ``dynamic_kafka.yaml`` and ``metadata.yaml`` into ``folder`` (made if missing); returns their paths.

    Raises:
        ConfigError: one of the files exists already (nothing is written).
    """
    config, metadata = folder / DEFAULT_CONFIG, folder / METADATA_FILE
    existing = [str(p) for p in (config, metadata) if p.exists()]
    if existing:
        raise ConfigError(
            f"{' and '.join(existing)} exist{'s' if len(existing) == 1 else ''} already: init writes nothing over a "
            "file, so nothing was written.",
            hint="Edit the files, move them away, or give init another folder (dynamic-kafka init DIR).",
        )
    folder.mkdir(parents=True, exist_ok=True)
    texts = {
        metadata: _METADATA.format(schema=shipped_path("metadata.schema.json")),
        config: _CONFIG.format(schema=shipped_path("dynamic_kafka.schema.json"), metadata=METADATA_FILE),
    }
    for path, text in texts.items():
        with path.open("x", encoding="utf-8") as file:  # "x": a file made meanwhile is not overwritten either
            file.write(text)
    return config, metadata
