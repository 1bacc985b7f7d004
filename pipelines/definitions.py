"""The Dagster entry point (``workspace.yaml``): ``defs`` for the project config named by ``$DYNAMIC_KAFKA_CONFIG``,
else ``dynamic_kafka.yaml`` in the working directory, else the demo's (``examples/demo/dynamic_kafka.yaml``). What
each pipeline gets is listed in :mod:`pipelines.build`.

Loading reads the config file and nothing else: no secret, no metadata service, no broker, no Spark.
"""

from pipelines.build import build_definitions, config_path_from_env

defs = build_definitions(config_path_from_env())
