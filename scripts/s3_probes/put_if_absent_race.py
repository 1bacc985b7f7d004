# ruff: noqa
# A probe kept as evidence for docs/object-storage.md (run by hand against `python -m devtools local-s3 up`, after
# `eval "$(python -m devtools local-s3 status --env)"`: the server checks credentials), not product code.
import boto3, botocore, concurrent.futures as cf
import uuid

K = "k-" + uuid.uuid4().hex
s3 = boto3.client(
    "s3",
    endpoint_url="http://127.0.0.1:19555",
    region_name="us-east-1",
)
s3.put_object(Bucket="lake", Key=K, Body=b"first", IfNoneMatch="*")
try:
    s3.put_object(Bucket="lake", Key=K, Body=b"second", IfNoneMatch="*")
    print("second put SUCCEEDED (bad)")
except botocore.exceptions.ClientError as e:
    print("second put:", e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"])
print("body:", s3.get_object(Bucket="lake", Key=K)["Body"].read())


# race: N threads put-if-absent same key, repeated
def race(i, n=8):
    key = f"race/{K}/{i}"

    def put(j):
        c = boto3.client(
            "s3",
            endpoint_url="http://127.0.0.1:19555",
            region_name="us-east-1",
        )
        try:
            c.put_object(Bucket="lake", Key=key, Body=str(j).encode() * 10, IfNoneMatch="*")
            return 1
        except botocore.exceptions.ClientError:
            return 0

    with cf.ThreadPoolExecutor(n) as ex:
        return sum(ex.map(put, range(n)))


res = [race(i) for i in range(30, 530)]
import collections

print("winners per race (8 racers, 500 races):", collections.Counter(res))
