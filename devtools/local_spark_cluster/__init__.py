"""A real Spark standalone cluster on this machine: pyspark's own master and workers, each its own process.

It stands for a team's cluster behind a Spark Connect server (``python -m devtools spark-connect up --master
spark://127.0.0.1:PORT``): executors run on the workers, which hold no jar of dynamic-kafka's and no secret.

Example:
    >>> from devtools.local_spark_cluster import start_cluster, stop_cluster
    >>> cluster = start_cluster(workers=2, worker_cores=1, worker_memory="1g")  # doctest: +SKIP
    >>> cluster.master_url  # doctest: +SKIP
    'spark://127.0.0.1:17077'
    >>> stop_cluster()  # doctest: +SKIP
"""

from devtools.local_spark_cluster.cluster import (
    ClusterInfo,
    ClusterStatus,
    WorkerInfo,
    cluster_status,
    resolve_base_dir,
    start_cluster,
    stop_cluster,
)

__all__ = [
    "ClusterInfo",
    "ClusterStatus",
    "WorkerInfo",
    "cluster_status",
    "resolve_base_dir",
    "start_cluster",
    "stop_cluster",
]
