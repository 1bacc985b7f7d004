"""A Spark Connect session garbage-collected on a thread of pyspark's shared release pool leaves the pool running:
closing there would join the pool from inside it (the hang seen in long-lived processes and in this suite)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from dynamic_kafka.config.models import SparkConfig
from dynamic_kafka.spark.remote import build_remote_session

if TYPE_CHECKING:
    from devtools.local_spark_connect import ServerInfo

pytestmark = pytest.mark.integration


def test_a_session_collected_on_a_release_thread_leaves_the_shared_pool_serving(
    spark_connect_server: ServerInfo,
) -> None:
    from pyspark.sql.connect.client.reattach import ExecutePlanResponseReattachableIterator as Releases

    settings = SparkConfig(remote=spark_connect_server.remote)
    dropped, kept = build_remote_session(settings), build_remote_session(settings)
    assert dropped.range(3).count() == 3  # a query: the shared release pool exists
    pool = Releases._release_thread_pool_instance
    assert pool is not None

    # What the garbage collector does when it collects `dropped` on one of the pool's own threads.
    collected: Any = dropped
    pool.submit(collected.__del__).result(timeout=60)

    assert Releases._release_thread_pool_instance is pool, "the pool was shut down from one of its own threads"
    assert kept.range(5).count() == 5
