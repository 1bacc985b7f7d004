# ruff: noqa
# A probe kept as evidence for docs/object-storage.md (run by hand against `python -m devtools local-s3 up`, after
# `eval "$(python -m devtools local-s3 status --env)"`: the server checks credentials), not product code.
"""Spark 4.1.3 + delta-spark 4.4 writes and reads a Delta table on moto over s3a (path-style, custom endpoint)."""

import os, sys, time, uuid, logging, json

logging.basicConfig(level=logging.INFO)
from dynamic_kafka.spark import SparkSettings, build_spark_session, stop_spark_session

E = sys.argv[1]
extra = sys.argv[2] if len(sys.argv) > 2 else ""
PKGS = [
    "org.apache.hadoop:hadoop-aws:3.4.2",
    "software.amazon.awssdk:s3:2.29.52",
    "software.amazon.awssdk:s3-transfer-manager:2.29.52",
] + [p for p in extra.split(",") if p]
conf = {
    "spark.jars.packages": ",".join(PKGS),
    "spark.jars.excludes": "software.amazon.awssdk:bundle",
    "spark.hadoop.fs.s3a.endpoint": E,
    "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
    "spark.hadoop.fs.s3a.path.style.access": "true",
    "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
    "spark.hadoop.fs.s3a.access.key": os.environ["AWS_ACCESS_KEY_ID"],
    "spark.hadoop.fs.s3a.secret.key": os.environ["AWS_SECRET_ACCESS_KEY"],
    "spark.hadoop.fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
    "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
}
t = time.time()
spark = build_spark_session(SparkSettings(master="local[2]", conf=conf, class_data_sharing=False))
print("session in", round(time.time() - t, 1))
jvm = spark.sparkContext._jvm
print("spark.jars:", [j.rsplit("/", 1)[-1] for j in (jvm.System.getProperty("spark.jars") or "").split(",")])
for scheme in ["s3a", "s3"]:
    path = f"{scheme}://lake/spark-{uuid.uuid4().hex[:6]}"
    t = time.time()
    spark.range(0, 1000).withColumnRenamed("id", "x").write.format("delta").save(path)
    spark.range(1000, 1500).withColumnRenamed("id", "x").write.format("delta").mode("append").save(path)
    n = spark.read.format("delta").load(path).count()
    print(scheme, "write+append+read", path, "count", n, "in", round(time.time() - t, 1), "s")
    hist = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").select("version", "operation").collect()
    print(" history", [(r.version, r.operation) for r in hist])
    # delta-rs reads the Spark-written table
    from deltalake import DeltaTable

    so = {
        "AWS_ENDPOINT_URL": E,
        "AWS_ACCESS_KEY_ID": "a",
        "AWS_SECRET_ACCESS_KEY": "b",
        "AWS_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
    }
    dt = DeltaTable(path.replace("s3a://", "s3://"), storage_options=so)
    print(" delta-rs sees version", dt.version(), "rows", dt.to_pyarrow_table().num_rows)
ls = jvm.org.apache.spark.sql.delta.storage.LogStore
try:
    dl = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path)
    print("logStore:", dl.store().getClass().getName())
except Exception as e:
    print("logstore probe failed", str(e)[:300])
stop_spark_session()
