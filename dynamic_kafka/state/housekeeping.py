"""State table maintenance: compaction of the run history, vacuum, checkpoint and log cleanup.

Kept apart from the store because it is housekeeping, not part of the run protocol: a run is committed before
maintenance starts, and a maintenance failure only costs later reads a little time.
"""

from __future__ import annotations

import logging
import math
import time
from datetime import timedelta

import pyarrow as pa
import pyarrow.compute as pc
from deltalake.exceptions import CommitFailedError

from dynamic_kafka.errors import StateError
from dynamic_kafka.state.table import FOREIGN_ERRORS, StateTable

logger = logging.getLogger(__name__)

_SMALL_FILE_BYTES = 32 * 1024 * 1024
_MIN_VACUUM_AGE = timedelta(hours=1)


def maintain(table: StateTable, *, maintain_every: int, force: bool = False) -> None:
    """Keeps reads bounded; call after each commit (cheap when there is nothing to do).

    Once ``maintain_every`` small history files exist (or with ``force``): compact the history into one
    file, vacuum files removed longer than ``deleted_file_retention`` ago (and orphans of crashed writers),
    write a checkpoint and delete expired log entries. The current rows need no compaction (every commit
    rewrites them as one file) and delta-rs checkpoints every ``checkpoint_interval`` versions by itself.

    Maintenance commits use the same exact-version guard as runs and are skipped while a run is planned,
    so they never invalidate a run in flight; a run that began at the same moment may fail with
    ``RunInProgressError`` (nothing written, retry). A maintenance commit that loses a race is skipped.

    Raises:
        StateError: the table is unreadable or a maintenance step failed for another reason than a race
            (the state itself is intact; callers may log it as a warning).
    """
    dt = table.open()
    if dt is None:
        return
    head, _ = table.read_current(dt, predicate="kind = 'head'")
    if head is not None and head.status == "planned":
        logger.debug("state maintenance of %s skipped: run %d is in flight", table.pipeline_id, head.run_seq)
        return
    try:
        actions = pa.table(dt.get_add_actions(flatten=True))
        is_small = pc.and_(
            pc.equal(actions.column("partition.kind"), "run"),
            pc.less(actions.column("size_bytes"), _SMALL_FILE_BYTES),
        )
        small = pc.sum(is_small.cast(pa.int64())).as_py() or 0
        if small < maintain_every and not force:
            return
        started, version = time.perf_counter(), dt.version()
        if small > 1:
            metrics = dt.optimize.compact(
                partition_filters=[("kind", "=", "run")], commit_properties=table.props("maintain", None)
            )
            # compact() moves dt to the latest version: if a run began meanwhile, stop here rather than
            # commit a vacuum on top of it (which would invalidate that run's expected_version).
            if dt.version() != version + (1 if metrics.get("numFilesRemoved") else 0):
                logger.info("state maintenance of %s stopped: a run began during it", table.pipeline_id)
                return
        dt.vacuum(
            retention_hours=math.ceil(max(table.deleted_file_retention, _MIN_VACUUM_AGE).total_seconds() / 3600),
            dry_run=False,
            enforce_retention_duration=False,
            full=True,
            commit_properties=table.props("maintain", None),
        )
        dt.update_incremental()
        dt.create_checkpoint()
        dt.cleanup_metadata()
    except CommitFailedError as e:
        logger.info("state maintenance of %s skipped: the table changed meanwhile (%s)", table.pipeline_id, e)
        return
    except FOREIGN_ERRORS as e:
        raise StateError(
            f"maintenance of the state table at {table.path} failed: {e}",
            hint="The committed state is intact; the next maintain() retries.",
        ) from e
    logger.info(
        "state maintenance of %s: %d history files compacted, versions %d..%d, checkpoint written, %.0f ms",
        table.pipeline_id,
        small,
        version,
        dt.version(),
        1000 * (time.perf_counter() - started),
    )
