"""Writing read records into the pipeline's Delta sink and dead-letter table.

- :mod:`~dynamic_kafka.sink.incremental`: an incremental run's idempotent appends (:func:`write_incremental`).
- :mod:`~dynamic_kafka.sink.merge`: a backfill's MERGE (:func:`merge_backfill`).
- :mod:`~dynamic_kafka.sink.tables`: row shapes, table creation, Delta transaction look-ups.
- :mod:`~dynamic_kafka.sink.metrics`: what a write observed (:class:`WriteResult`).

Importing this package imports no pyspark.
"""

from dynamic_kafka.sink.incremental import write_incremental
from dynamic_kafka.sink.merge import merge_backfill
from dynamic_kafka.sink.metrics import WriteResult
from dynamic_kafka.sink.tables import committed_txn_version

__all__ = ["WriteResult", "committed_txn_version", "merge_backfill", "write_incremental"]
