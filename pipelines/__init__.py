"""Dagster definitions for dynamic-kafka. A thin layer over the `dynamic_kafka` library."""
