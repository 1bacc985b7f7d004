# ruff: noqa
# A probe kept as evidence for docs/object-storage.md (run by hand against `python -m devtools local-s3 up`, after
# `eval "$(python -m devtools local-s3 status --env)"`: the server checks credentials), not product code.
"""Does S3A (hadoop-aws 3.4.2) send a put-if-absent for create(overwrite=false)? Pre-place an object, then create it
again with the existence check skipped (fs.s3a.create.performance=true), with and without fs.s3a.create.conditional.enabled."""

import os, sys, uuid, boto3
from dynamic_kafka.spark import SparkSettings, build_spark_session, stop_spark_session

E = sys.argv[1]
conf = {
    "spark.jars.packages": "org.apache.hadoop:hadoop-aws:3.4.2,software.amazon.awssdk:s3:2.29.52,software.amazon.awssdk:s3-transfer-manager:2.29.52",
    "spark.jars.excludes": "software.amazon.awssdk:bundle",
    "spark.hadoop.fs.s3a.endpoint": E,
    "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
    "spark.hadoop.fs.s3a.path.style.access": "true",
    "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
    "spark.hadoop.fs.s3a.access.key": os.environ["AWS_ACCESS_KEY_ID"],
    "spark.hadoop.fs.s3a.secret.key": os.environ["AWS_SECRET_ACCESS_KEY"],
    "spark.hadoop.fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
}
spark = build_spark_session(SparkSettings(master="local[1]", conf=conf, class_data_sharing=False))
jvm = spark.sparkContext._jvm
s3 = boto3.client("s3", endpoint_url=E, region_name="us-east-1")
for cond in ("false", "true"):
    key = f"cond/{uuid.uuid4().hex}.json"
    s3.put_object(Bucket="lake", Key=key, Body=b"placed")
    hc = jvm.org.apache.hadoop.conf.Configuration(spark.sparkContext._jsc.hadoopConfiguration())
    hc.set("fs.s3a.impl.disable.cache", "true")
    hc.set("fs.s3a.create.performance", "true")
    hc.set("fs.s3a.create.conditional.enabled", cond)
    p = jvm.org.apache.hadoop.fs.Path(f"s3a://lake/{key}")
    fs = p.getFileSystem(hc)
    try:
        out = fs.create(p, False)
        out.write(bytearray(b"second"))
        out.close()
        result = "create succeeded"
    except Exception as e:
        result = "create failed: " + str(e).splitlines()[0][:200]
    print(
        f"conditional.enabled={cond}: {result}; object now {s3.get_object(Bucket='lake', Key=key)['Body'].read()!r}",
        flush=True,
    )
stop_spark_session()
