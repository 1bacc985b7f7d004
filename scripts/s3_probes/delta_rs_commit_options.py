# ruff: noqa
# A probe kept as evidence for docs/object-storage.md (run by hand against `python -m devtools local-s3 up`, after
# `eval "$(python -m devtools local-s3 status --env)"`: the server checks credentials), not product code.
import uuid, boto3, pyarrow as pa
from deltalake import write_deltalake, DeltaTable, CommitProperties
from dynamic_kafka.storage import StorageConfig, delta_rs_storage_options, parse_location
import os

os.environ["K"] = os.environ["AWS_ACCESS_KEY_ID"]
os.environ["S"] = os.environ["AWS_SECRET_ACCESS_KEY"]
st = StorageConfig(
    endpoint="http://127.0.0.1:19555",
    region="us-east-1",
    path_style=True,
    access_key_id="${env:K}",
    secret_access_key="${env:S}",
)
so = delta_rs_storage_options(st)
print(sorted(so))
loc = parse_location(f"s3a://lake/p6-{uuid.uuid4().hex[:6]}")
write_deltalake(loc.delta_rs_uri, pa.table({"x": [1]}), storage_options=so)
dt = DeltaTable(loc.delta_rs_uri, storage_options=so)
s3 = boto3.client(
    "s3",
    endpoint_url="http://127.0.0.1:19555",
    region_name="us-east-1",
)
s3.put_object(Bucket="lake", Key=f"{loc.key}/_delta_log/{1:020d}.json", Body=b'{"commitInfo":{}}\n')
try:
    write_deltalake(dt, pa.table({"x": [2]}), mode="append", commit_properties=CommitProperties(max_commit_retries=0))
    print("commit over pre-placed: SUCCEEDED")
except Exception as e:
    print("commit over pre-placed:", type(e).__name__)
for bad in ({**so, "AWS_CONDITIONAL_PUT": "disabled"}, {**so, "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}):
    l2 = f"s3://lake/p6b-{uuid.uuid4().hex[:6]}"
    try:
        write_deltalake(l2, pa.table({"x": [1]}), storage_options=bad)
    except Exception as e:
        print(
            [k for k in bad if k not in so] or "AWS_CONDITIONAL_PUT=disabled",
            "-> create fails:",
            type(e).__name__,
            str(e).splitlines()[0][:160],
        )
        continue
    d2 = DeltaTable(l2, storage_options=bad)
    k2 = l2.split("lake/")[1]
    s3.put_object(Bucket="lake", Key=f"{k2}/_delta_log/{1:020d}.json", Body=b'{"commitInfo":{}}\n')
    try:
        write_deltalake(
            d2, pa.table({"x": [2]}), mode="append", commit_properties=CommitProperties(max_commit_retries=0)
        )
        r = "SUCCEEDED"
    except Exception as e:
        r = type(e).__name__ + " " + str(e).splitlines()[0][:150]
    body = s3.get_object(Bucket="lake", Key=f"{k2}/_delta_log/{1:020d}.json")["Body"].read()
    print(
        [k for k in bad if k not in so] or "AWS_CONDITIONAL_PUT=disabled",
        "->",
        r,
        "| pre-placed entry",
        "intact" if body.startswith(b'{"commitInfo":{}}') else "OVERWRITTEN",
    )
