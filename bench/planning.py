"""Planning at scale (issue 29): ``python -m bench.planning``; no broker, no Spark, not in the suite.

A run's planning and state work for ``--partitions N`` partitions (default 100,000) over ``--clusters C`` clusters
(default 20), each cluster holding topics of 100 partitions, all in one stream. The broker answers are simulated
(plain :class:`~dynamic_kafka.model.snapshots.BrokerSnapshot` values: earliest and latest offsets, leader epochs,
topic ids); the metadata is a resolved :class:`~dynamic_kafka.metadata.snapshot.MetadataSnapshot`; the state is a
real state table (delta-rs) in a temporary folder. Measured in a fresh process, per step, wall and CPU time:

- ``first``: the pipeline's first run with ``starting_offsets: latest`` over topics with history, so every range is
  empty: ``StateStore.load`` of no table, ``plan_run``, ``commit_empty_run`` (creates the table with every
  partition's row);
- then a run with 10 new records in every partition, as a run does it: ``load`` (the partition rows and the
  head with the last run's plan), ``plan_run``, ``begin_run`` (writes the plan ahead), one lease renewal
  (``lease``, which the run's lease keeper makes while the run reads), ``commit_run`` (every partition's new
  offset and the run committed).

``planning_s`` (the target: <= 5 s) is the second run's load + plan + begin_run + commit_run wall time; its CPU time
beside it is what to compare on a loaded machine. ``--against REV`` measures a git revision's ``dynamic_kafka`` in
the same way (extracted with ``git archive`` into a temporary folder), alternating with the working tree, and prints
both side by side: the before and after of a change.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from collections.abc import Callable

ROOT = Path(__file__).resolve().parent.parent
TOPIC_PARTITIONS = 100
NEW_RECORDS = 10
TARGET_S = 5.0
STEPS = ("load", "plan", "begin_run", "lease", "commit_run")
TIMED = ("load", "plan", "begin_run", "commit_run")


def _inputs(partitions: int, clusters: int, latest: int, now: datetime) -> tuple[Any, Any]:
    """The resolved metadata and the simulated broker answers: ``partitions`` partitions over ``clusters`` clusters,
    every partition at ``[latest - 1000, latest)`` with leader epoch 3.
    """
    from dynamic_kafka.metadata.models import ClusterMetadata, KafkaStream, metadata_fingerprint
    from dynamic_kafka.metadata.snapshot import MetadataSnapshot
    from dynamic_kafka.model.snapshots import BrokerSnapshot, ClusterSnapshot, PartitionOffsets, TopicSnapshot

    topics_per_cluster = max(1, partitions // (clusters * TOPIC_PARTITIONS))
    names = {f"c{c:02d}": [f"topic-{t:03d}" for t in range(topics_per_cluster)] for c in range(clusters)}
    stream = KafkaStream(
        stream_id="orders",
        clusters={
            cid: ClusterMetadata(cluster_id=cid, bootstrap_servers=f"{cid}:9092", topics=frozenset(topics))
            for cid, topics in names.items()
        },
    )
    metadata = MetadataSnapshot(streams={"orders": stream}, fingerprint=metadata_fingerprint([stream]))
    offsets = {
        p: PartitionOffsets(earliest=max(0, latest - 1000), latest=latest, leader_epoch=3)
        for p in range(TOPIC_PARTITIONS)
    }
    brokers = BrokerSnapshot(
        clusters={
            cid: ClusterSnapshot(
                cluster_id=cid,
                topics={t: TopicSnapshot(topic=t, topic_id=f"{cid}-{t}-id", partitions=dict(offsets)) for t in topics},
            )
            for cid, topics in names.items()
        },
        taken_at=now,
    )
    return metadata, brokers


class _Clock:
    """Wall and CPU time per step."""

    def __init__(self) -> None:
        self.steps: dict[str, dict[str, float]] = {}

    def time(self, name: str, call: Any) -> Any:
        wall, cpu = time.perf_counter(), time.process_time()
        result = call()
        self.steps[name] = {"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu}
        return result


def _summary(commit: Callable[..., int], plan: Any, status: Literal["committed", "empty"]) -> dict[str, Any]:
    """A state commit's summary argument: a RunSummary, or the JSON text older revisions took (``--against``)."""
    from dynamic_kafka.model.summary import RunSummary

    if "summary" in inspect.signature(commit).parameters:
        return {"summary": RunSummary.of_plan(plan, status)}
    return {"summary_json": "{}"}


def measure(partitions: int, clusters: int) -> dict[str, Any]:
    """One measurement in this process (the child): the first run, then an incremental run, step by step."""
    began = time.perf_counter()
    from dynamic_kafka.config.models import PipelineConfig
    from dynamic_kafka.plan.planner import plan_run
    from dynamic_kafka.state.store import StateStore

    imported = time.perf_counter() - began
    now = datetime.now(UTC)
    with tempfile.TemporaryDirectory(prefix="bench-planning-") as folder:
        pipeline = PipelineConfig.model_validate(
            {
                "id": "bench",
                "streams": ["orders"],
                "sink": {"path": str(Path(folder) / "sink")},
                "starting_offsets": {"kind": "latest"},
            }
        )
        store = StateStore(Path(folder) / "state", "bench")
        built = time.perf_counter()
        metadata, brokers = _inputs(partitions, clusters, 5000, now)
        inputs_s = time.perf_counter() - built

        def plan(state: Any, snapshot: Any) -> Any:
            return plan_run(
                pipeline=pipeline,
                metadata=metadata,
                state=state,
                brokers=snapshot,
                run_seq=state.next_run_seq,
                now=now,
            )

        first = _Clock()
        state = first.time("load", store.load)
        empty = first.time("plan", lambda: plan(state, brokers))
        first.time(
            "commit_empty_run",
            lambda: store.commit_empty_run(
                empty, **_summary(store.commit_empty_run, empty, "empty"), expected_version=state.table_version
            ),
        )
        if len(empty.splits) != partitions or not empty.is_empty:
            raise RuntimeError(f"the first plan has {len(empty.splits)} splits, not {partitions} empty ones")

        _, newer = _inputs(partitions, clusters, 5000 + NEW_RECORDS, now)
        run = _Clock()
        state = run.time("load", store.load)
        planned = run.time("plan", lambda: plan(state, newer))
        if len(planned.read_splits) != partitions or planned.planned_records != partitions * NEW_RECORDS:
            raise RuntimeError(f"the second plan reads {planned.planned_records} offsets in {len(planned.read_splits)}")
        version = run.time(
            "begin_run",
            lambda: store.begin_run(
                planned, expected_version=state.table_version, owner="bench", lease_expires_at=now + timedelta(hours=1)
            ),
        )
        version = run.time(
            "lease",
            lambda: store.lease(
                planned, owner="bench", lease_expires_at=now + timedelta(hours=2), expected_version=version
            ),
        )
        run.time(
            "commit_run",
            lambda: store.commit_run(
                planned, **_summary(store.commit_run, planned, "committed"), expected_version=version
            ),
        )
        after = store.load()
        moved = sum(1 for p in after.partitions.values() if p.next_offset == 5000 + NEW_RECORDS)
        if moved != partitions:
            raise RuntimeError(f"the commit moved {moved} partitions, not {partitions}")
        plan_bytes = len(planned.model_dump_json())
    return {
        "partitions": partitions,
        "clusters": clusters,
        "import_s": imported,
        "inputs_s": inputs_s,
        "first": first.steps,
        "run": run.steps,
        "planning_s": sum(run.steps[s]["wall_s"] for s in TIMED),
        "planning_cpu_s": sum(run.steps[s]["cpu_s"] for s in TIMED),
        "plan_json_bytes": plan_bytes,
        "peak_rss_mb": _peak_rss_mb(),
    }


def _peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _child(source: Path, partitions: int, clusters: int) -> dict[str, Any]:
    """Measure ``source``'s ``dynamic_kafka`` in a fresh process (run as a script: the working tree is not on the
    path, only ``source``).
    """
    env = {**os.environ, "PYTHONPATH": str(source)}
    command = [sys.executable, __file__, "--child", "--partitions", str(partitions), "--clusters", str(clusters)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the measurement of {source} failed: {done.stderr[-3000:]}")
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def _extract(revision: str, into: Path) -> Path:
    archive = subprocess.run(
        ["git", "archive", revision, "dynamic_kafka"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def _median(runs: list[dict[str, Any]], *path: str) -> float:
    values = []
    for run in runs:
        value: Any = run
        for key in path:
            value = value[key]
        values.append(value)
    return float(statistics.median(values))


def _table(variants: dict[str, list[dict[str, Any]]]) -> str:
    names = list(variants)
    lines = [
        "| step | " + " | ".join(f"{n} wall / CPU" for n in names) + " |",
        "|---|" + "---|" * len(names),
    ]
    rows = [("first run: plan", ("first", "plan")), ("first run: commit_empty_run", ("first", "commit_empty_run"))]
    rows += [(f"run: {step}", ("run", step)) for step in STEPS]
    for label, (group, step) in rows:
        cells = [
            f"{_median(runs, group, step, 'wall_s'):.2f} / {_median(runs, group, step, 'cpu_s'):.2f} s"
            for runs in variants.values()
        ]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    cells = [
        f"**{_median(runs, 'planning_s'):.2f}** / {_median(runs, 'planning_cpu_s'):.2f} s" for runs in variants.values()
    ]
    lines.append("| planning (load + plan + begin_run + commit_run) | " + " | ".join(cells) + " |")
    cells = [f"{_median(runs, 'peak_rss_mb'):.0f} MB" for runs in variants.values()]
    lines.append("| peak resident memory | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Measure, print the table (and JSON with ``--json``); exit 1 when the working tree misses the target."""
    parser = argparse.ArgumentParser(prog="python -m bench.planning", description=__doc__.split("\n")[0])
    parser.add_argument("--partitions", type=int, default=100_000)
    parser.add_argument("--clusters", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3, help="measurements of each variant (median shown)")
    parser.add_argument("--against", metavar="REV", help="also measure this git revision, alternating")
    parser.add_argument("--json", type=Path, help="write every measurement here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.partitions, args.clusters)))
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-planning-src-") as folder:
        sources = {"now": ROOT}
        if args.against:
            sources = {args.against: _extract(args.against, Path(folder)), **sources}
        variants: dict[str, list[dict[str, Any]]] = {name: [] for name in sources}
        for _ in range(args.repeats):
            for name, source in sources.items():
                variants[name].append(_child(source, args.partitions, args.clusters))
                print(f"{name}: planning {variants[name][-1]['planning_s']:.2f} s", file=sys.stderr, flush=True)
    load = os.getloadavg()
    print(
        f"planning {args.partitions:,} partitions over {args.clusters} clusters, medians of {args.repeats} fresh "
        f"processes (load average {load[0]:.1f}; read the CPU column on a shared machine):\n"
    )
    print(_table(variants))
    wall = _median(variants["now"], "planning_s")
    passed = wall <= TARGET_S
    print(f"\ntarget: planning <= {TARGET_S:.0f} s: {'PASS' if passed else 'MISS'} ({wall:.2f} s)")
    if args.json:
        args.json.write_text(json.dumps({"variants": variants, "target_s": TARGET_S, "passed": passed}, indent=2))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
