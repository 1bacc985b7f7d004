"""The operations on a pipeline besides a run, each entered through the protocol's writer guard when it
writes: backfill, dead-letter replay, maintenance, offsets reset, status, health and the config check.
"""
