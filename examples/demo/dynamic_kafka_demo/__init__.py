"""The demo project as a dg project (Dagster Components): see ``defs/pipelines/defs.yaml``."""
