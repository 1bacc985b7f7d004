"""The values more than one stage reads: splits and plans (:mod:`.plan`), the state and broker snapshots the
planner reads (:mod:`.snapshots`) and the run summary (:mod:`.summary`).

They are plain frozen pydantic models with no I/O, so the planner, the state store, the Kafka client, the sink,
the runner and the reports all import them without importing each other.
"""
