# ruff: noqa
# A probe kept as evidence for docs/object-storage.md (run by hand against `python -m devtools local-s3 up`, after
# `eval "$(python -m devtools local-s3 status --env)"`: the server checks credentials), not product code.
"""Racing delta-rs writers on S3 (moto): threads (delta-rs releases the GIL) each open the table at the same version,
meet at a barrier, then commit an overwrite-with-predicate with max_commit_retries=0, as StateStore does."""

import sys, threading, uuid, collections, json, time
import pyarrow as pa, boto3
from deltalake import write_deltalake, DeltaTable, CommitProperties

E = sys.argv[1]
N = int(sys.argv[2])
ROUNDS = int(sys.argv[3])
SO = {
    "AWS_ENDPOINT_URL": E,
    "AWS_ACCESS_KEY_ID": "a",
    "AWS_SECRET_ACCESS_KEY": "b",
    "AWS_REGION": "us-east-1",
    "AWS_ALLOW_HTTP": "true",
}
uri = f"s3://lake/race-{uuid.uuid4().hex[:8]}"
write_deltalake(uri, pa.table({"kind": ["head"], "who": [-1]}), storage_options=SO)
tally = collections.Counter()
errs = collections.Counter()
t0 = time.time()
for r in range(ROUNDS):
    b = threading.Barrier(N)
    res = [None] * N

    def worker(i):
        dt = DeltaTable(uri, storage_options=SO)
        b.wait()
        try:
            write_deltalake(
                dt,
                pa.table({"kind": ["head"], "who": [i]}),
                mode="overwrite",
                predicate="kind = 'head'",
                commit_properties=CommitProperties(max_commit_retries=0, custom_metadata={"who": str(i)}),
            )
            res[i] = "won"
        except Exception as e:
            res[i] = type(e).__name__ + ": " + str(e).splitlines()[0][:100]

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(N)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    winners = [i for i, x in enumerate(res) if x == "won"]
    tally[len(winners)] += 1
    for x in res:
        if x != "won":
            errs[x] += 1
    dt = DeltaTable(uri, storage_options=SO)
    rows = dt.to_pyarrow_table().to_pylist()
    info = dt.history(1)[0]
    assert len(rows) == 1 and len(winners) == 1 and rows[0]["who"] == winners[0] == int(info["who"]), (
        rows,
        winners,
        info,
    )
print(
    json.dumps(
        {
            "table": uri,
            "writers": N,
            "rounds": ROUNDS,
            "winners_per_round": dict(tally),
            "final_version": DeltaTable(uri, storage_options=SO).version(),
            "loser_errors": dict(errs),
            "seconds": round(time.time() - t0, 1),
        },
        indent=1,
    )
)
# deterministic: a log entry already at version v+1 (placed by another client) must make the commit fail, not overwrite it
dt = DeltaTable(uri, storage_options=SO)
v = dt.version()
s3 = boto3.client("s3", endpoint_url=E, region_name="us-east-1")
key = uri.split("lake/")[1] + f"/_delta_log/{v + 1:020d}.json"
placed = b'{"commitInfo":{"placed_by":"probe"}}\n'
s3.put_object(Bucket="lake", Key=key, Body=placed)
try:
    write_deltalake(
        dt,
        pa.table({"kind": ["head"], "who": [99]}),
        mode="overwrite",
        predicate="kind = 'head'",
        commit_properties=CommitProperties(max_commit_retries=0),
    )
    print("pre-placed: commit SUCCEEDED")
except Exception as e:
    print("pre-placed: commit failed:", type(e).__name__, str(e).splitlines()[0][:200])
print("pre-placed entry intact:", s3.get_object(Bucket="lake", Key=key)["Body"].read() == placed)
