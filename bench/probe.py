"""A run's requests to its Spark Connect server and its imports before the first one, counted in the run's process.

:data:`CHILD` is the program of a probed run: ``python -X importtime -c CHILD <dynamic-kafka arguments>``. Before
the CLI starts, it hooks the import of pyspark's gRPC stub (``SparkConnectServiceStub``), so every call the client
makes through a stub (ExecutePlan, AnalyzePlan, Config, ReattachExecute, ReleaseExecute, ReleaseSession, ...) is
counted by name, and it prints a marker line on stderr at the first one. Nothing of pyspark is imported early, so
the run imports what it imports without the probe, in the same order; the product carries no counting code.
:func:`figures` reads the run's stderr: the requests by kind, and the import time before the marker
(``-X importtime``'s top-level lines above it: what the process imported before it could ask the server anything).
"""

from __future__ import annotations

import json
import re

MARK = "dynamic-kafka-probe:"

CHILD = f"""
import importlib.machinery, json, os, sys, time
_counts = {{}}
_first = []

def _counted(name, call):
    def counted(*args, **kwargs):
        if not _first:
            _first.append(time.time())
            print({MARK!r} + " first request", file=sys.stderr, flush=True)
        _counts[name] = _counts.get(name, 0) + 1
        return call(*args, **kwargs)
    return counted

class _StubFinder:
    name = "pyspark.sql.connect.proto.base_pb2_grpc"

    def find_spec(self, name, path, target=None):
        if name != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            stub = module.SparkConnectServiceStub
            made = stub.__init__

            def __init__(self, channel):
                made(self, channel)
                for rpc, call in list(vars(self).items()):
                    setattr(self, rpc, _counted(rpc, call))

            stub.__init__ = __init__

        spec.loader.exec_module = exec_module
        return spec

sys.meta_path.insert(0, _StubFinder())
from dynamic_kafka.cli.main import main
code = main(sys.argv[1:])
if "pyspark" in sys.modules:
    from dynamic_kafka.spark.session import stop_spark_session
    stop_spark_session()
print({MARK!r} + " " + json.dumps({{"requests": _counts, "first_request_at": _first[0] if _first else None}}),
      file=sys.stderr, flush=True)
sys.stdout.flush()
os._exit(code)
"""

_TOP_LEVEL = re.compile(r"^import time:\s+\d+ \|\s+(\d+) \| \S", re.MULTILINE)
_ANY_IMPORT = re.compile(r"^import time:\s+\d+ \|", re.MULTILINE)


def figures(stderr: str, launched_at: float) -> dict[str, float]:
    """What a probed run's stderr says: ``requests`` (all kinds), ``requests_<Kind>`` per kind, ``import_s``
    (all imports), ``import_before_request_s`` and ``modules_before_request`` (before the first request), and
    ``first_request_s`` (from ``launched_at``, the ``time.time()`` just before the process was started).

    A run that made no request reports its whole import time as before the request, and no ``first_request_s``.
    """
    head, marker, _ = stderr.partition(f"{MARK} first request")
    report = json.loads(stderr.rsplit(MARK, 1)[1])
    requests: dict[str, int] = report["requests"]
    result: dict[str, float] = {
        "requests": float(sum(requests.values())),
        **{f"requests_{name}": float(count) for name, count in sorted(requests.items())},
        "import_s": sum(int(m) for m in _TOP_LEVEL.findall(stderr)) / 1e6,
        "import_before_request_s": sum(int(m) for m in _TOP_LEVEL.findall(head)) / 1e6,
        "modules_before_request": float(len(_ANY_IMPORT.findall(head))),
        "modules_imported": float(len(_ANY_IMPORT.findall(stderr))),
    }
    if marker and report["first_request_at"] is not None:
        result["first_request_s"] = report["first_request_at"] - launched_at
    return result
