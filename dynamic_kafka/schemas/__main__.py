"""Print where the shipped JSON Schemas are, for the ``# yaml-language-server: $schema=...`` header of a file."""

from dynamic_kafka.schemas import METADATA_FILE, PROJECT_CONFIG, shipped_path

print(f"dynamic_kafka.yaml: {shipped_path(PROJECT_CONFIG)}")  # noqa: T201 (the module's output)
print(f"metadata file:      {shipped_path(METADATA_FILE)}")  # noqa: T201
