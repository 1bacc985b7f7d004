"""Development services and test helpers of the dynamic-kafka repository; not part of the product.

Real local services for demos, tests and benchmarks (:mod:`devtools.local_kafka`, :mod:`devtools.local_registry`,
:mod:`devtools.local_s3`, :mod:`devtools.local_postgres`, :mod:`devtools.local_spark_connect`), their command line
(``python -m devtools SERVICE up|down|status``), and the helpers that tests, benchmarks and the demo share
(:mod:`devtools.testing`). The package ships in no wheel: it is importable from a checkout (``make setup``). It may
import :mod:`dynamic_kafka`; the library and the Dagster layer never import it (a ruff banned-api rule).
"""
