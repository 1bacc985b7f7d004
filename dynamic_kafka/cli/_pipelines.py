"""Which pipelines a command works on, and a command run over each of them.

``--pipeline`` may be left out when the config has one pipeline; ``--all`` (on the commands where it makes sense)
takes every pipeline, one after another, and a failing one does not stop the others. A pipeline id the config lacks
is a usage error (exit code 2) that names the config file, the closest id and every id.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dynamic_kafka.cli._args import CONFIG_ENV, DEFAULT_CONFIG
from dynamic_kafka.cli.exit_codes import ExitCode
from dynamic_kafka.cli.failures import UsageError, error_body, library_error, report_error
from dynamic_kafka.config.loader import load_project_config, load_yaml
from dynamic_kafka.config.models import unknown_id
from dynamic_kafka.pipeline import Pipeline
from dynamic_kafka.secrets import mask_secrets

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Sequence

    from dynamic_kafka.errors import DynamicKafkaError

PIPELINE_HELP = "pipeline id from the config (may be left out when the config has one pipeline)"
ALL_HELP = "every pipeline of the config, one after another; a failing one does not stop the others"


def add_pipeline_arguments(parser: argparse.ArgumentParser, *, every: bool = False) -> None:
    """Adds ``--pipeline`` (completed from the config's ids) and, with ``every``, ``--all``."""
    target = parser.add_mutually_exclusive_group() if every else parser
    action = target.add_argument("--pipeline", help=PIPELINE_HELP)
    action.completer = complete_pipeline  # type: ignore[attr-defined]  # argcomplete reads this attribute
    if every:
        target.add_argument("--all", action="store_true", help=ALL_HELP)


def complete_pipeline(prefix: str, parsed_args: argparse.Namespace, **_: object) -> list[str]:
    """The config's pipeline ids that start with ``prefix`` (for shell completion; none when the file cannot be
    read: a completion never prints an error).
    """
    config = (
        getattr(parsed_args, "config", None)
        or getattr(parsed_args, "config_before_command", None)
        or os.environ.get(CONFIG_ENV)
        or DEFAULT_CONFIG
    )
    try:
        entries = load_yaml(Path(config)).get("pipelines") or []
        ids = [str(e["id"]) for e in entries if isinstance(e, dict) and "id" in e]
    except Exception:  # any unreadable or unexpected file: no completions
        return []
    return [i for i in ids if i.startswith(prefix)]


def choose(kind: str, wanted: str | None, ids: Sequence[str], config: str, *, every: bool = False) -> str:
    """The id of the ``kind`` (pipeline, publication) a command works on: ``wanted``, or the only one there is.

    Raises:
        UsageError: ``wanted`` is not among ``ids`` (the closest one and every one named), or is left out while the
            config has several (or none).
    """
    if wanted is None:
        if len(ids) == 1:
            return ids[0]
        which = f"--{kind} ID" + (" or --all" if every else "")
        held = f"{len(ids)} {kind}s ({', '.join(ids)})" if ids else f"no {kind}"
        raise UsageError(f"{config}: the config has {held}: say which with {which}.")
    if wanted not in ids:
        raise UsageError(f"{config}: {unknown_id(kind, wanted, ids)}", hint=f"Pass one of them with --{kind}.")
    return wanted


def one_pipeline(args: argparse.Namespace, *, hard_deadline: bool = False) -> Pipeline:
    """The pipeline the command line names (see :func:`choose`), its config read and validated."""
    project = load_project_config(args.config)
    chosen = choose("pipeline", args.pipeline, [p.id for p in project.pipelines], args.config)
    return Pipeline(project, chosen, hard_deadline=hard_deadline)


@dataclass(frozen=True)
class Outcome:
    """What a command did for one pipeline.

    Attributes:
        document: the ``--json`` result.
        text: the result for people (called only without ``--json``).
        code: the exit code when no ``error``.
        error: what failed after the result was made (printed after it): a status that could not reach a cluster.
    """

    document: dict[str, Any]
    text: Callable[[], str]
    code: ExitCode = ExitCode.OK
    error: DynamicKafkaError | None = None


def each_pipeline(
    args: argparse.Namespace, command: Callable[[Pipeline], Outcome], *, hard_deadline: bool = False
) -> int:
    """Runs ``command`` for the chosen pipeline, or with ``--all`` for each pipeline in the config's order; prints
    the results and returns the exit code.

    With ``--all`` and ``--json``, stdout is one JSON array: per pipeline its document, with an ``error`` key
    (``{"type", "message", "hint", "retriable"}``) when it failed (``{"pipeline_id", "error"}`` when it made none).
    Without ``--json``, each result is printed as it is made and each error on stderr, naming its pipeline. The
    exit code is the worst: 1 when one failed, else 3 when a check failed, else 0.
    """
    project = load_project_config(args.config)
    ids = [p.id for p in project.pipelines]
    if not args.all:
        chosen = choose("pipeline", args.pipeline, ids, args.config, every=True)
        outcome = command(Pipeline(project, chosen, hard_deadline=hard_deadline))
        print(json.dumps(outcome.document, indent=2, default=str) if args.json else outcome.text())
        if outcome.error is not None:
            raise outcome.error
        return outcome.code
    documents: list[dict[str, Any]] = []
    codes: list[ExitCode] = []
    for pipeline_id in ids:
        try:
            outcome = command(Pipeline(project, pipeline_id, hard_deadline=hard_deadline))
        except Exception as e:  # one pipeline's failure is reported and the next one runs
            outcome = Outcome({"pipeline_id": pipeline_id}, lambda: "", ExitCode.FAILED, library_error(e))
        else:
            if not args.json:
                print(outcome.text(), flush=True)
        codes.append(outcome.code if outcome.error is None else ExitCode.FAILED)
        if outcome.error is not None and not args.json:
            report_error(outcome.error, json_errors=False, prefix=f"pipeline {pipeline_id}: ")
        documents.append(outcome.document | ({"error": error_body(outcome.error)} if outcome.error else {}))
    if args.json:
        print(mask_secrets(json.dumps(documents, indent=2, default=str)))
    return ExitCode.worst(codes)
