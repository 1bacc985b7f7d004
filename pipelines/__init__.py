"""This repository's Dagster code location: a thin ``definitions.py`` over :mod:`dynamic_kafka.dagster`."""
