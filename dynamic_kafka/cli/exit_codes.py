"""The exit codes of ``dynamic-kafka``, one meaning each (documented in docs/operations.md; part of the
compatibility promise in docs/versioning.md).
"""

from __future__ import annotations

from enum import IntEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable


class ExitCode(IntEnum):
    """What a ``dynamic-kafka`` process's exit code says."""

    OK = 0
    """The command did what it was asked; every check it made passed."""
    FAILED = 1
    """The command failed (the error on stderr says what happened and what to do)."""
    USAGE = 2
    """The command line is wrong: an unknown command or option, a missing or bad value, a pipeline the config lacks."""
    CHECK_FAILED = 3
    """The command worked and a check it made failed: ``check`` found problems, a ``health`` verdict failed."""
    DEADLINE = 124
    """A run past its ``max_run_seconds`` did not stop within the grace period and was ended."""
    INTERRUPTED = 130
    """Interrupted (Ctrl-C)."""

    @classmethod
    def worst(cls, codes: Iterable[ExitCode]) -> ExitCode:
        """The code of several outcomes (``--all``): a failure over a failed check over success.

        Example:
            >>> ExitCode.worst([ExitCode.OK, ExitCode.CHECK_FAILED, ExitCode.FAILED])
            <ExitCode.FAILED: 1>
        """
        seen = set(codes)
        return next((code for code in (cls.FAILED, cls.CHECK_FAILED) if code in seen), cls.OK)
