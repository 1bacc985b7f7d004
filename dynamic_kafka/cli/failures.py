"""How the command line shows an error: one paragraph on stderr, or with ``--json`` one JSON document, and the
exit code it means (:class:`~dynamic_kafka.cli.exit_codes.ExitCode`).
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Protocol

from dynamic_kafka.cli.exit_codes import ExitCode
from dynamic_kafka.errors import DynamicKafkaError, UnexpectedError, as_library_error
from dynamic_kafka.secrets import mask_secrets

_LOG = logging.getLogger(__name__)


class UsageError(DynamicKafkaError):
    """The command line names something the config does not hold, or leaves out what it must say (exit code 2,
    as argparse's own usage errors).
    """


class ExplainedError(Protocol):
    """An error that carries its fix and whether to retry (the library's errors; the dev tools' follow suit)."""

    message: str
    hint: str | None
    retriable: bool


def error_body(error: ExplainedError) -> dict[str, object]:
    """An error as the ``{"type", "message", "hint", "retriable"}`` mapping of the JSON error document."""
    return {"type": type(error).__name__, "message": error.message, "hint": error.hint, "retriable": error.retriable}


def error_document(error: ExplainedError) -> str:
    """An error as the one-line JSON document ``--json`` prints on stderr (never a secret: messages hold none)."""
    return json.dumps({"error": error_body(error)})


def library_error(error: Exception) -> DynamicKafkaError:
    """Any exception a command raised as the library's error (an ``OSError`` as ``HostError``, anything else as
    ``UnexpectedError``); its traceback is logged (shown with ``-v``) when it was not the library's own.
    """
    converted = as_library_error(error)
    if converted is not error:
        _LOG.info("the original error, in full", exc_info=error)
    return converted or UnexpectedError(error)


def exit_code(error: DynamicKafkaError) -> ExitCode:
    """The exit code of a command that failed with ``error``."""
    return ExitCode.USAGE if isinstance(error, UsageError) else ExitCode.FAILED


def report_error(error: DynamicKafkaError, *, json_errors: bool, prefix: str = "") -> ExitCode:
    """Print ``error`` as one paragraph (or its JSON document) on stderr, secrets masked; its exit code."""
    text = error_document(error) if json_errors else f"dynamic-kafka: error: {prefix}{error}"
    print(mask_secrets(text), file=sys.stderr)
    return exit_code(error)
